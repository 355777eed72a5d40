"""WarpSpecialize: what the producer warpgroup is given (IR, no GPU needed)."""
import os
import sys

import pytest
import tvm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

from gemm_kernels import matmul_swap_ab  # noqa: E402
from tilex.engine import lower_to_tir  # noqa: E402

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def _load_lines(cfg):
    func = matmul_swap_ab(128, 8192, 8192, 64, 128, 64, 8, 128, m_major=True)
    script = lower_to_tir(func, SM90, {"tilex.num_sms": 132, **cfg})["main"].script()
    return [line for line in script.splitlines() if "tilex::tma_load_2d" in line]


@pytest.mark.parametrize("cfg", [{}, {"tilex.cluster_size": 2}], ids=["single", "cluster2"])
def test_producer_gets_the_values_of_scalar_bindings(cfg):
    """`bx = b1` before the pipelined loop stays with the consumers; the producer's loads use b1 itself (they
    used to read a local the producer never wrote)."""
    lines = _load_lines(cfg)
    assert len(lines) >= 2
    assert not any("bx" in line or "by" in line for line in lines)
    assert any("b0 * 64" in line for line in lines)  # A's row block: by = b0
    assert any("b1 * 128" in line for line in lines)  # B's column block: bx = b1


def test_cluster_multicasts_only_what_the_bound_index_leaves_shared():
    """Clusters along x (= the row blocks of A here, through by = b0): A's tile depends on b0, so each block
    loads its own; B's tile depends only on b1, so the two blocks split its boxes and multicast them."""
    lines = _load_lines({"tilex.cluster_size": 2})
    plain = [line for line in lines if '"tilex::tma_load_2d"' in line]
    multicast = [line for line in lines if "tilex::tma_load_2d_multicast" in line]
    assert len(plain) == 1 and "A_tmap0" in plain[0]
    assert len(multicast) == 2 and all("B_tmap1" in line for line in multicast)
