"""Tile programs for the register-A ("rs") T.gemm tests: A reaches the gemm as a register fragment."""
import tilex.language as T


def rs_matmul(M, N, K, bm=128, bn=128, bk=64, num_stages=1, threads=128, dtype="float16"):
    """C = A @ B with each A tile staged global -> shared -> fragment (T.copy); B read from shared memory."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            A_f = T.alloc_fragment((bm, bk), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.copy(A_s, A_f)
                T.gemm(A_f, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def rs_cast_matmul(M, N, K, bm=64, bn=128, bk=64, num_stages=1, threads=128, dtype="float16", scale=0.5):
    """C = (scale * A) @ B: per k tile an fp32 fragment S = scale * A_s is computed in T.Parallel and cast into the
    16-bit A fragment P (as attention casts its probabilities before P @ V)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            S = T.alloc_fragment((bm, bk), "float32")
            P = T.alloc_fragment((bm, bk), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                for i, j in T.Parallel(bm, bk):
                    S[i, j] = T.Cast("float32", A_s[i, j]) * scale
                for i, j in T.Parallel(bm, bk):
                    P[i, j] = T.Cast(dtype, S[i, j])
                T.gemm(P, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def qk_pv(M, N, D, bm=64, bn=64, threads=128, dtype="float16", scale=None, policy=None):
    """O = sum over key tiles of cast(scale * Q @ K_tile^T) @ V_tile (attention's two GEMMs without the softmax):
    S comes from a shared-memory gemm into an fp32 fragment, is scaled and cast in T.Parallel into the 16-bit P
    fragment, which is the register A operand of the second gemm. `policy` (both gemms) must keep the rows of S
    and P in the same threads on the mma.sync path (FullRow)."""
    scale = scale if scale is not None else D ** -0.5
    policy = policy if policy is not None else T.GemmWarpPolicy.Square

    @T.prim_func
    def main(Q: T.Tensor((M, D), dtype), K: T.Tensor((N, D), dtype), V: T.Tensor((N, D), dtype),
             O: T.Tensor((M, D), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            Q_s = T.alloc_shared((bm, D), dtype)
            K_s = T.alloc_shared((bn, D), dtype)
            V_s = T.alloc_shared((bn, D), dtype)
            S = T.alloc_fragment((bm, bn), "float32")
            P = T.alloc_fragment((bm, bn), dtype)
            O_l = T.alloc_fragment((bm, D), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.clear(O_l)
            for j in T.serial(T.ceildiv(N, bn)):
                T.copy(K[j * bn, 0], K_s)
                T.copy(V[j * bn, 0], V_s)
                T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True, policy=policy)
                for r, c in T.Parallel(bm, bn):
                    P[r, c] = T.Cast(dtype, S[r, c] * scale)
                T.gemm(P, V_s, O_l, policy=policy)
            T.copy(O_l, O[bx * bm, 0])

    return main


def rs_8bit_matmul(M, N, K, dtype, acc, bm=128, bn=128, bk=64, threads=128):
    """C = A @ B^T with each A tile copied from global memory straight into a register fragment (the "rs" form)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), acc)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_f = T.alloc_fragment((bm, bk), dtype)
            B_s = T.alloc_shared((bn, bk), dtype)
            C_l = T.alloc_fragment((bm, bn), acc)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_f)
                T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_f, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main
