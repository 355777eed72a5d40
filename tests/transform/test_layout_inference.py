"""Layout inference on small programs: the layouts chosen, propagation, and the conflict error."""
import re

import pytest

import tilex
import tilex.language as T
from tilex.kernels.gemm import matmul
from tilex.layout import Fragment, make_mma_accumulator_fragment, make_swizzled_layout
from tilex.op.base import LayoutConflictError
from tilex.transform.pipeline.inject import inject_pipeline
from tilex.layout.codec import decode
from tilex.transform.layout_inference import LAYOUT_MAP_ATTR, layout_inference


def infer(func):
    out = layout_inference(inject_pipeline(func))
    return {b.name: decode(v) for b, v in out.attrs[LAYOUT_MAP_ATTR].items()}, out


def test_gemm_pins_swizzle_and_accumulator():
    layouts, _ = infer(matmul(1024, 1024, 1024, bm=128, bn=128, bk=32, num_stages=3, threads=128))
    assert layouts["A_s"].is_equal(make_swizzled_layout(128, 32, 16).expand((3,)))
    assert layouts["B_s"].is_equal(make_swizzled_layout(32, 128, 16).expand((3,)))
    assert layouts["C_l"].is_equal(make_mma_accumulator_fragment(128, 128, 2, 2))


def test_warp_partition_follows_thread_count():
    layouts, _ = infer(matmul(1024, 1024, 1024, bm=128, bn=256, bk=32, num_stages=2, threads=256))
    c = layouts["C_l"]
    assert c.thread_extent == 256
    assert c.is_equal(make_mma_accumulator_fragment(128, 256, 2, 4))


def elementwise(M=256, N=256, bm=64, bn=128):
    @T.prim_func
    def f(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a = T.alloc_fragment((bm, bn), "float16")
            b = T.alloc_fragment((bm, bn), "float16")
            c = T.alloc_fragment((bm, bn), "float32")
            T.copy(A[by * bm, bx * bn], a)
            T.copy(B[by * bm, bx * bn], b)
            for i, j in T.Parallel(bm, bn):
                c[i, j] = T.Cast("float32", a[i, j] + b[i, j])
            T.copy(c, C[by * bm, bx * bn])

    return f


def test_free_fragments_get_one_coalesced_plan():
    layouts, func = infer(elementwise())
    a, b, c = layouts["a"], layouts["b"], layouts["c"]
    assert isinstance(a, Fragment)
    assert a.is_equal(b) and a.is_equal(c)  # propagated through the T.Parallel loop
    assert a.thread_extent == 128 and a.local_size == 64 * 128 // 128
    # 16-byte vectors of fp16: thread t owns 8 consecutive elements of a row
    assert [int(a.map_thread([0, j]).value) for j in range(16)] == [0] * 8 + [1] * 8
    # the loop carries its layout for lowering
    assert "tilex.loop_layout" in func.script()


def test_conflicting_shared_layouts_are_reported():
    """Two layouts for a shared tile (a fragment's conflict is settled by a conversion: test_layout_conversion)."""
    @T.prim_func
    def f(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({A_s: T.Layout((64, 64), lambda i, j: [j, i])})
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_l)  # the gemm

    with pytest.raises(LayoutConflictError, match="A_s") as ei:  # the wgmma operand layout
        layout_inference(inject_pipeline(f), tilex.env.resolve_target("sm_90a"))
    # both sides named, the operator with the line the user wrote it on, and a caret block there
    msg = str(ei.value)
    lines = open(__file__).read().splitlines()
    gemm = f"{re.escape(__file__)}:{next(n for n, t in enumerate(lines, 1) if t.endswith('# the gemm'))}"
    assert re.search(rf"T.annotate_layout requires .* \(at {gemm}\) requires", msg), msg
    assert re.search(rf"--> {gemm}:\d+\n", msg) and "# the gemm" in msg, msg


def test_unsupported_gemm_dtype_is_reported():
    @T.prim_func
    def f(A: T.Tensor((64, 32), "bfloat16"), B: T.Tensor((32, 64), "bfloat16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "bfloat16")
            B_s = T.alloc_shared((32, 64), "bfloat16")
            C_l = T.alloc_fragment((64, 64), "float16")  # bf16 accumulates in float32 only
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_l)

    with pytest.raises(ValueError, match="unsupported dtypes"):
        infer(f)
