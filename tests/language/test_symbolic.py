"""T.symbolic / T.dynamic: symbolic sizes in tensor shapes; a GEMM with a symbolic M compiles once and guards its
ragged edge."""
import pytest

import tilex
import tilex.language as T
from tvm import tirx

from tilex.ir.visit import dtype_of


def test_symbolic_is_a_named_size_variable():
    m = T.symbolic("m")
    assert isinstance(m, tirx.Var) and m.name == "m" and dtype_of(m) == "int32"
    assert dtype_of(T.dynamic("n", "int64")) == "int64"
    with pytest.raises(ValueError, match="identifier"):
        T.symbolic("2m")
    with pytest.raises(ValueError, match="int32 or int64"):
        T.dynamic("m", "float32")


def _gemm(M, N, K, bm=128, bn=128, bk=64, stages=3, threads=256):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def test_symbolic_m_compiles_and_guards_its_ragged_edge():
    """One kernel for every M: m is a kernel parameter and the epilogue stores no row past it. (Its loads stay on
    the cp.async pipeline for now: TMA tensor maps are encoded from static extents.)"""
    src = tilex.compile(_gemm(T.dynamic("m"), 1024, 1024), out_idx=-1, target="sm_90a").get_kernel_source()
    assert "int m)" in src and ") < m)" in src


def test_symbolic_inner_dimension_falls_back_to_cp_async():
    """A symbolic K is a stride of A: its tensor map could not be encoded without a runtime alignment check, so the
    loads stay on the cp.async pipeline (every thread copies)."""
    src = tilex.compile(_gemm(1024, 1024, T.dynamic("k")), out_idx=-1, target="sm_90a").get_kernel_source()
    assert "CUtensorMap A_tmap" not in src and "cp_async" in src
