"""GEMM benchmark: ratio torch (cuBLAS) time / tilex time (higher is better), measured in one process."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import torch  # noqa: E402
from gemm_kernels import matmul  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import tilex  # noqa: E402

CONFIGS = [  # (bm, bn, bk, stages, threads)
    (128, 128, 64, 3, 128),
    (128, 128, 64, 4, 128),
    (128, 256, 64, 3, 256),
    (128, 256, 64, 4, 256),
    (256, 128, 64, 3, 256),
    (256, 128, 64, 4, 256),
]


def bench(M, N, K, dtype, configs):
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(K, N, device="cuda", dtype=tdt)
    ref = a @ b
    t_torch = do_bench(lambda: a @ b, warmup=25, rep=200)
    best = None
    for cfg in configs:
        bm, bn, bk, st, th = cfg
        try:
            k = tilex.compile(matmul(M, N, K, bm, bn, bk, st, th, dtype=dtype), out_idx=[2])
            c = k(a, b)
            torch.testing.assert_close(c.float() / K ** 0.5, ref.float() / K ** 0.5, atol=1e-2, rtol=1e-2)
        except Exception as e:  # noqa: BLE001 - report and move on
            print(f"  config {cfg}: failed: {str(e).splitlines()[0][:200]}")
            continue
        t = do_bench(lambda: k(a, b), warmup=25, rep=200)
        print(f"  config {cfg}: {2 * M * N * K / t * 1e-9:.0f} TFLOP/s, ratio {t_torch / t:.3f}")
        if best is None or t < best[0]:
            best = (t, cfg)
    return t_torch, best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="float16")
    p.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192")
    args = p.parse_args()
    print(f"device: {torch.cuda.get_device_name()}")
    rows = []
    for s in args.shapes.split(","):
        M, N, K = map(int, s.split("x"))
        print(f"{s} {args.dtype}:")
        t_torch, best = bench(M, N, K, args.dtype, CONFIGS)
        if best is None:
            rows.append((s, t_torch, None, None))
        else:
            rows.append((s, t_torch, best[0], best[1]))
    print("\nshape | torch ms | tilex ms | torch/tilex | best config")
    for s, tt, tx, cfg in rows:
        if tx is None:
            print(f"{s} | {tt:.3f} | - | - | none worked")
        else:
            print(f"{s} | {tt:.3f} | {tx:.3f} | {tt / tx:.3f} | {cfg}")


if __name__ == "__main__":
    main()
