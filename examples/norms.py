"""RMSNorm and LayerNorm over the last dimension of an fp16 (M, N) matrix, fp32 math, one row per block.

Checks itself against torch and prints time vs torch on a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402


def rmsnorm_kernel(M, N, eps=1e-6, bm=1, threads=256, dtype="float16"):
    @T.prim_func
    def rmsnorm(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            sq = T.alloc_fragment((bm, N), "float32")
            r = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            for i, j in T.Parallel(bm, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, r, dim=1)
            for i in T.Parallel(bm):
                r[i] = T.rsqrt(r[i] / N + eps)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] * r[i] * T.Cast("float32", W[j])
            T.copy(x, Y[bx * bm, 0])

    return rmsnorm


def layernorm_kernel(M, N, eps=1e-5, bm=1, threads=256, dtype="float16"):
    @T.prim_func
    def layernorm(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype),
                  Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            sq = T.alloc_fragment((bm, N), "float32")
            mean = T.alloc_fragment((bm,), "float32")
            var = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(bm):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] - mean[i]
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, var, dim=1)
            for i in T.Parallel(bm):
                var[i] = T.rsqrt(var[i] / N + eps)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] * var[i] * T.Cast("float32", W[j]) + T.Cast("float32", B[j])
            T.copy(x, Y[bx * bm, 0])

    return layernorm


def main(M=4096, N=4096):
    import torch

    rms = tilex.compile(rmsnorm_kernel(M, N), out_idx=[2])
    ln = tilex.compile(layernorm_kernel(M, N), out_idx=[3])
    if not torch.cuda.is_available():
        print(rms.get_kernel_source())
        return
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    w = torch.randn(N, device="cuda", dtype=torch.float16)
    b = torch.randn(N, device="cuda", dtype=torch.float16)
    ref_rms = torch.nn.functional.rms_norm(x.float(), (N,), w.float(), eps=1e-6).half()
    ref_ln = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), eps=1e-5).half()
    torch.testing.assert_close(rms(x, w), ref_rms, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(ln(x, w, b), ref_ln, atol=1e-2, rtol=1e-2)
    from triton.testing import do_bench

    for name, k, args, ref in [("rmsnorm", rms, (x, w), lambda: torch.nn.functional.rms_norm(x, (N,), w, eps=1e-6)),
                               ("layernorm", ln, (x, w, b),
                                lambda: torch.nn.functional.layer_norm(x, (N,), w, b, eps=1e-5))]:
        t = do_bench(lambda: k(*args))
        t_ref = do_bench(ref)
        print(f"{name} {M}x{N} fp16: correct; {2 * M * N * 2 / t * 1e-6:.0f} GB/s; torch/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
