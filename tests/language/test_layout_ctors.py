"""T.Layout / T.Fragment / T.make_swizzled_layout: building tilex.layout objects from Python functions."""
import numpy as np
import pytest
from tvm import tirx

import tilex.language as T
from tilex.layout import Fragment, Layout, LayoutError, make_mma_accumulator_fragment, make_swizzled_layout


def test_layout_from_lambda():
    lay = T.Layout((8, 16), lambda i, j: [j, i])
    assert isinstance(lay, Layout)
    assert lay.input_shape == (8, 16) and lay.output_shape == (16, 8)
    i, j = np.meshgrid(np.arange(8), np.arange(16), indexing="ij")
    a, b = lay.map_numpy(i, j)
    assert (a == j).all() and (b == i).all()
    flat = T.Layout([4, 4], lambda i, j: i * 4 + j)  # one output expression, shape as a list
    assert flat.output_shape == (16,) and flat.inverse().is_equal(Layout(16, lambda x: [x // 4, x % 4]))


def test_layout_needs_a_function():
    with pytest.raises(TypeError):
        T.Layout((4, 4), [0, 1])


def test_fragment_from_forward_fn():
    # 16 x 8 tile, 32 threads, 4 elements each: thread = i % 8 * 4 + j // 2, local = (i // 8) * 2 + j % 2
    frag = T.Fragment((16, 8), forward_fn=lambda i, j: (i % 8 * 4 + j // 2, (i // 8) * 2 + j % 2))
    assert isinstance(frag, Fragment)
    assert frag.thread_extent == 32 and frag.local_size == 4 and frag.replicate == 1
    assert frag.map_thread([9, 5]).value == 1 * 4 + 2 and [e.value for e in frag.map_index([9, 5])] == [3]
    same = T.Fragment((16, 8), forward_thread_fn=lambda i, j: i % 8 * 4 + j // 2,
                      forward_index_fn=lambda i, j: [(i // 8) * 2 + j % 2])
    assert same.is_equal(frag)
    direct = Fragment((16, 8), lambda i, j: i % 8 * 4 + j // 2, lambda i, j: (i // 8) * 2 + j % 2)
    assert direct.is_equal(frag)


def test_fragment_with_multi_dim_index():
    frag = T.Fragment((4, 8), forward_fn=lambda i, j: (j, [i]))
    assert frag.thread_extent == 8 and frag.local_shape == (4,)
    frag2 = T.Fragment((4, 8), forward_fn=lambda i, j: (j % 4, (i, j // 4)))
    assert frag2.local_shape == (4, 2)


def test_fragment_with_replication():
    # each element of a 16-element row held by 2 thread groups of 16
    frag = T.Fragment((16,), forward_fn=lambda i, rep: (i + rep * 16, 0), replicate=2)
    assert frag.replicate == 2 and frag.thread_extent == 32
    assert {frag.map_thread([3], rep=r).value for r in range(2)} == {3, 19}
    frag_fns = T.Fragment((16,), forward_thread_fn=lambda i, rep: i + rep * 16, forward_index_fn=lambda i: 0,
                          replicate=2)
    assert frag_fns.is_equal(frag)
    assert frag.is_equal(Fragment((16,), lambda i: i, lambda i: 0).replicate(2))


def test_fragment_index_must_not_depend_on_the_replica():
    with pytest.raises(LayoutError, match="replica"):
        T.Fragment((16,), forward_fn=lambda i, rep: (i, rep), replicate=2)


def test_fragment_argument_errors():
    with pytest.raises(ValueError):
        T.Fragment((4, 4))
    with pytest.raises(ValueError):
        T.Fragment((4, 4), forward_thread_fn=lambda i, j: i)
    with pytest.raises(ValueError):
        T.Fragment((4, 4), forward_fn=lambda i, j: (i, j), forward_thread_fn=lambda i, j: i)
    with pytest.raises(LayoutError):
        T.Fragment((4, 4), forward_fn=lambda i, j: i)
    with pytest.raises(LayoutError):
        T.Fragment((4, 4), forward_fn=lambda i, j: (i, j), replicate=0)


def test_fragment_matches_a_library_fragment():
    """The mma.sync accumulator fragment of a 2 x 2 warp grid, rebuilt through T.Fragment."""
    lib = make_mma_accumulator_fragment(32, 32, 2, 2)
    mine = T.Fragment(lib.input_shape, forward_thread_fn=lambda i, j: lib.map_thread([i, j]),
                      forward_index_fn=lambda i, j: lib.map_index([i, j]))
    assert mine.is_equal(lib) and mine.thread_extent == 128


@pytest.mark.parametrize("shape,dtype,bits", [((128, 32), "float16", 16), ((32, 128), "bfloat16", 16),
                                              ((64, 32), "float32", 32), ((128, 64), "int8", 8)])
def test_make_swizzled_layout_of_a_shared_buffer(shape, dtype, bits):
    buf = tirx.decl_buffer(shape, dtype, "S", scope="shared.dyn")
    lay = T.make_swizzled_layout(buf)
    assert lay.is_equal(make_swizzled_layout(shape[0], shape[1], bits))


def test_make_swizzled_layout_keeps_leading_dims():
    buf = tirx.decl_buffer((3, 128, 32), "float16", "S", scope="shared.dyn")
    lay = T.make_swizzled_layout(buf)
    assert lay.input_shape == (3, 128, 32)
    base = make_swizzled_layout(128, 32, 16)
    i, j = np.meshgrid(np.arange(128), np.arange(32), indexing="ij")
    s, a, b = lay.map_numpy(np.full_like(i, 2), i, j)
    a0, b0 = base.map_numpy(i, j)
    assert (s == 2).all() and (a == a0).all() and (b == b0).all()


def test_make_swizzled_layout_of_a_1d_buffer_raises():
    with pytest.raises(LayoutError):
        T.make_swizzled_layout(tirx.decl_buffer((128,), "float16", "S", scope="shared.dyn"))


def test_constructors_are_usable_inside_a_program_builder():
    """The lambdas run at parse time too (e.g. to hand a layout to an annotation)."""
    seen = {}

    def keep(name, obj):
        seen[name] = obj

    @T.prim_func
    def main(A: T.Tensor((128, 32), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((128, 32), "float16")
            keep("swz", T.make_swizzled_layout(A_s))
            keep("frag", T.Fragment((128,), forward_fn=lambda i: (i, 0)))
            T.copy(A, A_s)

    assert seen["swz"].is_equal(make_swizzled_layout(128, 32, 16))
    assert seen["frag"].thread_extent == 128


def test_constructed_layouts_drive_lowering_through_annotate_layout():
    import tvm

    from tilex.engine import lower_to_tir

    @T.prim_func
    def main(A: T.Tensor((128, 32), "float16"), O: T.Tensor((128, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((128, 32), "float16")
            F = T.alloc_fragment((128, 32), "float32")
            T.annotate_layout({A_s: T.make_swizzled_layout(A_s),
                               F: T.Fragment((128, 32), forward_fn=lambda i, j: (i, j))})  # thread i owns row i
            T.copy(A, A_s)
            for i, j in T.Parallel(128, 32):
                F[i, j] = T.Cast("float32", A_s[i, j])
            T.copy(F, O)

    script = lower_to_tir(main, tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))["main"].script()
    assert "F = T.alloc_local((32,))" in script  # 32 elements per thread: the annotated fragment
    assert "O[v, " in script and "A_s[v * 32 + " in script and "^" in script  # row per thread, swizzled reads
