"""Tests for tilex.layout.Fragment and the mma.sync m16n8k16 fragments."""
import numpy as np
import pytest

from tilex.layout import (Fragment, Layout, LayoutError, make_mma_a_fragment, make_mma_accumulator_fragment,
                          make_mma_b_fragment)
from layout_testlib import grid


def thread_local(frag, pts, rep=0):
    t, loc = frag.map_numpy(*pts, rep=rep)
    loc_flat = np.zeros_like(t)
    for l, s in zip(loc, frag.local_shape):
        loc_flat = loc_flat * s + l
    return t, loc_flat


def assert_exact_cover(frag):
    """Every (thread, local) pair is hit exactly once by the (element, replica) pairs."""
    pts = grid(frag.input_shape)
    hits = np.zeros((frag.thread_extent, frag.local_size), dtype=np.int64)
    for r in range(int(frag.replicate)):
        t, l = thread_local(frag, pts, r)
        assert t.min() >= 0 and l.min() >= 0
        np.add.at(hits, (t, l), 1)
    assert (hits == 1).all(), f"coverage counts: min {hits.min()} max {hits.max()}"


def acc_formula(m, n, warp_m, warp_n, i, j):
    wm, wn = m // warp_m, n // warp_n
    wi, wj, ii, jj = i // wm, j // wn, i % wm, j % wn
    lane = (ii % 8) * 4 + (jj % 8) // 2
    thread = (wi * warp_n + wj) * 32 + lane
    local = ((ii // 16) * (wn // 8) + jj // 8) * 4 + ((ii % 16) // 8) * 2 + jj % 2
    return thread, local


ACC_CFGS = [(16, 8, 1, 1), (16, 16, 1, 1), (64, 64, 2, 2), (128, 128, 2, 2), (128, 64, 4, 1),
            (32, 256, 1, 4), (64, 128, 2, 4), (256, 128, 4, 2)]


@pytest.mark.parametrize("m,n,warp_m,warp_n", ACC_CFGS)
def test_accumulator_matches_formula(m, n, warp_m, warp_n):
    f = make_mma_accumulator_fragment(m, n, warp_m, warp_n)
    assert f.input_shape == (m, n)
    assert f.replicate == 1
    assert f.thread_extent == warp_m * warp_n * 32
    assert f.local_size == m * n // (warp_m * warp_n * 32)
    assert f.local_shape == (f.local_size,)
    pts = grid((m, n))
    t, l = thread_local(f, pts)
    rt, rl = acc_formula(m, n, warp_m, warp_n, *pts)
    np.testing.assert_array_equal(t, rt)
    np.testing.assert_array_equal(l, rl)
    assert_exact_cover(f)


@pytest.mark.parametrize("m,n,warp_m,warp_n", [(16, 8, 1, 1), (64, 64, 2, 2), (128, 128, 2, 2), (64, 128, 2, 4)])
def test_accumulator_inverse(m, n, warp_m, warp_n):
    f = make_mma_accumulator_fragment(m, n, warp_m, warp_n)
    inv = f.inverse()
    assert isinstance(inv, Layout)
    assert inv.input_shape == (f.thread_extent,) + f.local_shape
    assert inv.output_shape == (m, n)
    pts = grid((m, n))
    t, l = thread_local(f, pts)
    back = inv.map_numpy(t, l)
    np.testing.assert_array_equal(back[0], pts[0])
    np.testing.assert_array_equal(back[1], pts[1])


def test_accumulator_is_equal_to_direct_definition():
    m, n, warp_m, warp_n = 64, 32, 2, 2
    wm, wn = m // warp_m, n // warp_n
    f = make_mma_accumulator_fragment(m, n, warp_m, warp_n)
    direct = Fragment(
        (m, n),
        lambda i, j: ((i // wm) * warp_n + j // wn) * 32 + (i % wm % 8) * 4 + (j % wn % 8) // 2,
        lambda i, j: [((i % wm // 16) * (wn // 8) + (j % wn) // 8) * 4 + ((i % 16) // 8) * 2 + j % 2])
    assert f.is_equal(direct)
    assert not f.is_equal(make_mma_accumulator_fragment(64, 32, 1, 4))
    assert not f.is_equal(make_mma_accumulator_fragment(64, 32, 2, 1))


def test_accumulator_bad_args():
    with pytest.raises(LayoutError):
        make_mma_accumulator_fragment(24, 16, 1, 1)
    with pytest.raises(LayoutError):
        make_mma_accumulator_fragment(32, 12, 1, 1)
    with pytest.raises(LayoutError):
        make_mma_accumulator_fragment(32, 16, 4, 1)


def a_formula(m, k, warp_m, warp_n, i, kk, rep):
    wm = m // warp_m
    wi, ii = i // wm, i % wm
    r, c = ii % 16, kk % 16
    lane = (r % 8) * 4 + (c % 8) // 2
    e = (c // 8) * 4 + (r // 8) * 2 + c % 2
    local = ((ii // 16) * (k // 16) + kk // 16) * 8 + e
    return (wi * warp_n + rep) * 32 + lane, local


@pytest.mark.parametrize("m,k,warp_m,warp_n", [(16, 16, 1, 1), (64, 32, 2, 2), (128, 64, 2, 4), (64, 16, 4, 1)])
def test_a_fragment(m, k, warp_m, warp_n):
    f = make_mma_a_fragment(m, k, warp_m, warp_n)
    assert f.replicate == warp_n
    assert f.thread_extent == warp_m * warp_n * 32
    assert f.local_size == (m // warp_m) * k // 32
    pts = grid((m, k))
    for rep in range(warp_n):
        t, l = thread_local(f, pts, rep)
        rt, rl = a_formula(m, k, warp_m, warp_n, *pts, rep)
        np.testing.assert_array_equal(t, rt)
        np.testing.assert_array_equal(l, rl)
    assert_exact_cover(f)
    inv = f.inverse()
    assert inv.output_shape == (m, k) + ((warp_n,) if warp_n > 1 else ())
    tt = grid((f.thread_extent, f.local_size))
    back = inv.map_numpy(*tt)
    rep = back[2] if warp_n > 1 else 0
    t2, l2 = thread_local(f, back[:2], rep) if warp_n > 1 else thread_local(f, back[:2])
    np.testing.assert_array_equal(t2, tt[0])
    np.testing.assert_array_equal(l2, tt[1])


def test_a_fragment_register_pairs():
    # a0,a1 = (row lane/4, col 2*(lane%4)+{0,1}); a2,a3 row+8; a4,a5 col+8; a6,a7 row+8,col+8
    f = make_mma_a_fragment(16, 16, 1, 1)
    for lane in range(32):
        r0, c0 = lane // 4, 2 * (lane % 4)
        expect = [(r0, c0), (r0, c0 + 1), (r0 + 8, c0), (r0 + 8, c0 + 1),
                  (r0, c0 + 8), (r0, c0 + 9), (r0 + 8, c0 + 8), (r0 + 8, c0 + 9)]
        for reg, (r, c) in enumerate(expect):
            assert int(f.map_thread([r, c])) == lane
            assert int(f.local_offset([r, c])) == reg


@pytest.mark.parametrize("k,n,warp_m,warp_n", [(16, 8, 1, 1), (32, 64, 2, 2), (64, 128, 4, 2)])
def test_b_fragment(k, n, warp_m, warp_n):
    f = make_mma_b_fragment(k, n, warp_m, warp_n)
    wn = n // warp_n
    pts = grid((k, n))
    for rep in range(warp_m):
        t, l = thread_local(f, pts, rep)
        kk, j = pts
        wj, jj = j // wn, j % wn
        r = kk % 16
        lane = (jj % 8) * 4 + (r % 8) // 2
        rt = (rep * warp_n + wj) * 32 + lane
        rl = ((kk // 16) * (wn // 8) + jj // 8) * 4 + (r // 8) * 2 + r % 2
        np.testing.assert_array_equal(t, rt)
        np.testing.assert_array_equal(l, rl)
    assert_exact_cover(f)


def test_fully_replicated():
    f = Fragment.fully_replicated((4, 8), 64)
    assert f.replicate == 64 and f.thread_extent == 64
    assert f.local_shape == (32,) and f.local_size == 32
    pts = grid((4, 8))
    for rep in range(64):
        t, l = thread_local(f, pts, rep)
        assert (t == rep).all()
        np.testing.assert_array_equal(l, pts[0] * 8 + pts[1])
    assert_exact_cover(f)
    inv = f.inverse()
    assert inv.input_shape == (64, 32) and inv.output_shape == (4, 8, 64)
    assert [int(x) for x in inv.map([5, 13])] == [1, 5, 5]
    single = Fragment.fully_replicated((2, 2), 1)
    assert single.thread_extent == 1 and single.replicate == 1


def _base():
    # (4, 2) tile on 4 threads, 2 registers: thread = i, local = j
    return Fragment((4, 2), lambda i, j: i, lambda i, j: j)


@pytest.mark.parametrize("lower_dim_first", [True, False])
def test_repeat_on_registers(lower_dim_first):
    f = _base().repeat((2, 3), on_thread=False, lower_dim_first=lower_dim_first)
    assert f.input_shape == (8, 6)
    assert f.thread_extent == 4 and f.local_size == 12
    pts = grid((8, 6))
    t, l = thread_local(f, pts)
    i, j = pts
    ti, tj = i // 4, j // 2
    tile = ti * 3 + tj if lower_dim_first else ti + tj * 2
    np.testing.assert_array_equal(t, i % 4)
    np.testing.assert_array_equal(l, tile * 2 + j % 2)
    assert_exact_cover(f)


@pytest.mark.parametrize("lower_dim_first", [True, False])
def test_repeat_on_thread(lower_dim_first):
    f = _base().repeat((2, 3), on_thread=True, lower_dim_first=lower_dim_first)
    assert f.input_shape == (8, 6)
    assert f.thread_extent == 24 and f.local_size == 2
    pts = grid((8, 6))
    t, l = thread_local(f, pts)
    i, j = pts
    ti, tj = i // 4, j // 2
    tile = ti * 3 + tj if lower_dim_first else ti + tj * 2
    np.testing.assert_array_equal(t, i % 4 + tile * 4)
    np.testing.assert_array_equal(l, j % 2)
    assert_exact_cover(f)
    inv = f.inverse()
    back = inv.map_numpy(t, l)
    np.testing.assert_array_equal(back[0], i)
    np.testing.assert_array_equal(back[1], j)


def test_replicate():
    f = _base().replicate(3)
    assert f.replicate == 3 and f.thread_extent == 12 and f.local_size == 2
    pts = grid((4, 2))
    for r in range(3):
        t, _ = thread_local(f, pts, r)
        np.testing.assert_array_equal(t, pts[0] + 4 * r)
    g = f.replicate(2)      # r in [0, 6): old replica r % 3, new group r // 3
    assert g.replicate == 6 and g.thread_extent == 24
    for r in range(6):
        t, _ = thread_local(g, pts, r)
        np.testing.assert_array_equal(t, pts[0] + 4 * (r % 3) + 12 * (r // 3))
    assert_exact_cover(g)
    assert _base().replicate(1).is_equal(_base())
    assert not f.is_equal(_base())


def test_map_thread_and_index_symbolic():
    f = make_mma_accumulator_fragment(32, 16, 1, 1)
    assert int(f.map_thread([9, 3])) == (9 % 8) * 4 + 1
    assert [int(x) for x in f.map_index([9, 3])] == [(0 * 2 + 0) * 4 + 1 * 2 + 1]
    assert "Fragment" in repr(f)
    assert "replicate=2" in repr(make_mma_a_fragment(32, 16, 1, 2))


def test_inverse_not_bijective_raises():
    with pytest.raises(LayoutError, match="not bijective"):
        Fragment((4, 4), lambda i, j: i, lambda i, j: j % 2).inverse()   # 2 elements per slot
    with pytest.raises(LayoutError):
        Fragment((4, 4), lambda i, j: i, lambda i, j: j * 2).inverse()   # holes in the registers


def test_prebuilt_exprs():
    i, j = Fragment.placeholders(2)
    f = Fragment((8, 8), i * 4 + j // 2, [j % 2])
    assert f.is_equal(Fragment((8, 8), lambda a, b: a * 4 + b // 2, lambda a, b: b % 2))
    g = Fragment((8, 8), i * 4 + j // 2 + Fragment.rep_var * 32, [j % 2], replicate=2)
    assert g.is_equal(Fragment((8, 8), lambda a, b: a * 4 + b // 2, lambda a, b: b % 2).replicate(2))


def test_tile_of_splits_a_wgmma_accumulator_into_column_blocks():
    from tilex.layout.wgmma import make_wgmma_accumulator_fragment

    acc = make_wgmma_accumulator_fragment(128, 256, 2, 1)
    sub, strides, placement = acc.tile_of((128, 64))
    assert strides == [0, 32]
    assert [int(placement.map([r])[0]) for r in range(32)] == list(range(32))  # the block's registers are dense  # a 64-column block is 32 registers further on, in the same threads
    assert sub.input_shape == (128, 64) and sub.thread_extent == 256 and sub.local_size == 32
    # element (r, c + 64 q) of the accumulator is element (r, c) of the block, q * 32 registers on
    for r, c, q in [(0, 0, 1), (77, 13, 2), (127, 63, 3)]:
        assert int(acc.map_thread([r, c + 64 * q])) == int(sub.map_thread([r, c]))
        assert int(acc.local_offset([r, c + 64 * q])) == int(sub.local_offset([r, c])) + 32 * q
    sub.inverse()  # the block is a fragment of its own (bijective onto its threads x registers)


def test_tile_of_rejects_blocks_that_do_not_repeat_one_fragment():
    from tilex.layout.wgmma import make_wgmma_accumulator_fragment

    acc = make_wgmma_accumulator_fragment(128, 256, 2, 1)
    with pytest.raises(LayoutError, match="different threads"):
        acc.tile_of((64, 256))  # the two 64-row halves belong to different warpgroups
    with pytest.raises(LayoutError):
        acc.tile_of((128, 4))  # splits the pairs of columns a thread holds
    with pytest.raises(LayoutError, match="do not tile"):
        acc.tile_of((128, 96))


def test_tile_of_packs_registers_a_block_takes_in_two_runs():
    import numpy as np

    from tilex.layout.wgmma import make_wgmma_accumulator_fragment

    # swap-AB's C^T accumulator: 256 rows over two warpgroups, each thread two m64 tiles of 80 registers
    acc = make_wgmma_accumulator_fragment(256, 160, 2, 1)
    sub, strides, placement = acc.tile_of((256, 32))
    assert strides == [0, 16] and sub.local_size == 32 and sub.thread_extent == 256
    assert [int(placement.map([r])[0]) for r in (0, 15, 16, 31)] == [0, 15, 80, 95]
    sub.inverse()  # dense: a fragment of its own
    rows, cols = np.meshgrid(np.arange(256), np.arange(160), indexing="ij")
    thread, (local,) = acc.map_numpy(rows, cols)
    s_thread, (s_local,) = sub.map_numpy(rows, cols % 32)
    placed = placement.map_numpy(np.asarray(s_local))[0]
    assert (np.broadcast_to(thread, rows.shape) == np.broadcast_to(s_thread, rows.shape)).all()
    assert (local == placed + (cols // 32) * 16).all()


def test_tile_of_interleaved_blocks():
    # registers 0, 2, 4 hold block 0 and 1, 3, 5 block 1
    f = Fragment((1, 6), lambda i, j: i, lambda i, j: (j % 3) * 2 + j // 3)
    sub, strides, placement = f.tile_of((1, 3))
    assert strides == [0, 1] and sub.local_size == 3
    assert [int(placement.map([r])[0]) for r in range(3)] == [0, 2, 4]


def test_tile_of_rejects_registers_that_are_no_mixed_radix():
    from tvm import tirx

    # block 0 in registers 0, 1, 3 and block 1 in 2, 4, 5
    f = Fragment((1, 6), lambda i, j: i, lambda i, j: tirx.Select(j == 2, 3, tirx.Select(j == 3, 2, j)))
    with pytest.raises(LayoutError, match="not a mixed radix"):
        f.tile_of((1, 3))
