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
    """One kernel for every M: m is a kernel parameter, A's and C's tensor maps are encoded per call, and the
    epilogue stores no row past m (the TMA store clips its box at the map's m rows; per-thread stores check)."""
    prog = matmul(T.dynamic("m"), 1024, 1024, bk=64, threads=256)
    src = tilex.compile(prog, out_idx=-1, target="sm_90a").get_kernel_source()
    assert "__launch_bounds__(384" in src  # 256 consumers + the TMA producer warpgroup
    assert "CUtensorMap A_tmap" in src and "CUtensorMap B_tmap" in src and "int m)" in src
    assert "CUtensorMap C_tmap" in src and "tilex::tma_store_2d" in src
    src = tilex.compile(prog, out_idx=-1, target="sm_90a",
                        pass_configs={"tilex.disable_staged_epilogue": True}).get_kernel_source()
    assert ") < m)" in src


def test_symbolic_inner_dimension_falls_back_to_cp_async():
    """A symbolic K is a stride of A: its tensor map could not be encoded without a runtime alignment check, so the
    loads stay on the cp.async pipeline (every thread copies)."""
    prog = matmul(1024, 1024, T.dynamic("k"), bk=64, threads=256)
    src = tilex.compile(prog, out_idx=-1, target="sm_90a").get_kernel_source()
    assert "CUtensorMap A_tmap" not in src and "cp_async" in src


def test_symbolic_m_runs_persistent_in_clusters_and_with_stream_k():
    """A symbolic grid height still gets the persistent grid over every slot with clusters of two multicasting B,
    and with tilex.stream_k a segment loop over the tiles the run-time count leaves over (empty when they divide
    evenly)."""
    prog = matmul(T.dynamic("m"), 2048, 1024, bm=128, bn=256, bk=64, threads=256)
    plain = tilex.compile(prog, out_idx=-1, target="sm_90a").get_kernel_source()
    assert "__cluster_dims__(2, 1, 1)" in plain and "tile_c" in plain and "streamk_fixup" not in plain
    sk = tilex.compile(prog, out_idx=-1, target="sm_90a", pass_configs={"tilex.stream_k": 1}).get_kernel_source()
    assert "streamk_fixup" in sk and "tile_c_sk" in sk and "int m)" in sk
