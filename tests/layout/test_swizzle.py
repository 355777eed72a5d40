"""Tests for the shared-memory swizzle: bijectivity, exact inverse, chunk contiguity, bank-conflict freedom."""
import numpy as np
import pytest

from tilex.layout import Layout, make_linear_layout, make_swizzled_layout
from tilex.layout.swizzle import swizzle_applicable
from layout_testlib import grid


def phys_offsets(lay, rows, cols):
    p = lay.map_numpy(*grid((rows, cols)))
    return p[0] * cols + p[1]


def ref_swizzle(rows, cols, bits):
    vec = 128 // bits
    i, j = grid((rows, cols))
    off = i * cols + j
    chunk = (off // vec) % 8
    key = (off // max(cols, 8 * vec)) % 8
    return off - chunk * vec + (chunk ^ key) * vec


BIJ_CFGS = [(128, 32, 16), (32, 128, 16), (128, 64, 16), (64, 64, 16), (128, 16, 16), (64, 32, 32),
            (16, 256, 16), (64, 128, 8), (32, 8, 32), (8, 64, 16), (256, 64, 8), (128, 256, 16), (16, 24, 16)]


@pytest.mark.parametrize("rows,cols,bits", BIJ_CFGS)
def test_swizzle_bijective_and_inverse(rows, cols, bits):
    assert swizzle_applicable(rows, cols, bits)
    lay = make_swizzled_layout(rows, cols, bits)
    assert lay.input_shape == (rows, cols) and lay.output_shape == (rows, cols)
    phys = phys_offsets(lay, rows, cols)
    np.testing.assert_array_equal(phys, ref_swizzle(rows, cols, bits))
    assert np.array_equal(np.sort(phys), np.arange(rows * cols)), "not a permutation"
    assert not np.array_equal(phys, np.arange(rows * cols)), "swizzle should permute"
    inv = lay.inverse()
    assert inv.input_shape == (rows, cols)
    p = lay.map_numpy(*grid((rows, cols)))
    back = inv.map_numpy(*p)
    i, j = grid((rows, cols))
    np.testing.assert_array_equal(back[0], i)
    np.testing.assert_array_equal(back[1], j)
    assert inv.inverse() is lay


@pytest.mark.parametrize("rows,cols,bits", BIJ_CFGS)
def test_swizzle_keeps_16B_chunks_contiguous(rows, cols, bits):
    vec = 128 // bits
    phys = phys_offsets(make_swizzled_layout(rows, cols, bits), rows, cols).reshape(rows, cols // vec, vec)
    np.testing.assert_array_equal(phys - phys[..., :1], np.broadcast_to(np.arange(vec), phys.shape))
    assert (phys[..., 0] % vec == 0).all()


@pytest.mark.parametrize("rows,cols,bits", [(128, 32, 16), (32, 128, 16), (128, 64, 16), (64, 64, 16),
                                            (128, 16, 16), (64, 32, 32), (64, 128, 8), (128, 256, 16)])
def test_ldmatrix_phase_bank_conflict_free(rows, cols, bits):
    vec = 128 // bits
    lay = make_swizzled_layout(rows, cols, bits)
    phys = phys_offsets(lay, rows, cols).reshape(rows, cols)
    for r0 in range(0, rows, 8):
        for c in range(cols // vec):
            addr = phys[r0:r0 + 8, c * vec]                # 8 rows, same 16-byte column chunk
            banks = (addr * bits // 8 // 16) % 8
            assert len(set(banks.tolist())) == 8, (r0, c, banks)


@pytest.mark.parametrize("rows,cols,bits", [(128, 32, 16), (32, 128, 16), (64, 64, 16), (128, 16, 16), (64, 32, 32)])
def test_cp_async_row_writes_conflict_free(rows, cols, bits):
    # 8 consecutive logical 16-byte chunks (row-major) land in 8 distinct bank groups
    vec = 128 // bits
    phys = phys_offsets(make_swizzled_layout(rows, cols, bits), rows, cols)
    chunks = phys[::vec] // vec
    groups = chunks.reshape(-1, 8) % 8
    for g in groups:
        assert len(set(g.tolist())) == 8


@pytest.mark.parametrize("rows,cols,bits", [(8, 12, 16), (16, 96, 16), (4, 8, 16), (32, 32, 64), (10, 16, 16)])
def test_fallback_is_identity(rows, cols, bits):
    assert not swizzle_applicable(rows, cols, bits)
    lay = make_swizzled_layout(rows, cols, bits)
    assert lay.is_equal(make_linear_layout(rows, cols))


def test_linear_layout():
    lay = make_linear_layout(16, 32)
    assert lay.input_shape == lay.output_shape == (16, 32)
    assert int(lay.offset([3, 5])) == 3 * 32 + 5
    assert lay.inverse().is_equal(lay)


def test_swizzle_expand_and_compose():
    lay = make_swizzled_layout(64, 64, 16)
    ex = lay.expand((3,))                     # pipeline stages
    assert ex.input_shape == (3, 64, 64) and ex.output_shape == (3, 64, 64)
    pts = grid((3, 64, 64))
    back = ex.inverse().map_numpy(*ex.map_numpy(*pts))
    for a, b in zip(back, pts):
        np.testing.assert_array_equal(a, b)
    # swizzle o swizzle = identity (involution)
    assert lay.compose(lay).is_equal(make_linear_layout(64, 64))
    # compose with a plain layout keeps an exact inverse
    t = Layout((64, 64), lambda i, j: [j, i]).compose(lay)
    p = t.map_numpy(*grid((64, 64)))
    back = t.inverse().map_numpy(*p)
    i, j = grid((64, 64))
    np.testing.assert_array_equal(back[0], i)
    np.testing.assert_array_equal(back[1], j)
    assert lay.is_equal(make_swizzled_layout(64, 64, 16))
    assert not lay.is_equal(make_linear_layout(64, 64))
