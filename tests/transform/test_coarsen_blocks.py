"""CoarsenBlocks: a one-warpgroup 128 x 128 GEMM block runs with its right-hand neighbour as one 128 x 256 block
of two warpgroups (IR on the CPU; results on the GPU)."""
import pytest
import tvm

import tilex.language as T
from programs import matmul
from tilex.engine import lower_to_tir
from tilex.ir.names import COARSENED_BLOCKS_ATTR

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
PIN = {"tilex.num_sms": 132}


def _lowered(func, **cfg):
    return lower_to_tir(func, SM90, {**PIN, **cfg})["main"]


def _note(f):
    notes = f.attrs.get(COARSENED_BLOCKS_ATTR)
    return None if notes is None else "; ".join(str(n) for n in notes)


def test_two_blocks_become_one_of_two_warpgroups():
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=64, threads=128))
    assert _note(f) == ("blocks (2 bx, by) and (2 bx + 1, by) run as one block of 256 threads: "
                        "C_l [128, 128] -> [128, 256], B_s [64, 128] -> [64, 256]")
    script = f.script()
    assert 'T.launch_thread("threadIdx.x", 384)' in script  # two consumer warpgroups and the producer
    assert "tilex::wgmma_m64n256k16" in script and "m64n128" not in script
    # the same kernel as the program written with 128x256 blocks of 256 threads
    wide = _lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256))
    assert script.count("tilex::wgmma_m64n256k16") == wide.script().count("tilex::wgmma_m64n256k16")


def test_a_short_k_step_is_doubled_first():
    # 128x128x32: two iterations per stage make the K step a 128-byte row, then the blocks pair up
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=32))
    assert _note(f) == ("two iterations of the T.Pipelined loop per stage: A_s [128, 32] -> [128, 64], "
                        "B_s [32, 128] -> [64, 128]; blocks (2 bx, by) and (2 bx + 1, by) run as one block of 256 "
                        "threads: C_l [128, 128] -> [128, 256], B_s [64, 128] -> [64, 256]")
    script = f.script()
    assert "for k in range(T.Sub(64, 0)):" in script  # 64 iterations of K 64 (128 of 32 as written)
    assert "49152)" in script  # a stage: A 128x64 + B 64x256 halves
    # a loop too short to fill the doubled ring's stages keeps its step (and then its block)
    assert _note(_lowered(matmul(4096, 4096, 160, bm=128, bn=128, bk=32))) is None


def test_blocks_kept_as_written():
    # the coarsened grid (4 x 8 blocks) would leave multiprocessors idle
    assert _note(_lowered(matmul(1024, 1024, 1024, bm=128, bn=128, bk=64))) is None
    # already two warpgroups
    assert _note(_lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256))) is None
    # pinned
    assert _note(_lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=64),
                          **{"tilex.disable_block_coarsening": True})) is None


def _with_bias(M, N, K):
    """The plain GEMM plus an element-wise epilogue (a T.Parallel loop): code the pass does not widen."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
            for i, j in T.Parallel(128, 128):
                C_l[i, j] = T.max(C_l[i, j], 0.0)
            T.copy(C_l, C[by * 128, bx * 128])

    return main


def test_programs_with_other_operators_are_left_alone():
    assert _note(_lowered(_with_bias(4096, 4096, 4096))) is None


@pytest.mark.gpu
@pytest.mark.parametrize("N,bk", [(4096, 64), (4224, 64), (4224, 32)])  # 4224: 33 block columns, the last
# coarsened block half past N; bk 32: two iterations per stage as well
def test_coarsened_results(N, bk):
    import torch

    import tilex

    kernel = tilex.compile(matmul(4096, N, 1056, bm=128, bn=128, bk=bk, threads=128))
    assert "wgmma_m64n256k16" in kernel.get_kernel_source()
    a = torch.randn(4096, 1056, device="cuda", dtype=torch.float16)
    b = torch.randn(1056, N, device="cuda", dtype=torch.float16)
    c = torch.full((4096, N), float("nan"), device="cuda", dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), atol=5e-2, rtol=1e-2)
