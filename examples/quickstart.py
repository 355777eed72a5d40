"""Quickstart: a pipelined tensor-core GEMM written with tilex.language (the tile program is `matmul` in
tilex/kernels/gemm.py).

With a CUDA GPU: compiles, checks against torch and prints the speed ratio (torch time / tilex time).
Without one: prints the generated CUDA source.
"""
import sys

import torch

import tilex
from tilex.kernels.gemm import matmul


def main(M=4096, N=4096, K=4096):
    # 128x256 tiles, 3 stages, C written through a shared tile (TMA store); on sm90 the pipeline becomes
    # warp-specialized and persistent automatically
    kernel = tilex.compile(matmul(M, N, K, bm=128, bn=256, bk=64, num_stages=3, threads=256, stage_c=True),
                           out_idx=[2])
    if not torch.cuda.is_available():
        print(kernel.get_kernel_source())
        print("# no CUDA GPU here: printed the generated kernel instead of running it", file=sys.stderr)
        return
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    torch.testing.assert_close(c, a @ b, atol=1e-1, rtol=1e-2)
    from tilex.autotuner import do_bench

    t_tilex = do_bench(lambda: kernel(a, b), warmup=25, rep=100)
    t_torch = do_bench(lambda: a @ b, warmup=25, rep=100)
    tflops = 2 * M * N * K / t_tilex * 1e-9
    print(f"GEMM {M}x{N}x{K} fp16: correct; tilex {tflops:.0f} TFLOP/s, ratio torch/tilex = {t_torch / t_tilex:.2f}")


if __name__ == "__main__":
    main()
