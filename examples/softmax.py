"""Row softmax of an fp16 (M, N) matrix: one block of `threads` threads owns `bm` whole rows.

The tile program is `softmax_kernel` in tilex/kernels/softmax.py. This script checks it against torch and prints
time vs torch (and the achieved memory bandwidth) on a GPU; without one it prints the generated CUDA.
"""
import tilex
from tilex.kernels.softmax import softmax_kernel


def main(M=4096, N=4096):
    import torch

    kernel = tilex.compile(softmax_kernel(M, N), out_idx=[1])
    if not torch.cuda.is_available():
        print(kernel.get_kernel_source())
        return
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(x), torch.softmax(x.float(), dim=1).half(), atol=1e-2, rtol=1e-2)
    from tilex.autotuner import do_bench

    t = do_bench(lambda: kernel(x))
    t_ref = do_bench(lambda: torch.softmax(x, dim=1))
    print(f"softmax {M}x{N} fp16: correct; {2 * M * N * 2 / t * 1e-6:.0f} GB/s; torch/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
