"""A kernel with two T.Pipelined GEMM loops (TileLang's gdn/example_wy_fast: one over V's blocks, one over K's):
the producer warpgroup runs one loop, so a kernel where several would be warp-specialized keeps them all on the
cp.async pipeline (it used to stop with "warp specialization supports one pipelined loop per kernel"). CPU:
generated CUDA; gpu: values."""
import pytest

import tilex
import tilex.language as T

M, K1, K2, N = 128, 256, 192, 64


def two_products():
    """C = A1 @ B1 and D = A2 @ B2, each in its own pipelined loop of one kernel."""

    @T.prim_func
    def main(A1: T.Tensor((M, K1), "float16"), B1: T.Tensor((K1, N), "float16"), A2: T.Tensor((M, K2), "float16"),
             B2: T.Tensor((K2, N), "float16"), C: T.Tensor((M, N), "float32"), D: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((M, 64), "float16")
            b_s = T.alloc_shared((64, N), "float16")
            a2_s = T.alloc_shared((M, 64), "float16")
            b2_s = T.alloc_shared((64, N), "float16")
            c_l = T.alloc_fragment((M, N), "float32")
            d_l = T.alloc_fragment((M, N), "float32")
            T.clear(c_l)
            T.clear(d_l)
            for k in T.Pipelined(K1 // 64, num_stages=2):
                T.copy(A1[0, k * 64], a_s)
                T.copy(B1[k * 64, 0], b_s)
                T.gemm(a_s, b_s, c_l)
            for k in T.Pipelined(K2 // 64, num_stages=2):
                T.copy(A2[0, k * 64], a2_s)
                T.copy(B2[k * 64, 0], b2_s)
                T.gemm(a2_s, b2_s, d_l)
            T.copy(c_l, C)
            T.copy(d_l, D)

    return main


def test_two_warp_specializable_loops_both_run_on_cp_async():
    src = tilex.compile(two_products(), target="sm_90a").get_kernel_source()
    assert src.count("cp_async_commit") >= 2 and "tma_load" not in src
    assert "__launch_bounds__(128" in src  # no producer warpgroup added


@pytest.mark.gpu
def test_values():
    import torch

    a1, a2 = (torch.randn(M, k, device="cuda", dtype=torch.float16) for k in (K1, K2))
    b1, b2 = (torch.randn(k, N, device="cuda", dtype=torch.float16) for k in (K1, K2))
    c = torch.empty(M, N, device="cuda")
    d = torch.empty(M, N, device="cuda")
    tilex.compile(two_products())(a1, b1, a2, b2, c, d)
    torch.testing.assert_close(c, a1.float() @ b1.float(), atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(d, a2.float() @ b2.float(), atol=1e-2, rtol=1e-3)
