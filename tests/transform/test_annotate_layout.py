"""T.annotate_layout pins layouts for inference and lowering."""
import pytest
import tvm

import tilex.language as T
from tilex.engine import lower_to_tir
from tilex.op.base import LayoutConflictError, LayoutConversionWarning
from tilex.layout.codec import decode
from tilex.transform.layout_inference import LAYOUT_MAP_ATTR, layout_inference

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def padded_copy(pad):
    @T.prim_func
    def f(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float32")
            T.annotate_layout({s: T.Layout((64, 64), lambda i, j: i * (64 + pad) + j)})
            T.copy(A[0, 0], s)
            T.copy(s, B[0, 0])

    return f


def test_pinned_shared_layout_is_used_for_addresses():
    f = padded_copy(4)
    lay = {b.name: decode(v) for b, v in layout_inference(f).attrs[LAYOUT_MAP_ATTR].items()}
    assert lay["s"].output_shape == (64 * 68 - 4,)
    script = lower_to_tir(f, SM90)["main"].script()
    assert "* 68" in script  # padded row pitch


def test_pinned_fragment_layout_wins_over_free_choices():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((128,), "float32")
            T.annotate_layout({x: T.Fragment((128,), forward_thread_fn=lambda i: 127 - i, forward_index_fn=lambda i: 0)})
            T.copy(A[0], x)
            T.copy(x, B[0])

    lay = {b.name: decode(v) for b, v in layout_inference(f).attrs[LAYOUT_MAP_ATTR].items()}
    assert int(lay["x"].map_thread([5]).value) == 122


def test_pinned_accumulator_layout_is_kept_and_the_gemm_converts():
    """A fragment pinned against its gemm's accumulator layout keeps the pin; the gemm accumulates into a copy in
    its own layout, converted in and out (and says so)."""
    @T.prim_func
    def f(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({C_l: T.Fragment((64, 64), forward_thread_fn=lambda i, j: i * 2 + j // 32,
                                               forward_index_fn=lambda i, j: j % 32)})
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_l)

    with pytest.warns(LayoutConversionWarning, match="fragment 'C_l'.*before and after"):
        out = layout_inference(f, SM90)
    lay = {b.name: decode(v) for b, v in out.attrs[LAYOUT_MAP_ATTR].items()}
    assert int(lay["C_l"].map_thread([5, 40]).value) == 11 and "C_l_as1" in lay


def test_one_placement_written_two_ways_has_the_same_offsets():
    from tilex.layout import Layout

    two_d = T.Layout((64, 64), lambda i, j: [((j // 8 ^ i % 8) * 8 + j % 8) // 64 + i, ((j // 8 ^ i % 8) * 8 + j % 8) % 64])
    one_d = T.Layout((64, 64), lambda i, j: i * 64 + (j // 8 ^ i % 8) * 8 + j % 8)
    assert not two_d.is_equal(one_d) and two_d.same_offsets(one_d)
    assert not one_d.same_offsets(T.Layout((64, 64), lambda i, j: i * 64 + j))
    assert not one_d.same_offsets(T.Layout((64, 65), lambda i, j: i * 65 + j))  # another domain
    assert isinstance(one_d, Layout)


def pinned_swizzle_gemm():
    """TileLang's spelling: the gemm operand pinned to make_swizzled_layout (a 2-d form of the wgmma swizzle)."""

    @T.prim_func
    def f(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({A_s: T.make_swizzled_layout(A_s), B_s: T.make_swizzled_layout(B_s)})
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=True)
            T.copy(C_l, C)

    return f


def test_pinned_swizzle_of_a_gemm_operand_is_the_gemms_layout():
    # the pin and the wgmma's layout place every element at the same offset: no conflict, the gemm's form is kept
    f = pinned_swizzle_gemm()
    lay = {b.name: decode(v) for b, v in layout_inference(f, SM90).attrs[LAYOUT_MAP_ATTR].items()}
    assert lay["A_s"].output_shape == (4096,) and lay["B_s"].output_shape == (4096,)
    import tilex

    assert "wgmma_m64n64k16" in tilex.compile(f, target="sm_90a").get_kernel_source()
