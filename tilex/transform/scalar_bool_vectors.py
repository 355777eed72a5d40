"""ScalarBoolVectors: vectorized loops that read or write ``bool`` values run lane by lane (unrolled).

Consumes: per-thread TIR after LowerTileOps, with ``T.vectorized`` loops from the operators' partition plans.
Produces: the same program where each vectorized loop whose body loads or stores a ``bool`` buffer is an unrolled
loop instead.

Why: TVM's CUDA code generator writes a vector of 4 bools as ``ushort4`` (8 bytes, one 16-bit lane per bool), so
a vectorized store of 4 bools writes 8 bytes with every other byte zero: the tile's values land in the wrong places
and the bytes of the neighbouring thread's vector are overwritten (a mask tile of a sparse attention kernel came
out wrong this way). One byte per lane, unrolled, is what the tile means.
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir.visit import BufferLoadNode, map_nodes, walk


def _touches_bool(stmt) -> bool:
    found = []

    def on_buffer(buf):
        if str(buf.dtype) == "bool":
            found.append(buf)

    walk(stmt, [(BufferLoadNode, lambda n: on_buffer(n.source)), (tirx.BufferStore, lambda n: on_buffer(n.buffer))])
    return bool(found)


def scalar_bool_vectors(func):
    """`func` with its bool-touching vectorized loops unrolled (see the module docstring)."""

    def on_for(loop):
        if loop.kind != tirx.ForKind.VECTORIZED or not _touches_bool(loop.body):
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.UNROLLED, loop.body, loop.thread_binding,
                        loop.annotations, span=loop.span)

    body = map_nodes(func.body, (tirx.For, on_for))
    return func if body.same_as(func.body) else func.with_body(body)
