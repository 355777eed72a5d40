"""Layout inference for reductions and broadcasts: which buffers replicate, over how many threads, and conflicts."""
import pathlib
import runpy

import pytest

import tilex.language as T
from tilex.kernels.softmax import softmax_kernel
from tilex.op.base import TileOpError
from tilex.transform.pipeline.inject import inject_pipeline
from tilex.layout.codec import decode
from tilex.transform.layout_inference import LAYOUT_MAP_ATTR, layout_inference

# examples/gemm_epilogue.py is a script, not a module: its tile program, from the globals of a run (main() not called)
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
gemm_bias_act_kernel = runpy.run_path(str(EXAMPLES / "gemm_epilogue.py"))["gemm_bias_act_kernel"]


def infer(func):
    out = layout_inference(inject_pipeline(func))
    return {b.name: decode(v) for b, v in out.attrs[LAYOUT_MAP_ATTR].items()}


def holders(frag, idx):
    return sorted({int(frag.map_thread(idx, r).value) for r in range(int(frag.replicate))})


def test_softmax_row_stats_replicate_over_the_row():
    lay = infer(softmax_kernel(4096, 4096, bm=1, threads=256))
    x, mx, sm = lay["x"], lay["mx"], lay["sm"]
    assert x.thread_extent == 256 and x.local_size == 16  # 4096 fp32 over 256 threads
    assert int(mx.replicate) == 256 and mx.is_equal(sm)  # every thread holds the row's max and sum
    assert holders(mx, [0]) == list(range(256))


def test_multi_row_blocks_replicate_within_row_groups():
    lay = infer(softmax_kernel(256, 512, bm=4, threads=128))
    mx = lay["mx"]
    assert mx.input_shape == (4,)
    # 512 columns / 8-element vectors = 64 threads per row: rows 0..1 live in threads 0..63 and 64..127
    assert holders(mx, [0]) == list(range(64)) and holders(mx, [1]) == list(range(64, 128))


def test_broadcast_operand_of_gemm_epilogue_follows_the_accumulator():
    lay = infer(gemm_bias_act_kernel(1024, 1024, 1024, "relu", bm=128, bn=128, threads=128))
    bias, acc = lay["bias"], lay["C_l"]
    # bias[j] is read by every thread holding some C_l[i, j]
    for j in (0, 1, 9, 127):
        want = sorted({int(acc.map_thread([i, j]).value) for i in range(128)})
        assert holders(bias, [j]) == want


def test_reduce_shape_mismatch_names_both_buffers():
    @T.prim_func
    def f(X: T.Tensor((64, 128), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 128), "float32")
            y = T.alloc_fragment((128,), "float32")
            T.copy(X[0, 0], x)
            T.reduce_max(x, y, dim=1)

    with pytest.raises(TileOpError, match="x.*y|y.*x"):
        infer(f)
