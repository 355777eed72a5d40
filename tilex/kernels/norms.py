"""RMSNorm and LayerNorm over the last dimension of an fp16 (M, N) matrix, fp32 math, `bm` rows per block.
Run by examples/norms.py and benchmarks/bench_ops.py."""
import tilex.language as T


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
