"""Row softmax of an fp16 (M, N) matrix: one block of `threads` threads owns `bm` whole rows.

Checks itself against torch and prints time vs torch (and the achieved memory bandwidth) on a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402

LOG2E = 1.4426950408889634


def softmax_kernel(M, N, bm=1, threads=256, dtype="float16"):
    @T.prim_func
    def softmax(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            mx = T.alloc_fragment((bm,), "float32")
            sm = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = T.exp2((x[i, j] - mx[i]) * LOG2E)
            T.reduce_sum(x, sm, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] / sm[i]
            T.copy(x, Y[bx * bm, 0])

    return softmax


def main(M=4096, N=4096):
    import torch

    kernel = tilex.compile(softmax_kernel(M, N), out_idx=[1])
    if not torch.cuda.is_available():
        print(kernel.get_kernel_source())
        return
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(x), torch.softmax(x.float(), dim=1).half(), atol=1e-2, rtol=1e-2)
    from triton.testing import do_bench

    t = do_bench(lambda: kernel(x))
    t_ref = do_bench(lambda: torch.softmax(x, dim=1))
    print(f"softmax {M}x{N} fp16: correct; {2 * M * N * 2 / t * 1e-6:.0f} GB/s; torch/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
