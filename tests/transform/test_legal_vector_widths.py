"""LegalVectorWidths: a T.vectorized loop over a whole per-thread row is cut to 16-byte vectors (TVM would make one
float32x128 value, which CUDA has no type for); misaligned rows get narrower vectors; loops of 16 bytes or less are
left as written. Also: a T.annotate_layout in a kernel with no tile operator is honoured, not left as a call."""
import re

import pytest

import tilex
import tilex.language as T
from tilex.transform.legal_vector_widths import legal_vector_loop
from tvm import tirx


def row_per_thread(width, offset=0, dtype="float32", swizzle=False):
    n = 128 * width + offset

    @T.prim_func
    def rows(A: T.Tensor((4, n), dtype), B: T.Tensor((4, n), dtype)):
        with T.Kernel(4, threads=128) as bx:
            local = T.alloc_local((width,), dtype)
            shared = T.alloc_shared((128, width), dtype)
            if swizzle:
                T.annotate_layout({shared: T.Layout((128, width), lambda i, j: (i, (j + i) % width))})
            tx = T.get_thread_binding(0)
            for i in T.vectorized(width):
                local[i] = A[bx, offset + tx * width + i]
            for i in T.vectorized(width):
                shared[127 - tx, i] = local[i] * 2
            for i in T.vectorized(width):
                local[i] = shared[127 - tx, i]
            for i in T.vectorized(width):
                B[bx, offset + tx * width + i] = local[i]

    return rows


def test_a_row_of_128_floats_is_written_as_float4():
    src = tilex.compile(row_per_thread(128), target="sm_90a").get_kernel_source()
    assert "float4" in src
    assert not re.search(r"float32x|float\d{2,}", src)


def test_a_misaligned_row_takes_narrower_vectors():
    src = tilex.compile(row_per_thread(16, offset=2), target="sm_90a").get_kernel_source()
    load = [line for line in src.splitlines() if "= *(float" in line and "A_ptr" in line]
    assert load and all("(float2*)(A_ptr" in line for line in load)


def test_a_row_with_an_odd_offset_is_unrolled():
    src = tilex.compile(row_per_thread(16, offset=1), target="sm_90a").get_kernel_source()
    assert "(float2*)(A_ptr" not in src and "(float4*)(A_ptr" not in src and "A_ptr[" in src


def test_short_vector_loops_are_left_as_written():
    i = tirx.Var("i", "int32")
    buf = tirx.decl_buffer((64,), "float16", name="x")
    loop = tirx.For(i, 0, 8, tirx.ForKind.VECTORIZED, tirx.BufferStore(buf, tirx.const(0, "float16"), [i]))
    assert legal_vector_loop(loop).same_as(loop)
    wide = tirx.For(i, 0, 32, tirx.ForKind.VECTORIZED, tirx.BufferStore(buf, tirx.const(0, "float16"), [i]))
    cut = legal_vector_loop(wide)
    assert cut.kind == tirx.ForKind.SERIAL and int(cut.extent) == 4 and int(cut.body.extent) == 8


def test_annotated_layout_without_tile_operators_compiles():
    src = tilex.compile(row_per_thread(8, swizzle=True), target="sm_90a").get_kernel_source()
    assert "annotate_layout" not in src


@pytest.mark.gpu
@pytest.mark.parametrize("width,offset,swizzle", [(128, 0, False), (16, 2, False), (16, 1, False), (8, 0, True)])
def test_rows_are_copied_on_the_gpu(width, offset, swizzle):
    import torch

    k = tilex.compile(row_per_thread(width, offset, swizzle=swizzle))
    a = torch.randn(4, 128 * width + offset, device="cuda")
    b = torch.zeros_like(a)
    k(a, b)
    ref = a.clone()
    body = ref[:, offset:].reshape(4, 128, width) * 2
    ref[:, offset:] = body.flip(1).flip(1).reshape(4, -1)
    ref[:, :offset] = 0
    assert torch.equal(b, ref)
