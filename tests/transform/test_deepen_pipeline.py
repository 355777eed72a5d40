"""DeepenPipeline: a two-warpgroup 128 x 256 GEMM block written with 3 stages runs 4 (IR on the CPU; results on the
GPU)."""
import re

import pytest

from programs import matmul
from sm90_lowering import lowered as _lowered, note
from tilex.ir.names import DEEPENED_PIPELINE_ATTR, STAGED_EPILOGUES_ATTR


def _note(f):
    return note(f, DEEPENED_PIPELINE_ATTR)


def _ring(f):
    """The stage count of the kernel's mbarrier ring."""
    return int(re.search(r'tma_full = T\.alloc_shared\(\((\d+),\)', f.script()).group(1))


@pytest.mark.parametrize("bm,bn,bk,threads", [(128, 256, 64, 256), (128, 128, 64, 128), (128, 128, 32, 128)])
def test_the_plain_configs_run_four_stages(bm, bn, bk, threads):
    # the 128x128 programs first become 128x256x64 blocks (CoarsenBlocks)
    f = _lowered(matmul(4096, 4096, 4096, panel=10, bm=bm, bn=bn, bk=bk, threads=threads))
    assert _note(f) == "the T.Pipelined loop runs with 4 stages of 48 KB (written: 3)"
    assert _ring(f) == 4
    # the epilogue is staged in 32 KB: 4 x 48 KB + 32 KB fit, a whole 64 KB tile would not (as two 64-column
    # tiles taken in turn: StageEpilogue)
    assert [str(n) for n in f.attrs[STAGED_EPILOGUES_ATTR]] == [
        "C_l -> C: through shared tiles C_l_stage, C_l_stage1 (128 x 64) in turn, stored by TMA in 4 block(s)"]
    # the kernel of the program written with 4 stages
    four = _lowered(matmul(4096, 4096, 4096, panel=10, bm=128, bn=256, bk=64, stages=4, threads=256))
    assert _note(four) is None and _ring(four) == 4
    if bn == 256:
        assert _code(f) == _code(four)


def _code(f):
    return [line for line in f.script().splitlines() if "T.func_attr" not in line]


def test_depths_kept_as_written():
    # pinned
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256),
                 **{"tilex.disable_pipeline_deepening": True})
    assert _note(f) is None and _ring(f) == 3
    # one warpgroup on 128x128 (a grid too small to pair its blocks): not the block this was measured on
    f = _lowered(matmul(1024, 1024, 1024, bm=128, bn=128, bk=64))
    assert _note(f) is None and _ring(f) == 3
    # a loop shorter than the ring
    assert _note(_lowered(matmul(4096, 4096, 192, bm=128, bn=256, bk=64, threads=256))) is None


@pytest.mark.gpu
def test_deepened_results():
    import torch

    import tilex

    kernel = tilex.compile(matmul(2048, 4224, 1056, panel=10, bm=128, bn=256, bk=64, threads=256))
    a = torch.randn(2048, 1056, device="cuda", dtype=torch.float16)
    b = torch.randn(1056, 4224, device="cuda", dtype=torch.float16)
    c = torch.full((2048, 4224), float("nan"), device="cuda", dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), atol=5e-2, rtol=1e-2)
