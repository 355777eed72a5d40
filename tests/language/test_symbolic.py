"""T.symbolic / T.dynamic: symbolic sizes in tensor shapes; a GEMM with a symbolic M keeps its TMA loads (the
tensor map's outer extent is encoded per call) and its warp-specialized pipeline, and guards its ragged edge."""
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


def test_symbolic_m_keeps_tma_and_warp_specialization():
    """One kernel for every M: m is a kernel parameter, A's tensor map is encoded per call, and the epilogue stores
    no row past m."""
    prog = matmul(T.dynamic("m"), 1024, 1024, bk=64, threads=256)
    src = tilex.compile(prog, out_idx=-1, target="sm_90a").get_kernel_source()
    assert "__launch_bounds__(384" in src  # 256 consumers + the TMA producer warpgroup
    assert "CUtensorMap A_tmap" in src and "CUtensorMap B_tmap" in src and "int m)" in src
    assert ") < m)" in src


def test_symbolic_inner_dimension_falls_back_to_cp_async():
    """A symbolic K is a stride of A: its tensor map could not be encoded without a runtime alignment check, so the
    loads stay on the cp.async pipeline (every thread copies)."""
    prog = matmul(1024, 1024, T.dynamic("k"), bk=64, threads=256)
    src = tilex.compile(prog, out_idx=-1, target="sm_90a").get_kernel_source()
    assert "CUtensorMap A_tmap" not in src and "cp_async" in src
