"""Frontend canonicalization: turn frontend markers into plain TIR right after parsing (`T.prim_func` runs it,
and the engine once more for programs built some other way).

Consumes: a parsed PrimFunc in which each multi-dim ``T.Parallel`` is a ``tilex.parallel_marker(n)`` statement
followed by an n-deep serial grid, and each ``T.Persistent`` a ``tilex.persistent_marker(n, wave_size, index,
group_size)`` statement followed by the n-deep grid over its tile domain.  Produces: the same function with the
parallel grids' loops as ForKind.PARALLEL, each persistent grid replaced by its persistent loop (a serial loop over
the waves binding the tile coordinates of ``w * wave_size + index``, the body guarded to tiles in the domain), the
markers removed (a persistent loop is annotated ``tilex.persistent_tiles``: transform.grid_from_persistent), a
``T.thread_binding`` loop over a thread index the enclosing ``T.Kernel`` already launched
with the same range (``kr = T.thread_binding(0, 32, thread="threadIdx.x")`` in a 32-wide block, as TileLang's
programs name the thread index) replaced by its body on the launched index, and tile extents written through
scalars (``H0:H1`` with ``H1 = H0 + 64``) folded to their constants (`scalar_extents.py`).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.names import PARALLEL_MARKER, PERSISTENT_MARKER, PERSISTENT_TILES
from tilex.ir.visit import is_op_call, map_nodes, mutate, substitute
from tilex.language.scalar_extents import fold_scalar_extents


def _marker(stmt):
    """(rewrite of the loop nest that follows, its depth) of a marker statement, or None."""
    if isinstance(stmt, tirx.Evaluate):
        if is_op_call(stmt.value, PARALLEL_MARKER):
            return _make_parallel, int(stmt.value.args[0].value)
        if is_op_call(stmt.value, PERSISTENT_MARKER):
            args = stmt.value.args
            return (lambda loop, depth: _make_persistent(loop, depth, *args[1:])), int(args[0].value)
    return None


def _make_parallel(loop, depth):
    if depth == 0:
        return loop
    if not isinstance(loop, tirx.For):
        raise ValueError("internal: T.Parallel marker is not followed by its loop nest")
    body = _make_parallel(loop.body, depth - 1)
    return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.PARALLEL, body, None, loop.annotations,
                    span=loop.span)


def _product(values):
    out = values[0]
    for v in values[1:]:
        out = out * v
    return out


def _make_persistent(loop, depth, wave_size, index, group_size):
    """The grid `loop` (`depth` loops over the tile domain) as T.Persistent's loop over waves."""
    loops, stmt = [], loop
    for _ in range(depth):
        if not isinstance(stmt, tirx.For):
            raise ValueError("internal: T.Persistent marker is not followed by its loop nest")
        loops.append(stmt)
        stmt = stmt.body
    body, domain = stmt, [lp.extent for lp in loops]
    dtype = loops[0].loop_var.dtype
    cast = (lambda e: e if e.dtype == dtype else tirx.Cast(dtype, e))
    wave_size, index, group_size = cast(wave_size), cast(index), cast(group_size)
    domain = [cast(d) for d in domain]
    one = tirx.const(1, dtype)
    last = domain[-1]
    group = tirx.max(one, tirx.min(group_size, last))
    # the tiles in groups of `group` along the last dimension: (group row, the other dimensions, place in group)
    grouped = [tirx.floordiv(last + group - one, group), *domain[:-1], group]
    padded = _product(grouped)
    waves = tirx.floordiv(padded + wave_size - one, wave_size)
    w = tirx.Var("w", dtype)
    rem = w * wave_size + index
    coords = [None] * len(grouped)
    for i in range(len(grouped) - 1, 0, -1):
        coords[i] = tirx.floormod(rem, grouped[i])
        rem = tirx.floordiv(rem, grouped[i])
    coords[0] = rem
    values = coords[1:-1] + [coords[0] * group + coords[-1]]
    binds = [tirx.Bind(lp.loop_var, value) for lp, value in zip(loops, values)]
    guarded = tirx.IfThenElse(loops[-1].loop_var < last, body, None)
    annotations = dict(loop.annotations)
    annotations[PERSISTENT_TILES] = [wave_size, index, *domain]  # transform.grid_from_persistent reads it
    return tirx.For(w, tirx.const(0, dtype), waves, tirx.ForKind.SERIAL, tirx.SeqStmt([*binds, guarded]), None,
                    annotations, span=loop.span)


def _on_seq(seq, mutator):
    items = [mutator.mutate(s) for s in seq.seq]
    out, pending = [], None
    for s in items:
        marker = _marker(s)
        if marker:
            pending = marker
            continue
        if pending:
            rewrite, depth = pending
            s = rewrite(s, depth)
            pending = None
        out.append(s)
    return out[0] if len(out) == 1 else tirx.SeqStmt(out)


def _launched_bindings(body):
    """`body` with every thread-binding loop over an index its launch scope already binds with the same range
    replaced by the loop's body on the launched variable."""

    def on_launch(attr):
        if attr.attr_key != "thread_extent":
            return attr
        iv, extent = attr.node, attr.value

        def on_for(loop):
            tb = loop.thread_binding
            if loop.kind != tirx.ForKind.THREAD_BINDING or tb is None or tb.thread_tag != iv.thread_tag:
                return loop
            same = tvm.sym.Analyzer().can_prove_equal
            if not (same(loop.min, 0) and same(loop.extent, extent)):
                return loop
            return substitute(loop.body, {loop.loop_var: iv.var})

        body = map_nodes(attr.body, (tirx.For, on_for), order="post")
        return attr if body.same_as(attr.body) else tirx.AttrStmt(attr.node, attr.attr_key, attr.value, body,
                                                                   span=attr.span)

    return map_nodes(body, (tirx.AttrStmt, on_launch), order="post")


def canonicalize(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body = mutate(func.body, (tirx.SeqStmt, _on_seq))
    body = _launched_bindings(body)
    if not body.same_as(func.body):
        func = func.with_body(body)
    return fold_scalar_extents(func)
