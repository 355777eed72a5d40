"""LowerTileOps: wgmma grouping of the gemms of one pipeline iteration (generated CUDA, no GPU needed)."""
import pytest

import tilex
import tilex.language as T

SM90 = "sm_90a"


def _two_gemm_program(M=1024, N=1024, K=1024, bm=128, hn=128, bk=64, stages=4, threads=256, dtype="float16"):
    """C = A @ B with the C tile as two column halves, each with its own accumulator and gemm."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, 2 * hn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B0 = T.alloc_shared((bk, hn), dtype)
            B1 = T.alloc_shared((bk, hn), dtype)
            C0 = T.alloc_fragment((bm, hn), "float32")
            C1 = T.alloc_fragment((bm, hn), "float32")
            T.clear(C0)
            T.clear(C1)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * 2 * hn], B0)
                T.copy(B[k * bk, bx * 2 * hn + hn], B1)
                T.gemm(A_s, B0, C0)
                T.gemm(A_s, B1, C1)
            T.copy(C0, C[by * bm, bx * 2 * hn])
            T.copy(C1, C[by * bm, bx * 2 * hn + hn])

    return main


def _k_loop(src):
    """The consumer's pipeline loop body (from its mbarrier wait to the loop's end)."""
    start = src.index("tilex::mbar_wait((&(tma_full_ptr")
    return src[start:src.index("tilex::wgmma_wait<0>", start)]


def test_gemms_of_one_iteration_share_a_wgmma_group():
    src = tilex.compile(_two_gemm_program(), target=SM90).get_kernel_source()
    loop = _k_loop(src)
    assert loop.count("tilex::wgmma_m64n128k16_f16") == 2  # both gemms issue in the loop ...
    # ... behind one fence, in one commit group, with one wait for the previous iteration's group
    assert loop.count("tilex::wgmma_fence()") == 1
    assert loop.count("tilex::wgmma_commit()") == 1
    assert loop.count("tilex::wgmma_wait<1>()") == 1


def test_cp_async_path_keeps_one_group_per_iteration_too():
    src = tilex.compile(_two_gemm_program(threads=128, hn=64), target=SM90,
                        pass_configs={"tilex.disable_warp_specialized": True}).get_kernel_source()
    assert src.count("tilex::wgmma_m64n64k16_f16") == 2
    assert src.count("tilex::wgmma_wait<1>()") == 1


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["warp_specialized", "cp_async"])
def test_two_gemm_iterations_match_torch(path):
    torch = pytest.importorskip("torch")
    M, N, K = 1000, 1024, 1000
    kw, cfg = (dict(), {}) if path == "warp_specialized" else (
        dict(threads=128, hn=64), {"tilex.disable_warp_specialized": True})
    kernel = tilex.compile(_two_gemm_program(M, N, K, **kw), out_idx=[2], pass_configs=cfg)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    torch.testing.assert_close(c.float() / K ** 0.5, (a.float() @ b.float()) / K ** 0.5, atol=1e-2, rtol=1e-2)


def test_unregistered_tile_op_is_an_error():
    """A tilex op that no operator module registered would reach the CUDA code generator as an unknown call:
    LowerTileOps names it instead."""
    import tvm
    from tvm import tirx

    from tilex.engine import lower_to_tir
    from tilex.ir.names import register_intrinsic

    register_intrinsic("tilex.not_an_operator")

    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((128,), "float32")
            T.evaluate(tirx.call_intrin("handle", "tilex.not_an_operator", A_s.data))
            T.copy(A_s, A[bx * 128])

    sm90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with pytest.raises(tilex.op.base.TileOpError, match="tilex.not_an_operator.*not a registered tile operator"):
        lower_to_tir(main, sm90)
