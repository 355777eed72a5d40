"""ResolveReducers: the operations of T.alloc_reducer fragments filled into the statements that use them.

Consumes: the parsed program, with a ``tilex.reducer`` marker after each reducer's allocation (its operation),
``tilex.reducer`` init markers (T.reducer_init), ``tilex.reducer_combine`` values (T.reducer_update) and
``tilex.finalize_reducer`` calls whose operation is not known yet (TVMScript gives an assigned buffer a new variable,
so the frontend cannot tell which reducer a later call names; the program can).
Produces: the same program with each init marker an identity fill (``T.fill(r, identity)``), each combine value the
operation itself (``r[i] + v``, ``max(r[i], v)``, ...) and each finalize carrying the operation and the starting value
T.reducer_init gave. A reducer call on a fragment that is no reducer is a TileOpError at the user's line.
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir.names import REDUCER_COMBINE, REDUCER_MARKER
from tilex.ir.source import add_location, span_of
from tilex.ir.visit import is_op_call, map_nodes
from tilex.op.base import TileOpError
from tilex.op.fill import fill_call
from tilex.op.reduce import combine, identity_value
from tilex.op.reducer import is_finalize, reducers_of, resolved_finalize
from tilex.op.region import Region


def _kind(reducers, buffer, api, node):
    kind = reducers.get(buffer)
    if kind is None:
        raise add_location(TileOpError(f"{api}: '{buffer.name}' is not a reducer (allocate it with "
                                       f"T.alloc_reducer)"), span_of(node))
    return kind


def resolve_reducers(func):
    """`func` with its reducer operations resolved (see the module docstring)."""
    reducers = reducers_of(func.body)
    inits = {}

    def on_store(node):
        if not is_op_call(node.value, REDUCER_COMBINE):
            return node
        element, value = node.value.args
        kind = _kind(reducers, element.source, "T.reducer_update", node.value)
        return tirx.BufferStore(node.buffer, combine(kind, element, value), node.indices)

    def on_eval(node):
        v = node.value
        if is_op_call(v, REDUCER_MARKER) and int(v.args[1].value) < 0:
            buf = v.args[0].source
            kind = _kind(reducers, buf, "T.reducer_init", v)
            if int(v.args[2].value) == 1:
                inits[buf] = v.args[3]
            return tirx.Evaluate(fill_call(buf, identity_value(kind, str(buf.dtype))))
        if is_finalize(v):
            buf = Region.from_call(v.args[0]).buffer
            kind = _kind(reducers, buf, "T.finalize_reducer", v)
            return tirx.Evaluate(resolved_finalize(v, kind, inits.get(buf)))
        return node

    body = map_nodes(func.body, [(tirx.BufferStore, on_store)])
    body = map_nodes(body, (tirx.Evaluate, on_eval), order="pre")
    return func if body.same_as(func.body) else func.with_body(body)
