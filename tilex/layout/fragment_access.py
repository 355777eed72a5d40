"""Reaching a register fragment through shifted or fixed indices.

A loop (or a copy) that touches ``tile[indices]`` of a fragment whose indices are the loop's variables shifted by
something from outside the loop (``acc[i + s * 16, j]``, ``lse[k, i]``) or fixed (``logits[i, 0]``) runs correctly
only where each iteration finds its element in its own thread, whatever that outer value is. This module answers:

* `split_offsets`: each index as a part over the loop's variables plus an offset free of them;
* `offset_choices`: the offsets that can occur with some access inside the tile (a superset: from the offset's
  known range and its residue, ``s * 16`` is a multiple of 16); `offsets_inside`: the smallest that keep every
  access inside;
* `threads_agree`: whether, for every such offset, the threads running each element are threads holding the one it
  reads (for a write: exactly those), with a sentence naming an element that is not, when not;
* `access_layout`: the loop layout under which iteration ``x`` runs in the threads holding ``tile[indices(x)]``
  (TileLang derives a T.Parallel loop's layout from a fragment it touches this way);
* `box_chunks`: which register chunks of each thread hold elements of a constant box of the fragment (a copy of a
  fragment slice visits only those); `chunks_in_one_replica`: whether a chunk of registers is one replica's;
* `with_unit_dims`, `spread_over_blocks`: a fragment seen over a shape with unit dimensions added, and the fragment
  made of blocks that each live where one given block does (what a loop reading ``lse[k, i]`` for every ``k``
  needs).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import tvm
from tvm import tirx

from tilex.ir.visit import BufferLoadNode, free_vars, walk

from ._expr import LayoutError, compile_numpy, domain_grid, row_major_offset, substitute
from .fragment import Fragment

__all__ = ["split_offsets", "offset_choices", "threads_agree", "access_layout", "box_chunks", "with_unit_dims",
           "spread_over_blocks", "offsets_inside", "chunks_in_one_replica"]

#: most offset combinations `threads_agree` enumerates before it gives up (cannot prove)
MAX_OFFSET_CHOICES = 4096


def split_offsets(indices, known_vars, analyzer=None):
    """``(bases, offsets)``: each index as ``base + offset``, the base over `known_vars` alone (the other
    variables set to 0) and the offset free of them (an index reading memory, free of `known_vars`, is an offset
    whole); None when some index does not split so (an outer variable inside a ``//`` or ``%`` with a loop
    variable, or multiplying one)."""
    ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
    known = list(known_vars)
    bases, offsets = [], []
    for e in indices:
        opaque = []
        walk(e, [(BufferLoadNode, opaque.append), (tvm.ir.Call, opaque.append)])
        if opaque:  # a value read from memory or computed by a call: an offset as a whole, or nothing
            if any(any(v.same_as(k) for k in known) for v in free_vars(e)):
                return None
            bases.append(tirx.const(0, "int32"))
            offsets.append(e)
            continue
        outer = [v for v in free_vars(e) if not any(v.same_as(k) for k in known)]
        base = ana.simplify(substitute(e, {v: 0 for v in outer})) if outer else e
        off = ana.simplify(e - base) if outer else tirx.const(0, "int32")
        if any(any(v.same_as(k) for k in known) for v in free_vars(off)):
            return None
        bases.append(base)
        offsets.append(off)
    return bases, offsets


def offset_choices(offsets, base_ranges, shape, analyzer=None, limit=MAX_OFFSET_CHOICES):
    """Every combination of offset values (one per dimension) that puts some access inside the tile: offset d
    ranges over ``[-max base_d, shape_d - 1 - min base_d]`` (`base_ranges`: (min, max) per dimension), narrowed by
    what `analyzer` knows of it, in steps of its residue (``s * 16 + 8``: 8 modulo 16). A superset of the offsets
    the program uses. None when there are more than `limit` combinations."""
    ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
    per_dim = []
    for off, (bmin, bmax), size in zip(offsets, base_ranges, shape):
        lo, hi = -int(bmax), int(size) - 1 - int(bmin)
        if isinstance(off, tirx.IntImm):
            per_dim.append([int(off.value)])
            continue
        bound = ana.const_int_bound(off)
        lo, hi = max(lo, int(bound.min_value)), min(hi, int(bound.max_value))
        mod = ana.modular_set(off)
        coeff, base = abs(int(mod.coeff)), int(mod.base)
        if coeff == 0:
            per_dim.append([base] if lo <= base <= hi else [])
        else:
            per_dim.append(list(range(lo + (base - lo) % coeff, hi + 1, coeff)))
        if math.prod(len(v) for v in per_dim) > limit:
            return None
    return list(itertools.product(*per_dim))


def offsets_inside(indices, loop_vars, extents, shape, analyzer=None):
    """`indices` (over `loop_vars`, ranging over `extents`, and variables from outside the loop) with their outer
    parts replaced by the smallest offsets that keep every access inside `shape` (``acc[i + s * 16, j]`` over 16
    rows: ``acc[i, j]``); None when the indices do not split so or no offsets do."""
    ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
    split = split_offsets(indices, loop_vars, ana)
    if split is None:
        return None
    bases, offs = split
    grid = domain_grid([int(e) for e in extents])
    vals = compile_numpy(bases, list(loop_vars))(*grid) if grid else [np.zeros(1, np.int64) for _ in bases]
    ranges = [(int(v.min()), int(v.max())) for v in vals]
    choices = offset_choices(offs, ranges, shape, ana)
    fits = [c for c in choices or [] if all(lo + o >= 0 and hi + o < int(s)
                                            for (lo, hi), o, s in zip(ranges, c, shape))]
    if not fits:
        return None
    best = min(fits, key=lambda c: (sum(abs(o) for o in c), c))
    return [ana.simplify(b + o) for b, o in zip(bases, best)]


def _threads(frag, points, shape):
    """Per replica of `frag`, the thread holding each point (index arrays, out-of-tile points clipped)."""
    at = [np.clip(p, 0, s - 1) for p, s in zip(points, frag.input_shape)]
    return [np.broadcast_to(np.asarray(frag.map_numpy(*at, rep=r)[0]), shape) for r in range(int(frag.replicate))]


def _inside(points, tile_shape, shape):
    ok = np.ones(shape, dtype=bool)
    for p, s in zip(points, tile_shape):
        ok &= (p >= 0) & (p < s)
    return ok


def threads_agree(runner, runner_indices, holder, holder_indices, loop_vars, extents, inner=(), analyzer=None,
                  exact=False, outside_ok=None):
    """None when every element ``x`` of a loop over `extents` (variables `loop_vars`; `inner`: ``(var, min,
    extent)`` of serial loops inside it the indices may use) runs -- in the threads holding ``runner[runner_indices
    (x)]`` -- where ``holder[holder_indices(x)]`` lives, whatever the values of variables from outside the loop in
    either index list (every offset `offset_choices` gives); with `exact`, exactly there (a write reaches every
    replica). Else a sentence naming an element that does not.

    An access outside its tile fails, unless the indices depend on outer variables (`outside_ok`, by default: then
    an offset that puts some accesses outside is one the program uses only under a guard, or never)."""
    inner = list(inner)
    vars_ = list(loop_vars) + [v for v, _, _ in inner]
    grids = domain_grid(list(extents) + [int(e) for _, _, e in inner])
    for k, (_, lo, _) in enumerate(inner):
        grids[len(extents) + k] = grids[len(extents) + k] + int(lo)
    shape = grids[0].shape if grids else (1,)
    split_r = split_offsets(runner_indices, vars_, analyzer)
    split_h = split_offsets(holder_indices, vars_, analyzer)
    if split_r is None or split_h is None:
        return (f"the indices {list(runner_indices)} / {list(holder_indices)} do not split into a part over the "
                f"loop's variables plus an offset from outside it")
    bases = split_r[0] + split_h[0]
    offsets = split_r[1] + split_h[1]
    nr = len(runner_indices)
    values = compile_numpy(bases, vars_)(*grids) if bases else []
    values = [np.broadcast_to(v, shape) for v in values]
    outer = any(not isinstance(o, tirx.IntImm) for o in offsets)
    if outside_ok is None:
        outside_ok = outer
    tile = list(runner.input_shape) + list(holder.input_shape)
    choices = offset_choices(offsets, [(int(v.min()), int(v.max())) for v in values], tile, analyzer)
    if choices is None:
        return f"the offsets {offsets} take too many values to check"
    if not choices:
        return f"no value of the offsets {offsets} puts an access inside the fragment"
    names = [str(v) for v in vars_]
    for choice in choices:
        pts = [v + c for v, c in zip(values, choice)]
        rp, hp = pts[:nr], pts[nr:]
        inside = _inside(rp, runner.input_shape, shape) & _inside(hp, holder.input_shape, shape)
        if not inside.all() and not outside_ok:
            k = int(np.argmin(inside))
            return (f"element {_at(names, grids, k)} reads {[int(p[k]) for p in hp]}, outside the fragment's "
                    f"shape {list(holder.input_shape)}")
        runs = _threads(runner, rp, shape)
        holds = _threads(holder, hp, shape)
        bad = np.zeros(shape, dtype=bool)
        for r in runs:
            bad |= ~np.logical_or.reduce([r == h for h in holds])
        if exact:
            for h in holds:
                bad |= ~np.logical_or.reduce([h == r for r in runs])
        bad &= inside
        if bad.any():
            k = int(np.argmax(bad))
            shift = f" (offsets {list(choice)})" if outer else ""
            return (f"element {_at(names, grids, k)}{shift} runs in thread(s) "
                    f"{sorted({int(r[k]) for r in runs})} but its element {[int(p[k]) for p in hp]} lives in "
                    f"thread(s) {sorted({int(h[k]) for h in holds})}")
    return None


def _at(names, grids, k):
    return "(" + ", ".join(f"{n}={int(g[k])}" for n, g in zip(names, grids)) + ")"


def access_layout(frag, indices, loop_vars, extents):
    """The layout of a loop over `extents` (variables `loop_vars`) under which iteration ``x`` runs in the threads
    holding ``tile[indices(x)]`` of fragment `frag` (each replica: the loop is replicated as the fragment is),
    registers numbered densely; None when that is not a fragment layout of the loop (its threads do not form one
    dense range holding equally many elements each) or an iteration reads outside the tile. `indices` are the loop
    variables plus constants, or constants."""
    extents = [int(e) for e in extents]
    grid = domain_grid(extents)
    at = compile_numpy(list(indices), list(loop_vars))(*grid) if grid else []
    if any(a.min() < 0 or a.max() >= s for a, s in zip(at, frag.input_shape)):
        return None
    x = Fragment.placeholders(len(extents))
    idx = [substitute(e, dict(zip(loop_vars, x))) for e in indices]
    at_idx = dict(zip(frag.vars, idx))
    thread = substitute(frag.forward_thread, at_idx)
    local = row_major_offset([substitute(e, at_idx) for e in frag.forward_index], frag.local_shape)
    (values,) = compile_numpy([local], x)(*grid) if grid else ([0],)
    local = local - int(np.min(values))  # the part's registers counted from its first
    try:
        out = Fragment(extents, thread, [local], replicate=int(frag.replicate)).renumbered()
        out.inverse()
    except LayoutError:
        return None
    return out


def box_chunks(frag, mins, extents, vector, one_replica):
    """For a constant box ``[mins, mins + extents)`` of fragment `frag` visited in chunks of `vector` registers:
    ``[(chunk, every_thread)]`` of the chunks some thread (below the fragment's thread extent) holds an element of
    the box in -- with `one_replica`, a replica-0 element --, `every_thread` when all of them do. A chunk's
    registers hold consecutive elements of one row and replica (the caller picked `vector` so)."""
    inv = frag.inverse()
    nd = len(frag.input_shape)
    threads = np.arange(frag.thread_extent, dtype=np.int64)[:, None]
    chunks = np.arange(frag.local_size // vector, dtype=np.int64)[None, :]
    local = []
    flat = chunks * vector
    for s in reversed(frag.local_shape):
        local.append(flat % s)
        flat = flat // s
    out = inv.map_numpy(threads, *reversed(local))
    shape = (frag.thread_extent, frag.local_size // vector)
    pts = [np.broadcast_to(np.asarray(o), shape) for o in out]
    inside = np.ones(shape, dtype=bool)
    for p, m, e in zip(pts[:nd], mins, extents):
        inside &= (p >= m) & (p < m + e)
    if one_replica and int(frag.replicate) > 1:
        inside &= pts[nd] == 0
    return [(q, bool(inside[:, q].all())) for q in range(shape[1]) if inside[:, q].any()]


def chunks_in_one_replica(frag, vector):
    """Whether every aligned run of `vector` registers of a thread holds elements of one replica of `frag`."""
    if int(frag.replicate) == 1 or vector == 1:
        return True
    if frag.local_size % vector:
        return False
    t = np.arange(frag.thread_extent, dtype=np.int64)[:, None]
    flat = np.arange(frag.local_size, dtype=np.int64)[None, :]
    local = []
    for s in reversed(frag.local_shape):
        local.append(flat % s)
        flat = flat // s
    rep = np.broadcast_to(np.asarray(frag.inverse().map_numpy(t, *reversed(local))[-1]),
                          (frag.thread_extent, frag.local_size))
    runs = rep.reshape(frag.thread_extent, -1, vector)
    return bool((runs == runs[:, :, :1]).all())


def with_unit_dims(frag, shape):
    """`frag` seen over `shape`: its own dimensions with unit ones inserted anywhere (None when `shape` is not
    that)."""
    shape = [int(s) for s in shape]
    if list(frag.input_shape) == shape:
        return frag
    pos = [d for d, e in enumerate(shape) if e != 1]
    fpos = [d for d, e in enumerate(frag.input_shape) if e != 1]
    if [shape[d] for d in pos] != [frag.input_shape[d] for d in fpos]:
        return None
    x = Fragment.placeholders(len(shape))
    at = {v: tirx.const(0, "int32") for v in frag.vars}
    at.update({frag.vars[fd]: x[d] for fd, d in zip(fpos, pos)})
    return Fragment(shape, substitute(frag.forward_thread, at), [substitute(e, at) for e in frag.forward_index],
                    replicate=int(frag.replicate))


def spread_over_blocks(block, block_shape, shape):
    """The fragment of `shape` made of blocks of `block_shape` (dividing it; `block` is laid out over the block
    shape's non-unit dimensions) that all live in the same threads as `block`, one block's registers after
    another's: what a loop reading ``tile[s * e + i]`` for every outer ``s`` needs. None when the shapes do not
    fit."""
    shape, block_shape = [int(s) for s in shape], [int(s) for s in block_shape]
    if len(shape) != len(block_shape) or any(s % b for s, b in zip(shape, block_shape)):
        return None
    inner = with_unit_dims(block, block_shape)
    if inner is None:
        return None
    return inner.repeat([s // b for s, b in zip(shape, block_shape)], on_thread=False)
