"""tilex.ir.lowbit_chunk: the packed chunk of 32 low-bit codes (the layout the lowbit.h decoders read)."""
import random

import pytest

from tilex.ir import lowbit_chunk as lc


@pytest.mark.parametrize("bits", range(1, 9))
def test_round_trip(bits):
    rng = random.Random(bits)
    for codes in ([0] * 32, [(1 << bits) - 1] * 32, [rng.randrange(1 << bits) for _ in range(32)],
                  [rng.randrange(1 << bits) for _ in range(32)]):
        words = lc.pack_chunk(codes, bits)
        assert len(words) == bits and all(0 <= w < 1 << 32 for w in words)
        assert lc.unpack_chunk(words, bits) == codes


@pytest.mark.parametrize("bits", range(1, 9))
def test_every_word_bit_holds_one_code_bit(bits):
    """The chunk is dense: flipping any single code bit flips exactly one word bit, a different one each time."""
    seen = set()
    for k in range(32):
        for b in range(bits):
            codes = [0] * 32
            codes[k] = 1 << b
            words = lc.pack_chunk(codes, bits)
            (where,) = [(q, w.bit_length() - 1) for q, w in enumerate(words) if w]
            assert words[where[0]] == 1 << where[1]
            seen.add(where)
    assert len(seen) == 32 * bits


def test_four_bit_words():
    # one plane of width 4: word q holds pairs 4q .. 4q+3, c[2j] in nibble i of the low half, c[2j+1] in the high
    codes = [k % 16 for k in range(32)]
    assert lc.pack_chunk(codes, 4) == [0x75316420, 0xFDB9ECA8, 0x75316420, 0xFDB9ECA8]


def test_three_bit_words():
    # planes [2, 1]: words 0, 1 hold bits 0..1 (pairs 0..7, 8..15 at 2-bit fields), word 2 holds bit 2 of all 16
    # pairs (pair j at bit j of each half). c = k % 8: the even codes 0,2,4,6 have low bits 0,2,0,2 and bit 2 of
    # 0,0,1,1; the odd codes 1,3,5,7 have low bits 1,3,1,3 and bit 2 of 0,0,1,1.
    codes = [k % 8 for k in range(32)]
    assert lc.pack_chunk(codes, 3) == [0xDDDD8888, 0xDDDD8888, 0xCCCCCCCC]


def test_pair_fields_extract_together():
    """(w[q] >> (p*i)) & ((2^p - 1) * 0x00010001) gives both fields of pair j at bits 0 and 16."""
    rng = random.Random(7)
    for bits in range(1, 9):
        codes = [rng.randrange(1 << bits) for _ in range(32)]
        words = lc.pack_chunk(codes, bits)
        for p, o, first in lc.plane_offsets(bits):
            for j in range(16):
                q, i = divmod(j, 16 // p)
                both = (words[first + q] >> (p * i)) & (((1 << p) - 1) * 0x00010001)
                assert both & 0xFFFF == (codes[2 * j] >> o) & ((1 << p) - 1)
                assert both >> 16 == (codes[2 * j + 1] >> o) & ((1 << p) - 1)


def test_planes():
    assert {b: sum(p) for b, p in lc.PLANES.items()} == {b: b for b in range(1, 9)}
    assert lc.plane_offsets(7) == [(4, 0, 0), (2, 4, 4), (1, 6, 6)]


def test_errors():
    with pytest.raises(ValueError, match="32 codes"):
        lc.pack_chunk([0] * 31, 4)
    with pytest.raises(ValueError, match="not a 3-bit code"):
        lc.pack_chunk([8] + [0] * 31, 3)
    with pytest.raises(ValueError, match="1..8"):
        lc.pack_chunk([0] * 32, 9)
    with pytest.raises(ValueError, match="is 5 words"):
        lc.unpack_chunk([0] * 4, 5)
