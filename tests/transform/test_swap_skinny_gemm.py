"""SwapSkinnyGemm: a plain GEMM whose A has at most 64 rows computes C^T tiles of 64 columns in 128-thread blocks
with a deep pipeline (IR on the CPU; results on the GPU)."""
import re

import pytest

import tilex.language as T
from programs import matmul
from sm90_lowering import lowered as _lowered, note
from tilex.ir.names import COARSENED_BLOCKS_ATTR, SWAPPED_SKINNY_GEMM_ATTR
from tilex.kernels.gemm import matmul as library_matmul
from tilex.kernels.gemm import matmul_swap_ab


def _note(f):
    return note(f, SWAPPED_SKINNY_GEMM_ATTR)


def _main_loop(f):
    """The kernel's MMA, TMA load and mbarrier lines (the names the two programs give differ)."""
    keys = ("wgmma", "tma_load", "mbar")  # (the C store's coordinates name the block indices differently)
    names = {"C_l_T": "Ct_l", "b0": "bx", "b1": "by"}
    lines = [line.strip() for line in f.script().splitlines() if any(k in line for k in keys)]
    return [re.sub(r"\b(C_l_T|b0|b1)\b", lambda m: names[m.group(1)], line) for line in lines]


@pytest.mark.parametrize("bm,bn,bk,threads", [(128, 256, 64, 256), (128, 128, 64, 128), (128, 128, 32, 128)])
def test_a_skinny_gemm_runs_as_transposed_tiles(bm, bn, bk, threads):
    f = _lowered(matmul(16, 8192, 8192, panel=10, bm=bm, bn=bn, bk=bk, threads=threads))
    assert _note(f) == (f"A has 16 rows: {bm}x{bn}x{bk} blocks of {threads} threads -> C^T tiles of 64x16, "
                        "K step 128, 8 stages, 128 blocks of 128 threads")
    assert f.attrs.get(COARSENED_BLOCKS_ATTR) is None
    script = f.script()
    assert 'T.launch_thread("blockIdx.x", 128)' in script
    assert "tilex::wgmma_m64n16k16" in script and "m64n256" not in script
    # the kernel the library's swap-AB program (16x64x128 tiles, 8 stages) compiles to
    assert _main_loop(f) == _main_loop(_lowered(matmul_swap_ab(16, 8192, 8192, 16, 64, 128, 8, 128)))


def test_rows_round_up_and_the_ring_fills_shared_memory():
    # 64 rows: 32 KB stages, five of them in 160 KB; 5 rows take a 16-row tile (the TMA fills the rest with zeros)
    f = _lowered(matmul(64, 4096, 4096, bm=128, bn=256, bk=64, threads=256))
    assert "C^T tiles of 64x64, K step 128, 5 stages, 64 blocks" in _note(f)
    f = _lowered(matmul(5, 4096, 4096, bm=128, bn=128, bk=64))
    assert "A has 5 rows" in _note(f) and "C^T tiles of 64x16" in _note(f)


def test_transposed_b_and_bfloat16():
    f = _lowered(library_matmul(32, 8192, 4096, 128, 256, 64, 3, 256, dtype="bfloat16", trans_b=True))
    assert "C^T tiles of 64x32" in _note(f)
    assert "tilex::wgmma_m64n32k16_bf16<0, 0>" in f.script()  # both operands K-major: nothing transposed


def test_a_few_row_blocks_run_on_x_with_c_staged():
    # 128 rows on 32 blocks of 128x256: row blocks of 64 on x, 128 columns of C each, C through a shared tile
    f = _lowered(matmul(128, 8192, 8192, bm=128, bn=256, bk=64, threads=256))
    assert _note(f) == ("A has 128 rows: 128x256x64 blocks of 256 threads -> C^T tiles of 128x64, K step 64, "
                        "8 stages, 128 blocks of 128 threads, row blocks on x, C staged in shared memory")
    script = f.script()
    assert 'T.launch_thread("blockIdx.x", 2)' in script and 'T.launch_thread("blockIdx.y", 64)' in script
    assert "tilex::tma_store_2d" in script
    library = matmul_swap_ab(128, 8192, 8192, 64, 128, 64, 8, 128, stage_c=True, m_major=True)
    assert _main_loop(f) == _main_loop(_lowered(library))
    # 96 rows too (two row blocks); kept as written: four row blocks (measured slower), and a swapped grid of more
    # than one wave (128 x 28672: 448 blocks, against 112 as written)
    assert "C^T tiles of 128x64" in _note(_lowered(matmul(96, 8192, 8192, bm=128, bn=128, bk=32)))
    assert _note(_lowered(matmul(256, 8192, 8192, bm=128, bn=128, bk=64))) is None
    assert _note(_lowered(matmul(128, 28672, 8192, bm=128, bn=256, bk=64, threads=256))) is None


def test_programs_kept_as_written():
    # more rows than the row-block tiling takes
    assert _note(_lowered(matmul(200, 8192, 8192, bm=128, bn=256, bk=64, threads=256))) is None
    # a row block already fitted to A's rows: 64 rows of 64
    assert _note(_lowered(matmul(64, 8192, 8192, bm=64, bn=128, bk=64))) is None
    # pinned
    assert _note(_lowered(matmul(16, 8192, 8192, bm=128, bn=256, bk=64, threads=256),
                          **{"tilex.disable_skinny_swap": True})) is None
    # anything besides the plain GEMM: an epilogue nest, a gemm clearing its accumulator at every K step
    assert _note(_lowered(_relu(16, 8192, 8192))) is None
    assert _note(_lowered(_relu(16, 8192, 8192, clear_accum=True, relu=False))) is None


def _relu(M, N, K, clear_accum=False, relu=True):
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
                T.gemm(A_s, B_s, C_l, clear_accum=clear_accum)
            if relu:
                for i, j in T.Parallel(128, 128):
                    C_l[i, j] = T.max(C_l[i, j], 0)
            T.copy(C_l, C[by * 128, bx * 128])

    return main


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype,trans_b", [(16, 8192, 4096, "float16", False), (1, 4160, 1000, "float16", False),
                                                 (5, 4096, 2048, "bfloat16", False), (33, 4096, 1024, "float16", True),
                                                 (64, 2112, 4096, "bfloat16", True),
                                                 (128, 8192, 4096, "float16", False),
                                                 (100, 4160, 1024, "bfloat16", True),
                                                 (24, 4104, 520, "float16", False),  # N: 64-column blocks + 8
                                                 (120, 4104, 520, "float16", True),
                                                 (16, 4096, 64, "float16", False)])  # one K step
def test_swapped_results(M, N, K, dtype, trans_b):
    import torch

    import tilex

    kernel = tilex.compile(library_matmul(M, N, K, 128, 256, 64, 3, 256, dtype=dtype, trans_b=trans_b))
    assert "wgmma_m64n" in kernel.get_kernel_source()
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(N, K, device="cuda", dtype=tdt) if trans_b else torch.randn(K, N, device="cuda", dtype=tdt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    kernel(a, b, c)
    ref = a.float() @ (b.float().T if trans_b else b.float())
    torch.testing.assert_close(c.float(), ref, atol=0.1, rtol=2e-2)
