"""Relations between two register fragments of one tile: is converting between them a register move in each thread,
and the fragment a loop's layout induces on a tile it reads through an index map.

Both answer questions layout inference asks when two operators want different fragments for one tile
(`tilex.transform.layout_inference`): a conversion whose elements stay in their threads costs register moves, any
other goes through shared memory.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx

from ._expr import LayoutError, compile_numpy, domain_grid, row_major_offset, substitute
from .fragment import Fragment
from .project import project

__all__ = ["in_same_threads", "pulled_back", "reads_own_elements"]


def _threads(frag, grids):
    shape = grids[0].shape if grids else ()
    return [np.broadcast_to(np.asarray(frag.map_numpy(*grids, rep=r)[0]), shape) for r in range(frag.replicate)]


def in_same_threads(dst: Fragment, src: Fragment) -> bool:
    """Whether every thread that holds an element under `dst` (each replica) holds it under `src` too: converting
    `src` to `dst` is then a register move in each thread."""
    if tuple(dst.input_shape) != tuple(src.input_shape):
        return False
    grids = domain_grid(dst.input_shape)
    have = _threads(src, grids)
    return all(np.logical_or.reduce([t == h for h in have]).all() for t in _threads(dst, grids))


def reads_own_elements(loop: Fragment, frag: Fragment, indices, loop_vars, extents, inner=()) -> bool:
    """Whether each iteration of a loop run by `loop` finds ``tile[indices]`` (`frag`'s tile) in its own thread.

    `inner`: ``(var, min, extent)`` of serial loops inside the body that the indices may also use (each iteration
    runs them whole, in its thread)."""
    inner = list(inner)
    grids = domain_grid(list(extents) + [int(e) for _, _, e in inner])
    for k, (_, lo, _) in enumerate(inner):
        grids[len(extents) + k] = grids[len(extents) + k] + int(lo)
    at = compile_numpy([tvm.sym.Analyzer().simplify(e) for e in indices],
                       list(loop_vars) + [v for v, _, _ in inner])(*grids)
    at = [np.broadcast_to(np.asarray(a), grids[0].shape) for a in at]
    if any(a.min() < 0 or a.max() >= s for a, s in zip(at, frag.input_shape)):
        return False
    mine = _threads(loop, grids[:len(extents)])
    ok = np.zeros(grids[0].shape, dtype=bool)
    for t in _threads(frag, at):
        ok |= np.logical_or.reduce([t == m for m in mine])
    return bool(ok.all())


def pulled_back(loop: Fragment, indices, loop_vars, extents, shape, inner=()) -> Fragment | None:
    """The fragment of a tile of `shape` that a loop run by `loop` reads as ``tile[indices]`` so that every iteration
    finds its element in its own thread, or None.

    Each index must be a loop variable, or one divided by a constant (``j // 2``: two packed values per byte), each
    loop variable used at most once; or the variable of a serial loop inside the body (`inner`: ``(var, min,
    extent)``) that runs over the whole dimension (``a[k, i]``: every iteration reads the whole row k, in its own
    thread). Element x lives where the loop runs the iterations reading x: the loop's layout projected onto the
    loop variables the indices use (replicated over the threads of the others, `project`), pulled back through the
    index map, with the inner dimensions in registers; the registers are renumbered densely when that leaves gaps."""
    inner = {v: (int(lo), int(ext)) for v, lo, ext in inner}
    if len(shape) != len(indices):
        return None
    index_of, inner_dims = {}, {}
    for d, e in enumerate(indices):
        var, div = _var_over(e)
        if var is None:
            return None
        k = [i for i, v in enumerate(loop_vars) if v.same_as(var)]
        if k:
            if any(kk == k[0] for kk, _ in index_of.values()) or -(-int(extents[k[0]]) // div) != int(shape[d]):
                return None
            index_of[d] = (k[0], div)
        elif var in inner and div == 1 and inner[var] == (0, int(shape[d])):
            inner_dims[d] = var
        else:
            return None
    used = sorted(k for k, _ in index_of.values())
    if not used:
        return None  # read only through inner loops: every thread reads the whole tile
    source = loop
    if len(used) < len(loop_vars):
        try:
            source = project(loop, [k for k in range(len(loop_vars)) if k not in used])[0]
        except LayoutError:
            return None
    x = Fragment.placeholders(len(shape))
    first = {source.vars[used.index(k)]: x[d] * div for d, (k, div) in index_of.items()}
    thread = substitute(source.forward_thread, first)
    local = row_major_offset([substitute(e, first) for e in source.forward_index], source.local_shape)
    for d in sorted(inner_dims):  # each iteration's thread holds the inner dimensions whole
        local = local * int(shape[d]) + x[d]
    try:
        frag = Fragment(shape, thread, [local], replicate=source.replicate)
        frag = frag.renumbered()
    except LayoutError:
        return None
    inner_list = [(v, lo, ext) for v, (lo, ext) in inner.items()]
    return frag if reads_own_elements(loop, frag, indices, loop_vars, extents, inner_list) else None


def _var_over(e):
    """(v, c) when `e` is the loop variable v or ``v // c`` for a constant c, else (None, None)."""
    if isinstance(e, tvm.ir.Var):
        return e, 1
    if isinstance(e, (tirx.FloorDiv, tirx.Div)) and isinstance(e.a, tvm.ir.Var) and isinstance(e.b, tirx.IntImm) \
            and e.b.value > 0:
        return e.a, int(e.b.value)
    return None, None
