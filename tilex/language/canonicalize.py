"""Frontend canonicalization: turn frontend markers into plain TIR right after parsing (`T.prim_func` runs it,
and the engine once more for programs built some other way).

Consumes: a parsed PrimFunc in which each multi-dim ``T.Parallel`` is a ``tilex.parallel_marker(n)`` statement
followed by an n-deep serial grid.  Produces: the same function with those n loops as ForKind.PARALLEL and the
markers removed, and tile extents written through scalars (``H0:H1`` with ``H1 = H0 + 64``) folded to their
constants (`scalar_extents.py`).
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir.names import PARALLEL_MARKER
from tilex.ir.visit import is_op_call, mutate
from tilex.language.scalar_extents import fold_scalar_extents


def _marker_depth(stmt):
    if isinstance(stmt, tirx.Evaluate) and is_op_call(stmt.value, PARALLEL_MARKER):
        return int(stmt.value.args[0].value)
    return 0


def _make_parallel(loop, depth):
    if depth == 0:
        return loop
    if not isinstance(loop, tirx.For):
        raise ValueError("internal: T.Parallel marker is not followed by its loop nest")
    body = _make_parallel(loop.body, depth - 1)
    return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.PARALLEL, body, None, loop.annotations,
                    span=loop.span)


def _on_seq(seq, mutator):
    items = [mutator.mutate(s) for s in seq.seq]
    out, pending = [], 0
    for s in items:
        d = _marker_depth(s)
        if d:
            pending = d
            continue
        if pending:
            s = _make_parallel(s, pending)
            pending = 0
        out.append(s)
    return out[0] if len(out) == 1 else tirx.SeqStmt(out)


def canonicalize(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body = mutate(func.body, (tirx.SeqStmt, _on_seq))
    if not body.same_as(func.body):
        func = func.with_body(body)
    return fold_scalar_extents(func)

