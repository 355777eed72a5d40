"""T.symbolic / T.dynamic: symbolic sizes in tensor shapes; a GEMM with a symbolic M compiles once and guards its
ragged edge."""
import pytest

import tilex
import tilex.language as T
from tvm import tirx

from tilex.ir.visit import dtype_of

from programs import matmul


def test_symbolic_is_a_named_size_variable():
    m = T.symbolic("m")
    assert isinstance(m, tirx.Var) and m.name == "m" and dtype_of(m) == "int32"
    assert dtype_of(T.dynamic("n", "int64")) == "int64"
    with pytest.raises(ValueError, match="identifier"):
        T.symbolic("2m")
    with pytest.raises(ValueError, match="int32 or int64"):
        T.dynamic("m", "float32")


def test_symbolic_m_compiles_and_guards_its_ragged_edge():
    """One kernel for every M: m is a kernel parameter and the epilogue stores no row past it. (Its loads stay on
    the cp.async pipeline for now: TMA tensor maps are encoded from static extents.)"""
    prog = matmul(T.dynamic("m"), 1024, 1024, bk=64, threads=256)
    src = tilex.compile(prog, out_idx=-1, target="sm_90a").get_kernel_source()
    assert "int m)" in src and ") < m)" in src


def test_symbolic_inner_dimension_falls_back_to_cp_async():
    """A symbolic K is a stride of A: its tensor map could not be encoded without a runtime alignment check, so the
    loads stay on the cp.async pipeline (every thread copies)."""
    prog = matmul(1024, 1024, T.dynamic("k"), bk=64, threads=256)
    src = tilex.compile(prog, out_idx=-1, target="sm_90a").get_kernel_source()
    assert "CUtensorMap A_tmap" not in src and "cp_async" in src
