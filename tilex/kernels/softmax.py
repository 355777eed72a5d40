"""Row softmax of an fp16 (M, N) matrix: one block of `threads` threads owns `bm` whole rows (fp32 math, exp2).
Run by examples/softmax.py and benchmarks/bench_ops.py."""
import tilex.language as T

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
