"""NarrowSkinnyGemm: a plain GEMM whose B has 64..256 columns runs in 64-row (or 128 x 128) blocks of one warpgroup
with a deep pipeline when that fills the multiprocessors (IR on the CPU; results on the GPU)."""
import pytest

from programs import matmul
from sm90_lowering import lowered as _lowered, note
from tilex.ir.names import COARSENED_BLOCKS_ATTR, NARROWED_SKINNY_GEMM_ATTR, SWAPPED_SKINNY_GEMM_ATTR
from tilex.kernels.gemm import matmul as library_matmul


def _note(f):
    return note(f, NARROWED_SKINNY_GEMM_ATTR)


def _mma_lines(f):
    return [line.strip() for line in f.script().splitlines() if any(k in line for k in ("wgmma", "tma_load", "mbar"))]


@pytest.mark.parametrize("bm,bn,bk,threads", [(128, 256, 64, 256), (128, 128, 64, 128), (128, 128, 32, 128)])
def test_a_skinny_n_gemm_runs_in_64_row_blocks(bm, bn, bk, threads):
    # N = 128: 64 blocks as written, 128 blocks of 64 x 128 narrowed, one per multiprocessor: an 8-stage ring
    f = _lowered(matmul(8192, 128, 8192, panel=10, bm=bm, bn=bn, bk=bk, threads=threads))
    assert _note(f) == (f"B has 128 columns: {bm}x{bn}x{bk} blocks of {threads} threads (64) -> 64x128 tiles, "
                        "K step 64, 8 stages, 128 blocks of 128 threads")
    assert f.attrs.get(COARSENED_BLOCKS_ATTR) is None and f.attrs.get(SWAPPED_SKINNY_GEMM_ATTR) is None
    script = f.script()
    assert 'T.launch_thread("blockIdx.x", 1)' in script and 'T.launch_thread("blockIdx.y", 128)' in script
    assert "tilex::wgmma_m64n128k16" in script
    # the kernel the same program written in those tiles compiles to
    assert _mma_lines(f) == _mma_lines(_lowered(library_matmul(8192, 128, 8192, 64, 128, 64, 8, 128)))


def test_stages_share_shared_memory_between_two_blocks_per_multiprocessor():
    # N = 64: 256 blocks of 64 x 64, two per multiprocessor, 6 stages of 16 KB for each
    f = _lowered(matmul(16384, 64, 4096, bm=128, bn=256, bk=64, threads=256))
    assert _note(f) == ("B has 64 columns: 128x256x64 blocks of 256 threads (128) -> 64x64 tiles, K step 64, "
                        "6 stages, 256 blocks of 128 threads")
    # N = 256 at M = 8192: 256 blocks of 64 x 128 would hold 4 stages of 24 KB each (measured slower); 128 blocks
    # of 128 x 128 instead, one per multiprocessor with 6 stages of 32 KB, not paired by CoarsenBlocks
    f = _lowered(matmul(8192, 256, 8192, bm=128, bn=128, bk=64))
    assert _note(f) == ("B has 256 columns: 128x128x64 blocks of 128 threads (128) -> 128x128 tiles, K step 64, "
                        "6 stages, 128 blocks of 128 threads")
    assert f.attrs.get(COARSENED_BLOCKS_ATTR) is None
    assert 'T.launch_thread("blockIdx.x", 2)' in f.script() and "tilex::wgmma_m64n128k16" in f.script()
    # at M = 4096, 128 of them take one multiprocessor each, with 8 stages
    assert "-> 64x128 tiles, K step 64, 8 stages, 128 blocks" in _note(_lowered(matmul(4096, 256, 4096, bm=128,
                                                                                    bn=128, bk=64)))


def test_ragged_sizes_transposed_b_and_bfloat16():
    f = _lowered(library_matmul(4000, 200, 2080, 128, 256, 64, 3, 256, dtype="bfloat16", trans_b=True))
    assert "(32) -> 64x128 tiles, K step 64, 8 stages, 126 blocks" in _note(f)
    assert "tilex::wgmma_m64n128k16_bf16<0, 0>" in f.script()  # both operands K-major


def test_programs_kept_as_written():
    # not skinny, or too few columns to be measured
    assert _note(_lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256))) is None
    assert _note(_lowered(matmul(8192, 32, 8192, bm=128, bn=128, bk=64))) is None
    # narrowed blocks would take more than one wave at two per multiprocessor (M = 32768: 512 blocks)
    assert _note(_lowered(matmul(32768, 128, 1024, bm=128, bn=128, bk=64))) is None
    # fewer than 1.5 times the blocks written (already 64-row blocks); more blocks than one wave holds either way
    assert _note(_lowered(matmul(8192, 128, 8192, bm=64, bn=128, bk=64))) is None
    assert _note(_lowered(matmul(16384, 256, 4096, bm=128, bn=128, bk=64))) is None
    # a short K loop (16 steps: measured slower narrowed)
    assert _note(_lowered(matmul(8000, 200, 1000, bm=128, bn=256, bk=64, threads=256))) is None
    # pinned
    assert _note(_lowered(matmul(8192, 128, 8192, bm=128, bn=128, bk=64),
                          **{"tilex.disable_skinny_narrow": True})) is None


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype,trans_b", [(8192, 128, 4096, "float16", False),
                                                 (4096, 256, 2048, "bfloat16", False),
                                                 (4000, 200, 2080, "float16", True),
                                                 (8000, 200, 2080, "bfloat16", True),  # 128 x 128 tiles
                                                 (8192, 256, 2048, "float16", False),
                                                 (16384, 64, 2048, "bfloat16", True),
                                                 (6000, 72, 2056, "float16", False)])  # 64 + 8 columns, K % 64
def test_narrowed_results(M, N, K, dtype, trans_b):
    import torch

    import tilex

    kernel = tilex.compile(library_matmul(M, N, K, 128, 256, 64, 3, 256, dtype=dtype, trans_b=trans_b))
    source = kernel.get_kernel_source()
    assert ("wgmma_m64n128k16" in source or "wgmma_m64n64k16" in source) and "m64n256" not in source
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(N, K, device="cuda", dtype=tdt) if trans_b else torch.randn(K, N, device="cuda", dtype=tdt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    kernel(a, b, c)
    ref = a.float() @ (b.float().T if trans_b else b.float())
    torch.testing.assert_close(c.float(), ref, atol=0.1, rtol=2e-2)
