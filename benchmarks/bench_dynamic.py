"""Dynamic shapes: runtime selection over M (WaveTune's tables, `tilex.autotune(..., dynamic={"m": ...})`) against
the exhaustive per-M oracle, the best single configuration and cuBLAS; and the host time of a call.

    python benchmarks/bench_dynamic.py --part select     # dynamic-M GEMM, N = K = 8192 and N = 28672, K = 8192
    python benchmarks/bench_dynamic.py --part overhead   # host time per call of a tiny kernel vs torch.add
    python benchmarks/bench_dynamic.py --part devices    # tuning throughput on one GPU vs every GPU of the host

Every ratio is measured in one process (`tilex.autotuner.do_bench`, L2 flushed).
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch

import tilex
import tilex.language as T
from tilex.autotuner import COMPILED, AutoTuner, do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gemm import CONFIGS, program  # noqa: E402

# every GEMM config of bench_gemm that computes C = A @ B from scratch (split-K adds into C; stream-K is a pass
# config, not a program parameter), and 128x128 / 64x256 tiles for the middle of the M range, where 128x256 tiles
# leave SMs idle and swap-AB tiles waste the tensor cores
DYNAMIC_CONFIGS = [c for c in CONFIGS if not (len(c) > 6 and c[6] > 1) and not (len(c) > 8 and c[8])] + [
    (128, 128, 64, 4, 256, 0, 0, 1),
    (128, 128, 64, 5, 128, 0, 0, 1),
    (128, 128, 64, 4, 256, 8, 0, 1),
    (64, 256, 64, 4, 128, 0, 0, 1),
] + [  # swap-AB tiles of 256 columns of C and 96-192 rows of A (the instruction's N side takes any multiple of 8),
    # so that some row-block height fits the M of a call into whole waves, as cuBLAS's kernels do
    (96, 256, 64, 4, 256, 0, -1, 1),
    (128, 256, 64, 4, 256, 0, -1),
    (136, 256, 64, 4, 256, 0, -1),
    (160, 256, 64, 4, 256, 0, -1),
    (176, 256, 64, 4, 256, 0, -1),
    (192, 256, 64, 4, 256, 0, -1),
    (88, 128, 64, 8, 128, 0, -1),
    (104, 128, 64, 7, 128, 0, -1),
    (184, 128, 64, 5, 256, 0, -1),
    (200, 128, 64, 5, 256, 0, -1),
] + [  # the same tiles writing C through a shared tile of 8-32 rows of C and TMA stores (one such tile fits
    # beside the pipeline's stages), instead of scattered stores straight from the registers
    (128, 256, 64, 4, 256, 0, -1, 32),
    (136, 256, 64, 4, 256, 0, -1, 8),
    (160, 256, 64, 4, 256, 0, -1, 32),
    (176, 256, 64, 4, 256, 0, -1, 16),
    (192, 256, 64, 3, 256, 0, -1, 32),
]


def gemm(M, N, K, cfg):
    """The factory the tuner calls: one of bench_gemm's programs, chosen by `cfg`."""
    return program(M, N, K, "float16", cfg)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def test_values(count, lo, hi, exclude, seed=0):
    """`count` values log-uniform in [lo, hi], none of them in `exclude` (the profiled values)."""
    rng = np.random.default_rng(seed)
    out = set()
    while len(out) < count:
        v = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        if lo <= v <= hi and v not in exclude:
            out.add(v)
    return sorted(out)


def select(N, K, max_m, count, rep, rounds, stream_k=False):
    print(f"\n## dynamic M, N = {N}, K = {K}: {len(DYNAMIC_CONFIGS)} configs, M in [1, {max_m}]"
          f"{', stream-K' if stream_k else ''}", flush=True)
    tuner = AutoTuner(gemm, [{"cfg": c} for c in DYNAMIC_CONFIGS], out_idx=-1, ref_prog=lambda a, b: a @ b,
                      dynamic={"m": max_m}, cache=False, progress=False,
                      pass_configs={"tilex.stream_k": 1} if stream_k else None)
    t0 = time.time()
    res = tuner.run(T.dynamic("m"), N, K)
    tuning_s = time.time() - t0
    dk = res.kernel
    profiled = {v for points in dk.samples.values() for v, _ in points}
    print(f"tuning (compile + profile): {tuning_s:.1f} s; profiled values per macro config: "
          f"{sorted(profiled)[:8]}... ({len(profiled)} distinct); table {dk.table.nbytes()} bytes", flush=True)
    values = test_values(count, 1, max_m, profiled)
    a_max = torch.randn(max_m, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    live = [i for i, k in enumerate(dk.kernels) if k is not None]
    rows = []
    for m in values:
        a = a_max[:m]
        # every contender in alternation, best of `rounds` (clocks drift over a long sweep of large GEMMs)
        fns = {"cublas": lambda: a @ b, "dyn": lambda: dk(a, b)}
        fns.update({i: (lambda k=dk.kernels[i]: k(a, b)) for i in live})
        best = dict.fromkeys(fns, float("inf"))
        for _ in range(rounds):
            for key, fn in fns.items():
                best[key] = min(best[key], do_bench(fn, 2, rep))
        t_cublas, t_dyn = best["cublas"], best["dyn"]
        per = {i: best[i] for i in live}
        oracle = min(per, key=per.get)
        rows.append((m, t_cublas, t_dyn, per, oracle, dk.choose(m)))
        print(f"M={m:5d}: cuBLAS {t_cublas:.4f} ms, selected #{dk.choose(m)} {t_dyn:.4f} ms, oracle #{oracle} "
              f"{per[oracle]:.4f} ms -> selected/oracle {per[oracle] / t_dyn:.3f}, cuBLAS/selected "
              f"{t_cublas / t_dyn:.3f}", flush=True)
    single = {i: geomean([r[3][i] / r[3][r[4]] for r in rows]) for i in live}
    best_single = min(single, key=single.get)
    vs_oracle = geomean([r[3][r[4]] / r[2] for r in rows])
    vs_single = geomean([r[3][best_single] / r[2] for r in rows])
    vs_cublas = geomean([r[1] / r[2] for r in rows])
    oracle_vs_cublas = geomean([r[1] / r[3][r[4]] for r in rows])
    print(f"\nN={N} K={K}: selection / oracle {vs_oracle:.3f} (target >= 0.95), selection / best single config "
          f"(#{best_single} {DYNAMIC_CONFIGS[best_single]}) {vs_single:.3f} (>= 1.15), cuBLAS / selection "
          f"{vs_cublas:.3f} (>= 1.0; the oracle's: {oracle_vs_cublas:.3f}); tables {dk.table.nbytes()} bytes",
          flush=True)
    # the decision alone: reading the size and the table lookup, per call
    a = a_max[:777]
    n = 200000
    t = time.perf_counter()
    for _ in range(n):
        dk.kernel_for(a.shape[0])
    decide_us = (time.perf_counter() - t) / n * 1e6
    print(f"decision per call: {decide_us:.2f} us (size read + table lookup)", flush=True)
    return vs_oracle, vs_single, vs_cublas, tuning_s


# ---- host time per call ------------------------------------------------------------------------------------------
def add_program(n, block=256):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
    return main


def host_us(fns: dict, n=20000, rounds=5) -> dict:
    """Host time per call of each of `fns`: `n` back-to-back calls of a kernel too small for the GPU to be the
    bottleneck, best of `rounds`; the contenders take turns within each round, so that the host's drift (its
    speed changes by tens of percent between runs) hits them alike."""
    for f in fns.values():
        for _ in range(500):
            f()
    torch.cuda.synchronize()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for key, f in fns.items():
            t = time.perf_counter()
            for _ in range(n):
                f()
            torch.cuda.synchronize()
            best[key] = min(best[key], (time.perf_counter() - t) / n * 1e6)
    return best


def overhead():
    n = 4096
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    static = tilex.compile(add_program(n), out_idx=-1)
    dynamic = tilex.compile(add_program(T.dynamic("n")), out_idx=-1)
    tuner = AutoTuner(add_program, [{"block": b} for b in (128, 256, 512)], out_idx=-1,
                      ref_prog=lambda a, b: a + b, dynamic={"n": 1 << 20}, cache=False, progress=False)
    selected = tuner.run(T.dynamic("n")).kernel
    for k in (static, dynamic, selected):
        torch.testing.assert_close(k(x, y), x + y)
    fns = {"torch.add": lambda: torch.add(x, y), "tilex, static shape": lambda: static(x, y),
           "tilex, dynamic shape": lambda: dynamic(x, y),
           "tilex, dynamic + runtime selection": lambda: selected(x, y)}
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def _add(a, b, c, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(c + i, tl.load(a + i, mask=i < n) + tl.load(b + i, mask=i < n), mask=i < n)

        def tri():
            c = torch.empty_like(x)
            _add[(triton.cdiv(n, 256),)](x, y, c, n, BLOCK=256)
            return c
        fns["triton"] = tri
    except ImportError:
        pass
    res = host_us(fns)
    print("\n| call | host us per call | / torch.add |\n| --- | --- | --- |")
    for k, v in res.items():
        print(f"| {k} | {v:.2f} | {v / res['torch.add']:.2f} |")


# ---- tuning throughput over the GPUs of the host -----------------------------------------------------------------
def devices_part(M=4096, N=8192, K=8192, max_m=16384):
    """Wall time of the two measuring phases on GPU 0 alone and on every GPU (compiled once, before timing):
    the static benchmark phase over DYNAMIC_CONFIGS at one M, and the dynamic profile of them over M."""
    from tilex.autotuner import dynamic as dyn
    from tilex.autotuner.devices import bench_devices
    from tilex.autotuner.inputs import default_supply

    every = bench_devices()
    print(f"\n## tuning throughput: {len(every)} GPU(s) ({torch.cuda.get_device_name(0)})", flush=True)
    tuner = AutoTuner(gemm, [{"cfg": c} for c in DYNAMIC_CONFIGS], out_idx=-1, ref_prog=lambda a, b: a @ b,
                      cache=False, progress=False, record=False, warmup=5, rep=20)
    report = tuner.compile(M, N, K)
    n_compiled = len(report.compiled)
    rows = []

    def bench_phase():
        for r in report.results:  # measure them again: a benchmark marks what it measured
            if r.kernel is not None:
                r.status = COMPILED
        tuner.benchmark(report)

    for devs in ([every[0]], every) if len(every) > 1 else ([every[0]],):
        tuner.devices = devs
        bench_phase()  # warm: inputs, flush buffers, module loads on every device
        t = time.time()
        bench_phase()
        rows.append((f"benchmark phase, {n_compiled} configs, M = {M}", len(devs), time.time() - t))
    dtuner = AutoTuner(gemm, [{"cfg": c} for c in DYNAMIC_CONFIGS], out_idx=-1, cache=False, progress=False,
                       record=False, dynamic={"m": max_m})
    dreport = dtuner.compile(T.dynamic("m"), N, K)
    kernels = {r.index: r.kernel for r in dreport.compiled}
    funcs = {i: dreport.job.build_func(i) for i in kernels}
    first = next(iter(kernels.values()))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for devs in ([every[0]], every) if len(every) > 1 else ([every[0]],):
        t = time.time()
        _, _, samples = dyn.profile(kernels, funcs, "m", max_m,
                                    lambda: dyn.sized_supply(first.params, "m", max_m, default_supply), sms,
                                    devices=devs)
        n = sum(len(v) for v in samples.values())
        rows.append((f"dynamic profile, {len(kernels)} configs, {n} samples", len(devs), time.time() - t))
    print("\n| phase | GPUs | wall s | throughput vs one GPU |\n| --- | --- | --- | --- |")
    base = {}
    for what, g, sec in rows:
        base.setdefault(what, sec)
        print(f"| {what} | {g} | {sec:.1f} | {base[what] / sec:.2f}x |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--part", choices=["select", "overhead", "devices", "all"], default="all")
    p.add_argument("--max-m", type=int, default=16384)
    p.add_argument("--count", type=int, default=40)
    p.add_argument("--rep", type=float, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shapes", default="8192x8192,28672x8192")
    p.add_argument("--stream-k", action="store_true", help="compile every configuration with tilex.stream_k (the "
                   "persistent ones then share the tiles the run-time count leaves over)")
    args = p.parse_args()
    if args.part in ("overhead", "all"):
        overhead()
    if args.part in ("devices", "all"):
        devices_part()
    if args.part in ("select", "all"):
        out = []
        for s in args.shapes.split(","):
            N, K = map(int, s.split("x"))
            out.append((s, *select(N, K, args.max_m, args.count, args.rep, args.rounds, args.stream_k)))
        print("\n| N x K | selection / oracle | selection / best single | cuBLAS / selection | tuning s |")
        print("| --- | --- | --- | --- | --- |")
        for s, a, b, c, t in out:
            print(f"| {s} | {a:.3f} | {b:.3f} | {c:.3f} | {t:.0f} |")


if __name__ == "__main__":
    main()
