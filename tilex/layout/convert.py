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

from ._expr import LayoutError, compile_numpy, domain_grid, substitute
from .fragment import Fragment

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


def reads_own_elements(loop: Fragment, frag: Fragment, indices, loop_vars, extents) -> bool:
    """Whether each iteration of a loop run by `loop` finds ``tile[indices]`` (`frag`'s tile) in its own thread."""
    grids = domain_grid(extents)
    at = compile_numpy([tvm.sym.Analyzer().simplify(e) for e in indices], list(loop_vars))(*grids)
    at = [np.broadcast_to(np.asarray(a), grids[0].shape) for a in at]
    if any(a.min() < 0 or a.max() >= s for a, s in zip(at, frag.input_shape)):
        return False
    mine = _threads(loop, grids)
    ok = np.zeros(grids[0].shape, dtype=bool)
    for t in _threads(frag, at):
        ok |= np.logical_or.reduce([t == m for m in mine])
    return bool(ok.all())


def pulled_back(loop: Fragment, indices, loop_vars, extents, shape) -> Fragment | None:
    """The fragment of a tile of `shape` that a loop run by `loop` reads as ``tile[indices]`` so that every iteration
    finds its element in its own thread, or None.

    Each index must be one loop variable, or one divided by a constant (``j // 2``: two packed values per byte),
    every loop variable used once. Element x lives where the loop runs its first iteration reading x; the registers
    are renumbered densely when that leaves gaps."""
    index_of = {}
    for d, e in enumerate(indices):
        var, div = _var_over(e)
        if var is None or any(var.same_as(v) for v, _ in index_of.values()):
            return None
        index_of[d] = (var, div)
    if len(index_of) != len(loop_vars) or len(shape) != len(indices):
        return None
    x = Fragment.placeholders(len(shape))
    first = {}
    for d, (var, div) in index_of.items():
        k = [i for i, v in enumerate(loop_vars) if v.same_as(var)]
        if not k or -(-int(extents[k[0]]) // div) != int(shape[d]):
            return None
        first[loop.vars[k[0]]] = x[d] * div
    thread = substitute(loop.forward_thread, first)
    local = [substitute(e, first) for e in loop.forward_index]
    try:
        frag = Fragment(shape, thread, local, replicate=loop.replicate)
        frag = frag.renumbered()
    except LayoutError:
        return None
    return frag if reads_own_elements(loop, frag, indices, loop_vars, extents) else None


def _var_over(e):
    """(v, c) when `e` is the loop variable v or ``v // c`` for a constant c, else (None, None)."""
    if isinstance(e, tvm.ir.Var):
        return e, 1
    if isinstance(e, (tirx.FloorDiv, tirx.Div)) and isinstance(e.a, tvm.ir.Var) and isinstance(e.b, tirx.IntImm) \
            and e.b.value > 0:
        return e.a, int(e.b.value)
    return None, None
