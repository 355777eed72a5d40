"""ChooseRasterization: a grid without T.use_swizzle gets the panel whose wave of blocks reads the fewest bytes;
T.use_swizzle, enable=False too, pins the user's choice (IR only, no GPU needed)."""

from programs import matmul
from sm90_lowering import lowered as _lowered, note
from tilex.ir.names import RASTERIZATION_ATTR


def _code(f):
    """The function's script without its attributes."""
    return "\n".join(line for line in f.script().splitlines() if "T.func_attr" not in line)


def _note(f):
    return note(f, RASTERIZATION_ATTR)


def test_the_panel_balances_the_rows_and_columns_a_wave_reads():
    # 128x256 tiles: a block reads 16 KB of A (by) and 32 KB of B (bx) per stage; 132 blocks at once:
    # P = sqrt(132 * 32 / 16) = 16.2 -> 16
    f = _lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256))
    assert _note(f).startswith("panel 16 (row): 132 blocks at once read 16384 bytes per grid row and 32768")
    # the same kernel as a user writing T.use_swizzle(16) gets
    assert _code(f) == _code(_lowered(matmul(4096, 4096, 4096, panel=16, bm=128, bn=256, bk=64, threads=256)))
    # 128x128 tiles at two blocks per multiprocessor: sqrt(264 * 1) -> 16
    assert _note(_lowered(matmul(4096, 4096, 4096, bm=128, bn=128, bk=64),
                          **{"tilex.disable_block_coarsening": True})).startswith("panel 16 (row): 264")
    # four blocks at once: sqrt(4 * 2) -> 2 of the grid's 32 rows
    assert _note(_lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256),
                          **{"tilex.num_sms": 4})).startswith("panel 2 (row)")


def test_a_pinned_rasterization_wins():
    pinned = _lowered(matmul(4096, 4096, 4096, panel=10, bm=128, bn=256, bk=64, threads=256))
    assert _note(pinned) is None
    assert _code(pinned) != _code(_lowered(matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, threads=256)))
    # enable=False keeps the launch order: tiles are taken row-major, no panel arithmetic (min(P, rows left))
    off = _lowered(matmul(4096, 4096, 4096, panel=10, enable=False, bm=128, bn=256, bk=64, threads=256))
    assert _note(off) is None and "T.min(" not in off.script()
    assert "T.min(" in pinned.script()


def test_no_panel_when_it_cannot_pay():
    # one wave: every block runs at once
    assert _note(_lowered(matmul(1024, 1024, 1024, bm=128, bn=256, bk=64, threads=256))) is None
    # the best panel is the whole grid height (4 rows of blocks)
    assert _note(_lowered(matmul(512, 65536, 1024, bm=128, bn=256, bk=64, threads=256))) is None
