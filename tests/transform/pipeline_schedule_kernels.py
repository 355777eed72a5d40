"""GEMM tile programs with explicit T.Pipelined(order=, stage=) schedules, shared by the CPU and GPU tests."""
import tilex.language as T


def gemm(M, N, K, stage, order=None, bm=128, bn=128, bk=32, num_stages=0, threads=128, dtype="float16"):
    """C = A @ B; loop body: 0 copy A, 1 copy B, 2 gemm (stage None: only `order` is given)."""
    order = list(range(3)) if order is None else list(order)
    stage = None if stage is None else list(stage)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages, order=order, stage=stage):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def gemm_scaled_b(M, N, K, stage, order=None, bm=128, bn=128, bk=32, threads=128, dtype="float16"):
    """C = A @ (2 B) with an element-wise step between load and MMA; loop body: 0 copy A, 1 copy B,
    2 B2_s = 2 * B_s (T.Parallel), 3 gemm(A_s, B2_s)."""
    order = list(range(4)) if order is None else list(order)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            B2_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), order=order, stage=list(stage)):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                for i, j in T.Parallel(bk, bn):
                    B2_s[i, j] = B_s[i, j] * T.cast(2, dtype)
                T.gemm(A_s, B2_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def gemm_scaled_b_inplace(M, N, K, stage, order=None, bm=128, bn=128, bk=32, threads=128, dtype="float16"):
    """C = A @ (2 B), B scaled in place in its shared tile; loop body: 0 copy A, 1 copy B, 2 B_s *= 2, 3 gemm."""
    order = list(range(4)) if order is None else list(order)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), order=order, stage=list(stage)):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                for i, j in T.Parallel(bk, bn):
                    B_s[i, j] = B_s[i, j] * T.cast(2, dtype)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def gemm_scaled_a_fragment(M, N, K, stage, order=None, bm=128, bn=128, bk=32, threads=128, dtype="float16"):
    """C = (2 A) @ B with A scaled from its shared tile into a register fragment; loop body: 0 copy A, 1 copy B,
    2 A_f = 2 * A_s (T.Parallel), 3 gemm(A_f, B_s)."""
    order = list(range(4)) if order is None else list(order)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            A_f = T.alloc_fragment((bm, bk), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), order=order, stage=list(stage)):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                for i, j in T.Parallel(bm, bk):
                    A_f[i, j] = A_s[i, j] * T.cast(2, dtype)
                T.gemm(A_f, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main
