"""WarpSpecialize: what the producer warpgroup is given (IR, no GPU needed)."""
import pytest
import tvm

from tilex.engine import lower_to_tir
from tilex.kernels.gemm import matmul_swap_ab

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


def _row_chosen_at_run_time(M=1024, N=1024, K=1024):
    """A GEMM whose A rows come from a local variable assigned twice (the producer cannot know its value)."""
    import tilex.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // 128, M // 128, threads=128) as (bx, by):
            row = T.alloc_var("int32")
            row = by
            if bx > 3:
                row = M // 128 - 1 - by  # reversed rows for the right half of the grid
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // 32, num_stages=3):
                T.copy(A[row * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * 128, bx * 128])

    return main


def test_producer_needing_consumer_state_falls_back_to_cp_async():
    """Copies indexed by a variable only the consumers compute: no producer warpgroup (it would read a local it
    never wrote); every thread copies with cp.async instead."""
    script = lower_to_tir(_row_chosen_at_run_time(), SM90, {})["main"].script()
    assert "tilex::reg_dealloc" not in script and "tilex::tma_load_2d" not in script
    assert "cp_async" in script or "cp.async" in script


@pytest.mark.gpu
def test_producer_needing_consumer_state_runs():
    import torch

    import tilex

    kernel = tilex.compile(_row_chosen_at_run_time(), out_idx=[2])
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    c = kernel(a, b).float()
    ref = (a.float() @ b.float())
    flipped = ref.view(8, 128, 1024).flip(0).reshape(1024, 1024)
    expect = torch.where(torch.arange(1024, device="cuda")[None, :] >= 512, flipped, ref)
    torch.testing.assert_close(c / 32, expect / 32, atol=1e-2, rtol=1e-2)
