"""Autotune the GEMM tile program `matmul` (tilex/kernels/gemm.py) over 8 configurations (incl. C staged through
shared memory) and compare the best with torch (cuBLAS).

    python examples/autotune_gemm.py                  # 4096^3 float16
    python examples/autotune_gemm.py --size 8192 --dtype bfloat16 --no-cache

Configurations are compiled in parallel worker processes, checked against torch.matmul, timed with the L2
flushed between repetitions, and the best one is cached in $TILEX_CACHE_DIR/autotune (a second run compiles
only that one and does not benchmark; --no-cache or tilex.autotuner.clear_cache() to tune again).
Without a GPU only the compile phase runs (for sm_90a), and its table is printed.
"""
import argparse

import torch

import tilex
from tilex.autotuner import AutoTuner
from tilex.kernels.gemm import matmul

CONFIGS = [
    dict(bm=128, bn=128, bk=64, num_stages=4, threads=256, swizzle=8),
    dict(bm=128, bn=256, bk=64, num_stages=4, threads=256, swizzle=0),
    dict(bm=128, bn=256, bk=64, num_stages=4, threads=256, swizzle=16),
    dict(bm=128, bn=256, bk=64, num_stages=3, threads=256, swizzle=0, stage_c=True),
    dict(bm=128, bn=256, bk=64, num_stages=3, threads=256, swizzle=16, stage_c=True),
    dict(bm=256, bn=128, bk=64, num_stages=3, threads=256, swizzle=8, stage_c=True),
    dict(bm=64, bn=256, bk=64, num_stages=4, threads=128, swizzle=0),
    dict(bm=64, bn=128, bk=128, num_stages=4, threads=128, swizzle=0),
]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="4096", help="N (M=N=K) or MxNxK")
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--no-cache", action="store_true", help="tune even if a cached best configuration exists")
    args = p.parse_args()
    dims = [int(x) for x in args.size.lower().split("x")]
    M, N, K = dims * 3 if len(dims) == 1 else dims

    tuner = (AutoTuner.from_kernel(matmul, CONFIGS)
             .set_compile_args(out_idx=[2])
             .set_profile_args(warmup=25, rep=100, ref_prog=lambda A, B: A @ B, rtol=1e-2, atol=1e-2)
             .set_tune_args(cache=not args.no_cache))

    print(f"GEMM {M}x{N}x{K} {args.dtype}, {len(CONFIGS)} configurations")
    if not torch.cuda.is_available():
        report = tuner.compile(M, N, K, dtype=args.dtype)
        print(f"no GPU: compile phase only (target {report.target.attrs['arch']}, {report.mode} mode)")
        print(report.table())
        return

    print(f"device: {torch.cuda.get_device_name()}")
    res = tuner.run(M, N, K, dtype=args.dtype)
    print(res.table())
    flops = 2.0 * M * N * K
    print(f"\nbest: {res.config}  {res.latency:.4f} ms  {flops / res.latency * 1e-9:.0f} TFLOP/s"
          + ("  (from the autotune cache)" if res.from_cache else ""))
    if res.ref_latency:
        print(f"torch: {res.ref_latency:.4f} ms  {flops / res.ref_latency * 1e-9:.0f} TFLOP/s  "
              f"ratio torch/tilex = {res.ref_latency / res.latency:.3f}")

    # the returned kernel is ready to use
    tdt = getattr(torch, args.dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(K, N, device="cuda", dtype=tdt)
    torch.testing.assert_close(res.kernel(a, b), a @ b, rtol=1e-2, atol=1e-2)
    print(f"kernel {res.kernel!r} matches torch.matmul; kernel.config = {res.kernel.config}")
    assert isinstance(res.kernel, tilex.JITKernel)


if __name__ == "__main__":
    main()
