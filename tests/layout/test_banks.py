"""tilex.layout.banks: the bank-conflict model on access sets with known counts, and the swizzle synthesizer on
tiles with known optimal swizzles."""
import numpy as np
import pytest

from layout_testlib import grid
from programs import example, shared_transpose
from tilex.layout.banks import (TMA_MODES, Swizzle, WarpAccess, column_elements, conflicts, fragment_accesses,
                                ldmatrix_rows, row_vectors, synthesize, wavefronts)
from tilex.layout.swizzle import make_swizzled_layout


def _ldmatrix_and_fill(row_bytes, rows):
    return [ldmatrix_rows(row_bytes, r0, c0) for r0 in range(0, rows, 16) for c0 in (0, 32)] + \
        [row_vectors(row_bytes, 16, r) for r in range(0, rows, 32 * 16 // row_bytes)]


def test_counts_of_known_patterns():
    # 8 rows of 128 bytes, same 16-byte column: all in one group of 4 banks, 8 wavefronts a phase
    assert wavefronts(ldmatrix_rows(128)) == 4 * 8 and conflicts(ldmatrix_rows(128)) == 4 * 7
    # fp32 column of a 32 x 32 tile: one bank, 32 words
    assert conflicts(column_elements(128, 4)) == 31
    # rows of 64 bytes: banks 0 and 16 alternate, 16 words each
    assert conflicts(column_elements(64, 4)) == 15
    # consecutive vectors: conflict-free at every width; one word read by every thread: a broadcast
    assert all(conflicts(row_vectors(256, w)) == 0 for w in (4, 8, 16))
    assert conflicts(WarpAccess((64,) * 32, 4)) == 0
    # 8-byte accesses are served by half warps: stride 256 bytes puts a half warp's 16 threads on banks 0-1
    assert conflicts(WarpAccess(tuple(256 * t for t in range(32)), 8)) == 2 * 15


@pytest.mark.parametrize("row_bytes,want", [(128, Swizzle(3, 4, 3)), (64, Swizzle(2, 4, 3)), (32, Swizzle(1, 4, 3))])
def test_ldmatrix_tiles_get_the_tma_modes(row_bytes, want):
    acc = _ldmatrix_and_fill(row_bytes, 64)
    assert conflicts(acc) > 0
    assert synthesize(acc, row_bytes * 64) == (want, 0)


def test_fp32_transpose_gets_a_word_swizzle():
    acc = [column_elements(128, 4, c) for c in range(0, 32, 3)] + [row_vectors(128, 4, r) for r in range(4)]
    s, c = synthesize(acc, 128 * 32)
    assert c == 0 and s == Swizzle(5, 2, 5)


def test_conflict_free_accesses_keep_the_identity():
    assert synthesize([row_vectors(256, 16, r) for r in range(8)], 256 * 16) == (Swizzle(0, 0, 0), 0)


def test_swizzles_are_bijections_that_keep_vectors_whole():
    for s in TMA_MODES + (Swizzle(5, 2, 5),):
        o = np.arange(s.span * 4)
        p = s(o)
        assert sorted(p) == list(o) and np.array_equal(s(p), o)  # an involution
        chunk = 1 << s.base
        # every 2^base-byte chunk moves whole: a vector access of up to that width stays contiguous
        assert all(np.array_equal(p[i:i + chunk], p[i] + np.arange(chunk)) for i in range(0, len(o), chunk))


def test_the_128_byte_mode_is_tilexs_gemm_operand_swizzle():
    """make_swizzled_layout (fp16, 64 columns) is Swizzle<3,4,3> on byte offsets."""
    rows, cols = 16, 64
    i, j = grid((rows, cols))
    pi, pj = make_swizzled_layout(rows, cols, 16).map_numpy(i, j)
    assert np.array_equal((np.asarray(pi) * cols + np.asarray(pj)) * 2, Swizzle(3, 4, 3)((i * cols + j) * 2))


def test_bad_accesses_and_swizzles_are_refused():
    with pytest.raises(ValueError, match="width 3"):
        WarpAccess((0,), 3)
    with pytest.raises(ValueError, match="not aligned"):
        WarpAccess((8,), 16)
    with pytest.raises(ValueError, match="33 threads"):
        WarpAccess(tuple(range(0, 33 * 4, 4)), 4)
    with pytest.raises(ValueError, match="shift >= bits"):
        Swizzle(3, 4, 2)


@pytest.mark.parametrize("dtype,loads,swizzle", [("float32", 4 * 31, Swizzle(3, 4, 3)),
                                                 ("float16", 4 * 15, Swizzle(2, 4, 3))])
def test_report_of_a_transpose_through_shared_memory(dtype, loads, swizzle):
    """Rows stored as 16-byte vectors (conflict-free), read down the columns: every lane of a warp in one bank
    (fp32: 31 conflicts per load, 4 loads a thread; fp16: 64-byte rows, two banks, 15). The 16-byte stores keep
    the swizzle's XOR above bit 4, so the best one leaves 3 conflicts per load; tilex compiles the tile with it
    unless told not to."""
    import tilex

    plain = tilex.compile(shared_transpose(256, 128, dtype), out_idx=-1, target="sm_90a",
                          pass_configs={"tilex.disable_bank_swizzle": True})
    assert plain.bank_conflicts() == {"S": {"ld": loads, "st": 0, "sites": 2, "swizzle": swizzle, "after": 4 * 3}}
    swizzled = tilex.compile(shared_transpose(256, 128, dtype), out_idx=-1, target="sm_90a")
    assert swizzled.bank_conflicts()["S"]["ld"] == 4 * 3


def test_swizzle_layouts_address_as_the_byte_swizzle():
    for s, shape, elem in [(Swizzle(3, 4, 3), (16, 64), 2), (Swizzle(5, 2, 5), (32, 32), 4),
                           (Swizzle(3, 4, 6), (64, 64), 4)]:
        i, j = grid(shape)
        pi, pj = s.layout(shape, elem).map_numpy(i, j)
        assert np.array_equal((np.asarray(pi) * shape[1] + np.asarray(pj)) * elem, s((i * shape[1] + j) * elem))
    with pytest.raises(ValueError, match="straddles"):
        Swizzle(3, 1, 3).layout((64, 64), 4)


def test_fragment_accesses_follow_the_registers():
    from tilex.op.partition import coalesced_plan

    plan = coalesced_plan([64, 64], 128, 4)  # thread t: 4 consecutive floats of row t // 16, then 8 rows down
    acc = fragment_accesses(plan, 4, vec=4)
    assert len(acc) == 8 and all(a.width == 16 for a in acc)
    assert acc[0].addresses == tuple(range(0, 2 * 256, 16))  # warp 0 covers rows 0 and 1
    assert conflicts(acc) == 0
    # the same registers one at a time: 4-byte accesses 16 bytes apart, 4 threads to a bank
    scalars = fragment_accesses(plan, 4, vec=1)
    assert len(scalars) == 32 and conflicts(scalars) == 32 * 3


def test_lanes_that_are_not_consecutive_are_scalar_accesses():
    """A packed read ``S[i, j // 2]`` vectorized over j: two lanes read one byte; modelled as one access a lane (a
    16-bit access at an odd address would be refused). The tile's stores are cp.async (not modelled)."""
    import tilex

    int4_gemm_by_hand = example("layout_conflicts")["int4_gemm_by_hand"]
    report = tilex.compile(int4_gemm_by_hand(256, 256, 256), target="sm_90a").bank_conflicts()
    assert report["Wq_s"]["ld"] == 0 and report["Wq_s"]["sites"] == 1


def test_the_staged_gemm_epilogue_stores_are_read_and_conflict_free():
    """The C tile a warp-specialized GEMM stages for its TMA store: the XOR-swizzled fragment stores (the swizzle
    is written as ^ in the address, which TVM's simplifier does not fold) are found, 64 per thread, none
    conflicting."""
    import tilex
    from tilex.kernels.gemm import matmul

    k = tilex.compile(matmul(1024, 1024, 1024, 128, 256, 64, 3, 256, stage_c=True), out_idx=-1, target="sm_90a")
    report = k.bank_conflicts()
    assert report["C_s"] == {"ld": 0, "st": 0, "sites": 1, "swizzle": Swizzle(0, 0, 0), "after": 0}
