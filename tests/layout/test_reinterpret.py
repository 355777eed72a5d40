"""tilex.layout.reinterpret: a fragment read as another element type keeps every thread's bits."""
import numpy as np
import pytest

from tilex.layout import LayoutError, make_wgmma_a_fragment, make_wgmma_accumulator_fragment
from tilex.layout.reinterpret import merge_elements, split_elements


def _owner(frag, *ix):
    th, loc = frag.map_numpy(*[np.array(i) for i in ix])
    return int(th), int(loc[0])


def test_pairs_of_an_mma_operand_are_words():
    halves = make_wgmma_a_fragment(64, 32, 1, 1, 16)
    words = merge_elements(halves, 2)
    assert list(words.input_shape) == [64, 16] and words.local_size == halves.local_size // 2
    for i, j in [(0, 0), (9, 3), (63, 15)]:
        t, loc = _owner(words, i, j)
        assert _owner(halves, i, 2 * j) == (t, 2 * loc) and _owner(halves, i, 2 * j + 1) == (t, 2 * loc + 1)


def test_split_then_merge_is_the_identity():
    for frag in (make_wgmma_a_fragment(64, 32, 1, 2, 16), make_wgmma_accumulator_fragment(64, 64, 1, 1)):
        assert merge_elements(split_elements(frag, 4), 4).is_equal(frag)


def test_split_keeps_each_part_in_the_element_thread():
    acc = make_wgmma_accumulator_fragment(64, 64, 1, 1)  # float32 read as bytes
    parts = split_elements(acc, 4)
    t, loc = _owner(acc, 5, 7)
    assert [_owner(parts, 5, 28 + c) for c in range(4)] == [(t, 4 * loc + c) for c in range(4)]


def test_scattered_elements_do_not_merge():
    halves = make_wgmma_a_fragment(64, 32, 1, 1, 16)  # k, k+1 together; k+2 in another thread
    with pytest.raises(LayoutError, match="not 4 consecutive registers of one thread"):
        merge_elements(halves, 4)
    with pytest.raises(LayoutError, match="not a whole number of groups"):
        merge_elements(halves, 3)
