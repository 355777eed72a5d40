"""Low-precision benchmark (issue 14): ratios against cuBLAS measured in one process (triton.testing.do_bench).

    python benchmarks/bench_lowbit.py --part gemm8    # int8 / fp8 GEMM 8192^3 vs torch._int_mm, torch._scaled_mm, fp16
    python benchmarks/bench_lowbit.py --part a16w4    # int4 / uint4 (+ zero points), M in {1, 16}, two (N, K)
    python benchmarks/bench_lowbit.py --part types    # every 1-8-bit weight type at M = 16, N = 57344, K = 8192
    python benchmarks/bench_lowbit.py --part prefill  # int4 at M = 4096
    python benchmarks/bench_lowbit.py --part hand     # examples/dequantize_gemm.py's hand-written program, M 16 / 4096

Ratios are cuBLAS time / tilex time (higher is better); the weight-type table also prints the target
0.8 * 16 / bits of the issue.
"""
import argparse
import os
import runpy
from concurrent.futures import ThreadPoolExecutor

import torch

import tilex
from tilex import dtypes, ops, quant
from tilex.kernels.gemm_8bit import int_matmul, scaled_matmul
from tilex.kernels.quant_matmul import QuantTiles


def _bench(fn):
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=200)


def gemm8(size=8192):
    S = size
    a16 = torch.randn(S, S, device="cuda", dtype=torch.float16)
    b16 = torch.randn(S, S, device="cuda", dtype=torch.float16)
    t16 = _bench(lambda: a16 @ b16)
    a8, b8 = a16.to(torch.float8_e4m3fn), b16.to(torch.float8_e4m3fn)
    one = torch.ones(1, device="cuda")
    t_sc = _bench(lambda: torch._scaled_mm(a8, b8.T, one, one, out_dtype=torch.bfloat16))
    t_scf = _bench(lambda: torch._scaled_mm(a8, b8.T, one, one, out_dtype=torch.bfloat16, use_fast_accum=True))
    ai = torch.randint(-128, 127, (S, S), dtype=torch.int8, device="cuda")
    bi = torch.randint(-128, 127, (S, S), dtype=torch.int8, device="cuda")
    t_int = _bench(lambda: torch._int_mm(ai, bi.T))
    with ThreadPoolExecutor(4) as ex:
        k_fp8 = ex.submit(tilex.compile, scaled_matmul(S, S, S), out_idx=-1)
        k_int = ex.submit(tilex.compile, int_matmul(S, S, S, num_stages=4, swizzle=16), out_idx=-1)
        k_fp8, k_int = k_fp8.result(), k_int.result()
    t_fp8 = _bench(lambda: k_fp8(a8, b8, one, one))
    t_i8 = _bench(lambda: k_int(ai, bi))
    fl = 2 * S ** 3
    print(f"| GEMM {S}^3 | tilex ms | TFLOP/s (TOPS) | vs torch 8-bit | vs cuBLAS fp16 |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| fp8 e4m3 -> bf16 | {t_fp8:.3f} | {fl / t_fp8 / 1e9:.0f} | {t_sc / t_fp8:.3f} (_scaled_mm), "
          f"{t_scf / t_fp8:.3f} (use_fast_accum) | {t16 / t_fp8:.3f} |")
    print(f"| int8 -> int32 | {t_i8:.3f} | {fl / t_i8 / 1e9:.0f} | {t_int / t_i8:.3f} (_int_mm) | {t16 / t_i8:.3f} |")
    print(f"(cuBLAS fp16 {t16:.3f} ms = {fl / t16 / 1e9:.0f} TFLOP/s, _scaled_mm {t_sc:.3f} ms, fast accum "
          f"{t_scf:.3f} ms, _int_mm {t_int:.3f} ms)")


TILE_CHOICES = [QuantTiles(bn=128, bk=128, threads=128, num_stages=4), QuantTiles(bn=64, bk=256, threads=128,
                num_stages=4), QuantTiles(bn=128, bk=256, threads=128, num_stages=3),
                QuantTiles(bn=64, bk=128, threads=128, num_stages=8)]


def _best_quant(M, N, K, wt, g, zp, tiles_list=TILE_CHOICES, act="float16", splits=(None,)):
    """(best ms, (tiles, split_k)) of tilex.ops.quant_matmul over `tiles_list` (each packs the weight for its
    tile) and the split-K counts `splits` (None: the library's own choice, ops.auto_split_k)."""
    w = torch.randn(N, K, device="cuda", dtype=torch.float16) / K ** 0.5
    qw = quant.quantize(w, wt, group_size=g, zero_point=zp)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    best = None
    for tiles in tiles_list:
        try:
            pw = ops.pack_weight(qw, act=act, tiles=tiles)
        except ValueError as e:
            print(f"  ({wt} {tiles}: {e})")
            continue
        for sk in splits:
            try:
                ops.quant_matmul(x, pw, split_k=sk)
                t = _bench(lambda: ops.quant_matmul(x, pw, split_k=sk))
            except Exception as e:  # noqa: BLE001 - a tile that does not fit is reported, not fatal
                print(f"  ({wt} {tiles} split {sk}: {type(e).__name__}: {str(e)[:120]})")
                continue
            if best is None or t < best[0]:
                best = (t, (tiles, sk if sk else f"auto {ops.auto_split_k(M, pw, x.device)}"))
    return best


def _linear16(M, N, K):
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    return _bench(lambda: torch.nn.functional.linear(x, w))


def a16w4():
    print("| A16W4 | M | N x K | cuBLAS fp16 us | tilex us | cuBLAS/tilex | tiles |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for N, K in ((57344, 8192), (8192, 8192)):
        for M in (1, 16):
            t16 = _linear16(M, N, K)
            for wt, zp in (("int4", False), ("uint4", True)):
                best = _best_quant(M, N, K, wt, 128, zp, splits=(None, 1, 2, 3, 4) if N * K <= 8192 * 8192 else (None,))
                if best:
                    print(f"| {wt}{' +zeros' if zp else ''} g128 | {M} | {N} x {K} | {t16 * 1e3:.1f} | "
                          f"{best[0] * 1e3:.1f} | {t16 / best[0]:.2f} | {best[1]} |")


def types():
    """Every weight type at M = 16 (symmetric; uint with zero-points), kernels compiled in parallel first."""
    from tilex.ops.quant import _kernel

    M, N, K = 16, 57344, 8192
    t16 = _linear16(M, N, K)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16) / K ** 0.5
    jobs = []
    for wt in dtypes.ALL_TYPES:
        if not wt.exact_in("float16") or (wt.bits == 1 and wt.kind != "float"):
            continue
        qw = quant.quantize(w, wt, group_size=128, zero_point=wt.kind == "uint")
        for tiles in TILE_CHOICES[:2]:
            jobs.append((wt, tiles, ops.pack_weight(qw, tiles=tiles)))
        del qw
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda j: _kernel(M, j[2]), jobs))
    best = {}
    for wt, tiles, pw in jobs:
        t = _bench(lambda: ops.quant_matmul(x, pw))
        if str(wt) not in best or t < best[str(wt)][0]:
            best[str(wt)] = (t, tiles, wt)
    print("| type (M=16, N=57344, K=8192, g128) | tilex us | cuBLAS/tilex | target 0.8*16/bits | tiles |")
    print("| --- | --- | --- | --- | --- |")
    for t, tiles, wt in best.values():
        print(f"| {wt} | {t * 1e3:.1f} | {t16 / t:.2f} | {0.8 * 16 / wt.bits:.2f} | {tiles} |")


def prefill():
    M, N, K = 4096, 57344, 8192
    t16 = _linear16(M, N, K)
    tiles = [QuantTiles(bn=128, bk=64, threads=256, num_stages=3), QuantTiles(bn=128, bk=64, threads=128,
                                                                              num_stages=3)]
    best = _best_quant(M, N, K, "int4", 128, False, tiles)
    if best:
        print(f"prefill int4 M={M}: cuBLAS fp16 {t16:.3f} ms, tilex {best[0]:.3f} ms, ratio {t16 / best[0]:.3f} "
              f"{best[1]}")


# tiles a user would pick for the hand-written program: (bm, bn, bk, stages, threads)
HAND_TILES = {16: [(16, 128, 128, 3, 128), (16, 64, 128, 4, 256), (16, 64, 256, 4, 256), (16, 32, 256, 4, 128)],
              4096: [(128, 256, 64, 3, 256), (256, 128, 64, 4, 256), (256, 128, 128, 2, 256), (256, 128, 64, 3, 256)]}


def hand(N=8192, K=8192, g=128):
    """The TileLang-style A16W4 program of examples/dequantize_gemm.py (uint8 nibbles decoded in a T.Parallel loop
    into a shared float16 tile, then T.gemm), compiled as written; checked against torch, timed per tile."""
    ex = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                     "dequantize_gemm.py"))
    qw = quant.quantize(torch.randn(N, K, device="cuda") / K ** 0.5, "uint4", group_size=g)
    b, s, wd = ex["pack_nibbles"](qw.codes), qw.scales.half(), quant.dequantize(qw).float()
    print("| hand-written A16W4 | M | N x K | tile (bm, bn, bk, stages, threads) | options | cuBLAS fp16 us | "
          "tilex us | cuBLAS/tilex |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for M, tiles in HAND_TILES.items():
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        t16 = _linear16(M, N, K)
        ref = x.float() @ wd.T
        for tile in tiles:
            # also with the decoded tile kept in shared memory (transform/register_operand.py turned off)
            for opts in ({}, {"tilex.disable_decode_into_registers": True}):
                k = tilex.compile(ex["dequant_gemm_kernel"](M, N, K, g, *tile), out_idx=-1, pass_configs=opts)
                torch.testing.assert_close(k(x, b, s).float(), ref, atol=2e-2, rtol=2e-2)
                t = _bench(lambda: k(x, b, s))
                print(f"| uint4 g{g} | {M} | {N} x {K} | {tile} | {'shared' if opts else '-'} | "
                      f"{t16 * 1e3:.1f} | {t * 1e3:.1f} | {t16 / t:.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["gemm8", "a16w4", "types", "prefill", "hand", "all"], default="all")
    args = ap.parse_args()
    parts = {"gemm8": gemm8, "a16w4": a16w4, "types": types, "prefill": prefill, "hand": hand}
    for name, fn in parts.items():
        if args.part in (name, "all"):
            fn()


if __name__ == "__main__":
    main()
