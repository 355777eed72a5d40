"""8-bit tensor-core GEMM programs: float8 (e4m3 / e5m2) with scales in the epilogue, the way
``torch._scaled_mm`` is used, and int8 -> int32 (``torch._int_mm``).

Both operands are K-major, as the 8-bit tensor-core instructions need: A is (M, K), B is (N, K) (``B^T`` of the
product, like ``torch._scaled_mm``'s column-major second operand and an ``nn.Linear`` weight).
"""
import tvm

import tilex.language as T

#: scale shapes: one float32 for the whole tensor, or one per row of A / per column of C (row of B)
SCALE_KINDS = ("tensor", "row")
#: shared memory a block may use on sm_90 (227 KB), less room for the pipeline's barriers
SHARED_BUDGET = 227 * 1024 - 1024


def k_major_mainloop(K, bm, bn, bk, num_stages):
    """The main loop both programs share: C_l = A @ B^T over K for block (bx, by), K-major tiles of A (bm, bk)
    and B (bn, bk) staged in shared memory by a pipelined loop."""

    @T.macro
    def mainloop(A, B, A_s, B_s, C_l, bx, by):
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
            T.copy(A[by * bm, k * bk], A_s)
            T.copy(B[bx * bn, k * bk], B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True)

    return mainloop


def scaled_matmul(M, N, K, in_dtype="float8_e4m3fn", b_dtype=None, out_dtype="bfloat16", scale_a="tensor",
                  scale_b="tensor", bm=128, bn=256, bk=128, num_stages=3, threads=256, swizzle=8, stage_c=True,
                  c_block=0):
    """C = (A @ B^T) * scale_a * scale_b, cast to `out_dtype`. A (M, K) of `in_dtype`, B (N, K) of `b_dtype`
    (default `in_dtype`); float8 or int8 inputs (int8 accumulates exactly in int32 before scaling). `scale_a` /
    `scale_b` are "tensor" (a float32 tensor of shape (1,)) or "row" (float32 of shape (M,) / (N,)). `stage_c`
    writes C through a shared tile (a TMA store on sm90), in column blocks of `c_block` when 0 < c_block < bn
    (a smaller tile leaves shared memory for another pipeline stage)."""
    b_dtype = b_dtype or in_dtype
    if scale_a not in SCALE_KINDS or scale_b not in SCALE_KINDS:
        raise ValueError(f"scaled_matmul: scale kinds must be one of {SCALE_KINDS}, got {scale_a!r}, {scale_b!r}")
    accum = "int32" if in_dtype in ("int8", "uint8") else "float32"
    sa_len = M if scale_a == "row" else 1
    sb_len = N if scale_b == "row" else 1
    cb = c_block if 0 < c_block < bn else bn
    if stage_c and c_block == 0:  # the widest column block that leaves the pipeline its shared memory
        in_bytes = num_stages * (bm + bn) * bk  # the 8-bit operand tiles of every stage
        out_bytes = tvm.DataType(out_dtype).bits // 8
        while cb > 32 and in_bytes + bm * cb * out_bytes > SHARED_BUDGET:
            cb //= 2
    a_row = scale_a == "row"
    b_row = scale_b == "row"
    mainloop = k_major_mainloop(K, bm, bn, bk, num_stages)

    @T.prim_func
    def main(A: T.Tensor((M, K), in_dtype), B: T.Tensor((N, K), b_dtype), SA: T.Tensor((sa_len,), "float32"),
             SB: T.Tensor((sb_len,), "float32"), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if swizzle > 0:
                T.use_swizzle(swizzle)
            A_s = T.alloc_shared((bm, bk), in_dtype)
            B_s = T.alloc_shared((bn, bk), b_dtype)
            C_l = T.alloc_fragment((bm, bn), accum)
            mainloop(A, B, A_s, B_s, C_l, bx, by)
            # scale in the accumulator (float32), or into a float32 copy of an int32 one
            S_l = C_l if accum == "float32" else T.alloc_fragment((bm, bn), "float32")
            for i, j in T.Parallel(bm, bn):
                # clamped: rows and columns past M, N are computed but not stored
                sa = SA[T.min(by * bm + i, M - 1)] if a_row else SA[0]
                sb = SB[T.min(bx * bn + j, N - 1)] if b_row else SB[0]
                S_l[i, j] = T.cast(C_l[i, j], "float32") * sa * sb
            if stage_c:
                C_s = T.alloc_shared((bm, cb), out_dtype)
                for jb in T.unroll(bn // cb):
                    T.copy(S_l[0:bm, jb * cb:(jb + 1) * cb], C_s)
                    T.copy(C_s, C[by * bm, bx * bn + jb * cb])
            else:
                T.copy(S_l, C[by * bm, bx * bn])

    return main


def int_matmul(M, N, K, bm=128, bn=256, bk=128, num_stages=4, threads=256, swizzle=0, a_dtype="int8",
               b_dtype="int8"):
    """C (int32) = A @ B^T for int8/uint8 A (M, K) and B (N, K): exact integer accumulation (``torch._int_mm``
    with its second operand transposed)."""
    mainloop = k_major_mainloop(K, bm, bn, bk, num_stages)

    @T.prim_func
    def main(A: T.Tensor((M, K), a_dtype), B: T.Tensor((N, K), b_dtype), C: T.Tensor((M, N), "int32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if swizzle > 0:
                T.use_swizzle(swizzle)
            A_s = T.alloc_shared((bm, bk), a_dtype)
            B_s = T.alloc_shared((bn, bk), b_dtype)
            C_l = T.alloc_fragment((bm, bn), "int32")
            mainloop(A, B, A_s, B_s, C_l, bx, by)
            T.copy(C_l, C[by * bm, bx * bn])

    return main
