"""Matrix transpose through shared memory: coalesced tile loads, a transposed read of the shared tile into
registers, coalesced stores."""
import tilex
import tilex.language as T


def transpose_kernel(M, N, b=64, threads=256, dtype="float16"):
    @T.prim_func
    def transpose(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, b), T.ceildiv(M, b), threads=threads) as (bx, by):
            s = T.alloc_shared((b, b), dtype)
            t = T.alloc_fragment((b, b), dtype)
            T.copy(A[by * b, bx * b], s)
            for i, j in T.Parallel(b, b):
                t[i, j] = s[j, i]
            T.copy(t, B[bx * b, by * b])

    return transpose


def main(M=8192, N=8192):
    import torch

    k = tilex.compile(transpose_kernel(M, N), out_idx=[1])
    if not torch.cuda.is_available():
        print(k.get_kernel_source())
        return
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(k(a), a.t().contiguous())
    from tilex.autotuner import do_bench

    t, t_ref = do_bench(lambda: k(a)), do_bench(lambda: a.t().contiguous())
    print(f"transpose {M}x{N} fp16: correct; {2 * M * N * 2 / t * 1e-6:.0f} GB/s; torch/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
