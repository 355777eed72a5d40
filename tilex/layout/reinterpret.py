"""The Fragment of a register tile read as another element type (`T.view` of a fragment): every thread keeps its
bits, the tile's last dimension is rescaled by the ratio of the element sizes.

``split_elements(f, s)``: each element of `f` read as `s` narrower ones (uint32 words as four uint8 codes); always
a Fragment. ``merge_elements(f, r)``: `r` neighbours along the last dimension read as one wider element (uint8
codes as uint32 words); only where they are `r` consecutive registers of one thread, starting at a multiple of
`r`. The two are inverse: ``merge_elements(split_elements(f, s), s)`` is `f`.

``reshape_fragment(f, shape)`` (`T.reshape` of a fragment): the same elements in row-major order seen with another
shape, each in the thread and register it had (dimensions split or merged); always a Fragment.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from ._expr import LayoutError, row_major_offset
from .fragment import Fragment


def _flat_locals(frag, locals_):
    return locals_[0] if len(locals_) == 1 else np.ravel_multi_index(locals_, frag.local_shape)


def split_elements(frag: Fragment, s: int) -> Fragment:
    """`frag` (..., n) as (..., n * s): element (..., j) is part j % s of `frag`'s (..., j // s), in the same
    thread at local ``offset * s + j % s`` (offset: the row-major local offset in `frag`)."""
    s = int(s)
    if s < 1:
        raise LayoutError(f"split_elements: the factor must be >= 1, got {s}")
    shape = list(frag.input_shape[:-1]) + [int(frag.input_shape[-1]) * s]
    rep = int(frag.replicate)

    def base_index(ix):
        return list(ix[:-1]) + [tirx.floordiv(ix[-1], s)]

    def thread(*args):
        ix, r = (args[:-1], args[-1]) if rep > 1 else (args, 0)
        return frag.map_thread(base_index(ix), rep=r)

    def index(*ix):
        return frag.local_offset(base_index(ix)) * s + tirx.floormod(ix[-1], s)

    return Fragment(shape, thread, index, replicate=rep)


def merge_elements(frag: Fragment, r: int) -> Fragment:
    """`frag` (..., n) as (..., n // r): element (..., j) is `frag`'s (..., j*r .. j*r + r - 1), which must be
    registers ``r*m .. r*m + r - 1`` of one thread (for every replica); LayoutError naming the first element
    that is not."""
    r = int(r)
    n = int(frag.input_shape[-1])
    if r < 1 or n % r:
        raise LayoutError(f"merge_elements: the last dimension ({n}) is not a whole number of groups of {r}")
    shape = list(frag.input_shape[:-1]) + [n // r]
    rep = int(frag.replicate)

    def first(ix):
        return list(ix[:-1]) + [ix[-1] * r]

    def thread(*args):
        ix, rr = (args[:-1], args[-1]) if rep > 1 else (args, 0)
        return frag.map_thread(first(ix), rep=rr)

    def index(*ix):
        return tirx.floordiv(frag.local_offset(first(ix)), r)

    grid = np.meshgrid(*[np.arange(int(d)) for d in frag.input_shape], indexing="ij")
    flat = [g.reshape(-1) for g in grid]
    for rr in range(rep):
        th, loc = frag.map_numpy(*flat, rep=rr)
        th = np.broadcast_to(th, flat[0].shape)
        loc = np.broadcast_to(_flat_locals(frag, loc), flat[0].shape)
        part = flat[-1] % r
        head = flat[-1] - part  # the group's first element, in the same row
        order = np.ravel_multi_index(flat[:-1] + [head], [int(d) for d in frag.input_shape])
        bad = (th != th[order]) | (loc != loc[order] + part) | (loc[order] % r != 0)
        if bad.any():
            k = int(np.argmax(bad))
            elem = tuple(int(f[k]) for f in flat)
            raise LayoutError(
                f"merge_elements: the {r} elements of a group are not {r} consecutive registers of one thread: "
                f"element {elem} is thread {int(th[k])} local {int(loc[k])}, its group starts at thread "
                f"{int(th[order[k]])} local {int(loc[order[k]])}")
    return Fragment(shape, thread, index, replicate=rep)


def _unflatten(flat, shape):
    out = []
    for d in reversed(shape[1:]):
        out.append(tirx.floormod(flat, d))
        flat = tirx.floordiv(flat, d)
    out.append(flat)
    return list(reversed(out))


def reshape_fragment(frag: Fragment, shape) -> Fragment:
    """`frag` seen with `shape` (the same number of elements): element ``y`` of the result is element
    ``unflatten(row_major(y))`` of `frag`, in the same thread (each replica) at the same register."""
    shape = [int(d) for d in shape]
    old = [int(d) for d in frag.input_shape]
    if int(np.prod(shape)) != int(np.prod(old)):
        raise LayoutError(f"reshape_fragment: {old} has {int(np.prod(old))} elements, {shape} has "
                          f"{int(np.prod(shape))}")
    rep = int(frag.replicate)

    def base_index(ix):
        return _unflatten(row_major_offset(list(ix), shape), old)

    def thread(*args):
        ix, r = (args[:-1], args[-1]) if rep > 1 else (args, 0)
        return frag.map_thread(base_index(ix), rep=r)

    def index(*ix):
        return frag.local_offset(base_index(ix))

    return Fragment(shape, thread, index, replicate=rep)
