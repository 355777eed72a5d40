"""Shared-tile accesses written by the program itself (outside tile operators) in a T.vectorized loop: through a
swizzled layout (a gemm operand's) the address is simplified under the loop's range, so each vector is one 16-byte
access (TileLang's fast-dequantize macros write their decoded tile this way). Left unsimplified, the swizzle's xor
hid the lanes' contiguity: TVM scattered the store lane by lane through an 8-lane int32 index vector, which its
CUDA generator prints as a ``make_longlong4`` call of 8 arguments that nvcc rejects.

CPU tests: they read the CUDA tilex generates for sm_90a."""
import re

import tilex
import tilex.language as T


def decoded_operand(M=128, N=128, K=128, bm=128, bn=128, bk=128, threads=256):
    """C = A @ B^T with B's tile written by the program: 8 bf16 values a thread at a time, from registers."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "bfloat16"), B: T.Tensor((N, K), "bfloat16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "bfloat16")
            B_s = T.alloc_shared((bn, bk), "bfloat16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            regs = T.alloc_local((8,), "bfloat16")
            back = T.alloc_local((8,), "bfloat16")
            T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=1):
                T.copy(A[by * bm, k * bk], A_s)
                tx = T.get_thread_binding()
                for i in T.serial(bn * bk // threads // 8):
                    for v in T.vectorized(8):
                        e = i * threads * 8 + tx * 8 + v
                        regs[v] = B[bx * bn + e // bk, k * bk + e % bk]
                    for v in T.vectorized(8):
                        e = i * threads * 8 + tx * 8 + v
                        B_s[e // bk, e % bk] = regs[v]
                T.gemm(A_s, B_s, C_l, transpose_B=True)
                for v in T.vectorized(8):
                    back[v] = B_s[tx // 16, tx % 16 * 8 + v]
                for v in T.vectorized(8):
                    C[by * bm + tx // 16, bx * bn + tx % 16 * 8 + v] = T.cast(back[v], "float32")
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def test_vector_store_into_a_swizzled_tile_is_one_access():
    src = tilex.compile(decoded_operand(), target="sm_90a").get_kernel_source()
    assert "make_longlong4(" not in src  # (a float32x8 value prints as ulonglong4: legitimate)
    stores = re.findall(r"\*\(uint4\*\)\(\(\(nv_bfloat16\*\)buf_dyn_shmem_ptr\) \+ [^;]*\) = \*\(uint4\*\)\(regs_ptr",
                        src)
    assert len(stores) == 1, src


def test_vector_load_from_a_swizzled_tile_is_one_access():
    src = tilex.compile(decoded_operand(), target="sm_90a").get_kernel_source()
    loads = re.findall(r"\*\(uint4\*\)\(back_ptr \+ 0\) = \*\(uint4\*\)\(\(\(nv_bfloat16\*\)buf_dyn_shmem_ptr\)", src)
    assert len(loads) == 1, src
