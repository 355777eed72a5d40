"""Tiles allocated inside a T.Pipelined loop's body (TileLang's examples write them there): InjectSoftwarePipeline
allocates them before the loop, so the pipeline's prologue and stages reach them. CPU tests compile for sm_90a /
sm_80 (cp.async and warp-specialized pipelines); the GPU test compares with torch."""
import pytest

import tilex
import tilex.language as T


def gemm_with_loop_tiles(M=256, N=256, K=512, bm=128, bn=128, bk=32, stages=2):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=stages):
                A_s = T.alloc_shared((bm, bk), "float16")
                B_s = T.alloc_shared((bk, bn), "float16")
                A_f = T.alloc_fragment((bm, bk), "float16")
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.copy(A_s, A_f)
                T.gemm(A_f, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("target,ws", [("sm_90a", False), ("sm_90a", True), ("sm_80", False)])
def test_tiles_allocated_in_a_pipelined_loop_compile(target, ws):
    k = tilex.compile(gemm_with_loop_tiles(), out_idx=-1, target=target,
                      pass_configs={"tilex.disable_warp_specialized": not ws})
    assert "cp_async" in k.get_kernel_source() or "tma_load" in k.get_kernel_source()


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 3])
def test_tiles_allocated_in_a_pipelined_loop_match_torch(stages):
    torch = pytest.importorskip("torch")
    kernel = tilex.compile(gemm_with_loop_tiles(stages=stages), out_idx=-1)
    a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), atol=1e-1, rtol=1e-2)
