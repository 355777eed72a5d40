"""tilex.layout.convert: which conversions stay in registers, and the fragment a loop induces on a tile it reads
through an index map."""
import numpy as np
from tvm import tirx

from tilex.layout import Fragment
from tilex.layout.convert import in_same_threads, pulled_back, reads_own_elements
from tilex.op.partition import coalesced_plan


def _vars(n):
    return [tirx.Var(f"v{k}", "int32") for k in range(n)]


def test_register_moves_only_when_every_element_keeps_its_thread():
    rows = Fragment((8, 32), lambda i, j: j, lambda i, j: i)  # thread j holds column j
    rows_reversed = Fragment((8, 32), lambda i, j: j, lambda i, j: 7 - i)  # same threads, other registers
    by_row = Fragment((8, 32), lambda i, j: i * 4 + j // 8, lambda i, j: j % 8)
    assert in_same_threads(rows_reversed, rows) and in_same_threads(rows, rows_reversed)
    assert not in_same_threads(by_row, rows)
    # a replicated destination needs the element in every replica's thread
    both = Fragment((8, 32), lambda i, j, r: r * 32 + j, lambda i, j: i, replicate=2)
    assert in_same_threads(rows, both) and not in_same_threads(both, rows)


def test_transposed_read_pulls_back_the_transposed_layout():
    loop = coalesced_plan([64, 64], 128, 4)
    i, j = _vars(2)
    want = pulled_back(loop, [j, i], [i, j], [64, 64], [64, 64])
    assert want is not None
    for a, b in [(0, 0), (3, 17), (63, 5)]:
        assert int(want.map_thread([b, a]).value) == int(loop.map_thread([a, b]).value)
    assert reads_own_elements(loop, want, [j, i], [i, j], [64, 64])
    assert not reads_own_elements(loop, loop, [j, i], [i, j], [64, 64])


def test_packed_read_pulls_back_dense_registers():
    # the wgmma A operand of a 64 x 64 fp16 tile: each thread holds column pairs (2q, 2q + 1)
    loop = Fragment((64, 64), lambda i, j: i // 16 * 32 + i % 8 * 4 + j % 8 // 2,
                    lambda i, j: j // 8 * 4 + i % 16 // 8 * 2 + j % 2)
    i, j = _vars(2)
    want = pulled_back(loop, [i, tirx.floordiv(j, 2)], [i, j], [64, 64], [64, 32])
    assert want is not None and want.local_size == 16  # one byte of two values each, no gaps
    grids = np.meshgrid(np.arange(64), np.arange(32), indexing="ij")
    t, (loc,) = want.map_numpy(*grids)
    pairs = np.stack([np.broadcast_to(t, grids[0].shape), np.broadcast_to(loc, grids[0].shape)], -1).reshape(-1, 2)
    assert len({tuple(p) for p in pairs}) == 64 * 32  # each (thread, register) holds one byte


def test_maps_that_do_not_pull_back():
    loop = coalesced_plan([64, 64], 128, 4)
    i, j = _vars(2)
    assert pulled_back(loop, [i + j, j], [i, j], [64, 64], [128, 64]) is None  # not one variable per index
    assert pulled_back(loop, [i, i], [i, j], [64, 64], [64, 64]) is None  # a variable twice
    # j // 8 of a plan whose 8 consecutive columns span two threads: no fragment keeps the read in its thread
    assert pulled_back(loop, [i, tirx.floordiv(j, 8)], [i, j], [64, 64], [64, 8]) is None
