"""Tests for tilex.layout.Layout: map/offset, inverse, compose, expand, is_equal, errors."""
import numpy as np
import pytest
import tvm
from tvm import tirx

from tilex.layout import Layout, LayoutError
from tilex.layout._expr import compile_numpy
from layout_testlib import grid


def ev(exprs, vars_, *arrays):
    return compile_numpy(exprs, vars_)(*arrays)


def test_basic_shapes_and_map():
    lay = Layout((16, 8), lambda i, j: [i // 8, (i % 8) * 8 + j])
    assert lay.input_shape == (16, 8)
    assert lay.output_shape == (2, 64)
    assert len(lay.vars) == 2 and lay.vars == Layout.placeholders(2)
    out = lay.map([11, 5])
    assert [int(x) for x in out] == [1, 29]
    assert int(lay.offset([11, 5])) == 1 * 64 + 29
    assert "Layout" in repr(lay) and "(16, 8)" in repr(lay)


def test_single_expr_and_prebuilt_exprs():
    i, j = Layout.placeholders(2)
    lay = Layout((4, 8), [j * 4 + i])
    assert lay.output_shape == (32,)
    lay2 = Layout((4, 8), lambda a, b: b * 4 + a)
    assert lay.is_equal(lay2)


def test_symbolic_map_with_analyzer():
    lay = Layout((16, 8), lambda i, j: [i // 8, (i % 8) * 8 + j])
    x = tirx.Var("x", "int32")
    y = tirx.Var("y", "int32")
    ana = tvm.sym.Analyzer()
    ana.bind(x, tvm.ir.Range(0, 8))
    ana.bind(y, tvm.ir.Range(0, 8))
    out = lay.map([x, y], analyzer=ana)
    assert int(out[0]) == 0  # x < 8
    assert tvm.sym.Analyzer().can_prove_equal(out[1], x * 8 + y)


def test_numpy_evaluator_matches_tvm_simplify():
    lay = Layout((12, 10), lambda i, j: [(i * 10 + j) // 7, (i * 10 + j) % 7 + (j // 3) * 2 + 5 - (i % 5)])
    rng = np.random.default_rng(0)
    pts = rng.integers(0, [12, 10], size=(30, 2))
    got = lay.map_numpy(pts[:, 0], pts[:, 1])
    for k, (a, b) in enumerate(pts):
        ref = [int(e) for e in lay.map([int(a), int(b)])]
        assert ref == [int(got[0][k]), int(got[1][k])]


AFFINE = [
    ((16, 8), lambda i, j: [i // 8, (i % 8) * 8 + j]),
    ((8, 16), lambda i, j: [j, i]),
    ((4, 6, 8), lambda a, b, c: [c % 2, b, a, c // 2]),
    ((32, 32), lambda i, j: [(i // 8) * 4 + j // 8, (i % 8) * 8 + j % 8]),
    ((64,), lambda i: [i % 4, i // 4]),
]


@pytest.mark.parametrize("shape,fn", AFFINE)
def test_inverse_roundtrip(shape, fn):
    lay = Layout(shape, fn)
    inv = lay.inverse()
    assert inv.input_shape == lay.output_shape
    assert inv.output_shape == lay.input_shape
    pts = grid(shape)
    phys = lay.map_numpy(*pts)
    back = inv.map_numpy(*phys)
    for a, b in zip(back, pts):
        np.testing.assert_array_equal(a, b)
    # and forward o inverse on the physical domain
    ppts = grid(lay.output_shape)
    again = lay.map_numpy(*inv.map_numpy(*ppts))
    for a, b in zip(again, ppts):
        np.testing.assert_array_equal(a, b)
    assert inv.inverse().is_equal(lay)


def test_inverse_not_bijective_raises():
    with pytest.raises(LayoutError, match="not bijective"):
        Layout((8,), lambda i: [i // 2]).inverse()       # size mismatch
    with pytest.raises(LayoutError, match="not bijective"):
        Layout((2, 2), lambda i, j: [i, i]).inverse()    # same size, collides
    with pytest.raises(LayoutError):
        Layout((4, 4), lambda i, j: [i + j, i]).inverse()


def test_compose():
    a = Layout((16, 8), lambda i, j: [i // 8, (i % 8) * 8 + j])    # -> (2, 64)
    b = Layout((2, 64), lambda p, q: [q, p])                      # -> (64, 2)
    c = a.compose(b)
    assert c.input_shape == (16, 8) and c.output_shape == (64, 2)
    pts = grid((16, 8))
    ref = b.map_numpy(*a.map_numpy(*pts))
    got = c.map_numpy(*pts)
    for x, y in zip(got, ref):
        np.testing.assert_array_equal(x, y)
    # composite inverse
    ci = c.inverse()
    back = ci.map_numpy(*got)
    for x, y in zip(back, pts):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(LayoutError):
        b.compose(b)


def test_compose_swapped_placeholders():
    # compose must substitute simultaneously (placeholders are shared between layouts)
    t = Layout((4, 8), lambda i, j: [j, i])
    tt = t.compose(t.inverse())
    assert tt.is_equal(Layout((4, 8), lambda i, j: [i, j]))


def test_expand():
    lay = Layout((16, 8), lambda i, j: [i // 8, (i % 8) * 8 + j])
    ex = lay.expand((3,))
    assert ex.input_shape == (3, 16, 8)
    assert ex.output_shape == (3, 2, 64)
    assert [int(x) for x in ex.map([2, 11, 5])] == [2, 1, 29]
    ex2 = lay.expand(2)
    assert ex2.input_shape == (2, 16, 8)
    inv = ex.inverse()
    pts = grid((3, 16, 8))
    back = inv.map_numpy(*ex.map_numpy(*pts))
    for x, y in zip(back, pts):
        np.testing.assert_array_equal(x, y)
    assert lay.expand(()) is lay


def test_is_equal():
    a = Layout((8, 8), lambda i, j: [i * 8 + j])
    b = Layout((8, 8), lambda i, j: [(i * 8 + j) // 4 * 4 + j % 4])
    c = Layout((8, 8), lambda i, j: [j * 8 + i])
    assert a.is_equal(b) and b.is_equal(a)
    assert not a.is_equal(c)
    assert not a.is_equal(Layout((4, 16), lambda i, j: [i * 16 + j]))
    assert not a.is_equal("not a layout")


def test_bad_shape():
    with pytest.raises(LayoutError):
        Layout((0, 4), lambda i, j: [i, j])
    lay = Layout((4, 4), lambda i, j: [i, j])
    with pytest.raises(LayoutError):
        lay.map([1])
