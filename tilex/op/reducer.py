"""Reducers (``T.alloc_reducer``): a fragment each thread accumulates its own partial values into, combined across
the threads once, by ``T.finalize_reducer``.

A reducer is a fragment marked by a ``tilex.reducer(data, kind)`` statement after its allocation. Written in a
``T.Parallel`` loop at an index over some of the loop's variables (``o[i] += a[i, j] * x[j]``), it gets the loop's
layout projected onto those variables, replicated over the threads that take the other ones; each replica then
holds the sum (max, ...) of what its thread added, where a plain fragment would be refused (several threads writing
one element). The loop runs such writes one element at a time, so vector lanes never fold into one register.

``T.finalize_reducer(r)`` combines the replicas of every element through a shared-memory workspace (each thread
stores its partial values; each then combines the replicas of the elements it holds), so afterwards every replica
holds the total, like a fragment that T.reduce_* produced; ``T.finalize_reducer(r, dst)`` writes the total (combined
with ``T.reducer_init``'s starting value, once) into the fragment `dst` instead. Reducers must start at their
operation's identity (``T.clear`` for sum, ``T.fill(r, -T.infinity(...))`` for max, or ``T.reducer_init``): each
replica holds a starting value.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.names import REDUCER_COMBINE, REDUCER_MARKER
from tilex.ir.visit import is_op_call, storage_sync, walk
from tilex.op.base import InferLevel, TileOp, TileOpError, is_fragment
from tilex.op.partition import emit_by_fragment
from tilex.op.reduce import MAX_WORKSPACE, combine
from tilex.op.region import READ_WRITE, Region, to_region
from tilex.op.registry import register_tile_op

KINDS = ("sum", "max", "min", "bitand", "bitor", "bitxor")
_FINALIZE_OP = "tilex.finalize_reducer"


def _first(buffer):
    return tirx.BufferLoad(buffer, [tirx.const(0, "int32")] * len(buffer.shape))


def reducer_marker(buffer, kind):
    """The statement after `buffer`'s allocation that marks it (a fragment) as a reducer combining with `kind`."""
    if kind not in KINDS:
        raise TileOpError(f"T.alloc_reducer: op must be one of {KINDS}, got {kind!r}")
    return tirx.Evaluate(tirx.call_intrin("void", REDUCER_MARKER, _first(buffer), KINDS.index(kind), 0,
                                          tirx.const(0, str(buffer.dtype))))


def reducer_init_marker(buffer, init=None):
    """``T.reducer_init``: every replica of `buffer` set to its operation's identity here (transform.reducers),
    `init` (or nothing) combined once at the finalize."""
    has = init is not None
    value = init if has else tirx.const(0, str(buffer.dtype))
    return tirx.Evaluate(tirx.call_intrin("void", REDUCER_MARKER, _first(buffer), -1, 1 if has else 2, value))


def reducer_combine(element, value):
    """``element`` combined with `value` by the reducer's operation (resolved by transform.reducers)."""
    return tirx.call_intrin(str(element.dtype), REDUCER_COMBINE, element, value)


def reducers_of(body) -> dict:
    """{buffer: kind} of the reducers declared in `body`."""
    found = {}

    def on_eval(node):
        if is_op_call(node.value, REDUCER_MARKER) and int(node.value.args[1].value) >= 0:
            found[node.value.args[0].source] = KINDS[int(node.value.args[1].value)]

    walk(body, (tirx.Evaluate, on_eval))
    return found


def finalize_call(reducer, dst):
    """``T.finalize_reducer``: the operation and starting value are filled in by transform.reducers."""
    r, d = to_region(reducer), to_region(dst)
    return tirx.call_intrin("handle", _FINALIZE_OP, r.to_call(READ_WRITE), d.to_call(READ_WRITE), -1, 0,
                            tirx.const(0, str(reducer.dtype)))


def resolved_finalize(call, kind, init):
    """`call` (a T.finalize_reducer) with the reducer's operation and starting value."""
    has = init is not None
    value = init if has else call.args[4]
    return tirx.call_intrin("handle", _FINALIZE_OP, call.args[0], call.args[1], KINDS.index(kind), int(has), value)


def is_finalize(call) -> bool:
    return is_op_call(call, _FINALIZE_OP)


@register_tile_op(_FINALIZE_OP)
class FinalizeReducerOp(TileOp):
    """Combine the replicas of reducer `src` into `dst` (the reducer itself when finalized in place)."""

    def __init__(self, src: Region, dst: Region, kind="sum", init=None):
        self.src, self.dst, self.kind, self.init = src, dst, kind, init
        for what, region in (("reducer", src), ("destination", dst)):
            if not is_fragment(region.buffer) or not region.is_whole():
                raise TileOpError(f"{self.describe()}: the {what} must be a whole fragment, got {region}")
        if [int(e) for e in src.buffer.shape] != [int(e) for e in dst.buffer.shape] or \
                str(src.buffer.dtype) != str(dst.buffer.dtype):
            raise TileOpError(f"{self.describe()}: the destination must have the reducer's shape and dtype")

    @classmethod
    def from_call(cls, call):
        init = call.args[4] if int(call.args[3].value) else None
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]), KINDS[int(call.args[2].value)],
                   init)

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def reads_writes(self, buffer):
        if buffer.same_as(self.dst.buffer):
            return (buffer.same_as(self.src.buffer), True)
        return (True, False)

    def describe(self):
        return f"T.finalize_reducer({self.src.buffer.name} -> {self.dst.buffer.name})"

    def infer_layout(self, ctx, level):
        src, dst = self.src.buffer, self.dst.buffer
        have_s, have_d = ctx.layout_map.get(src), ctx.layout_map.get(dst)
        if have_s is not None and have_d is None:
            return {dst: have_s}
        if have_d is not None and have_s is None and level == InferLevel.FREE:
            return {src: have_d}
        return {}

    def lower(self, ctx):
        src, dst = self.src.buffer, self.dst.buffer
        P = ctx.layout_map[src]
        if not ctx.layout_map[dst].is_equal(P):
            raise TileOpError(f"{self.describe()}: the destination's layout {ctx.layout_map[dst]} is not the "
                              f"reducer's {P}")
        dtype = str(src.dtype)
        n, threads, t = P.local_size, ctx.threads, ctx.thread_var
        src_loc, dst_loc = ctx.remap[src], ctx.remap[dst]
        if n * threads * tvm.DataType(dtype).bits // 8 > MAX_WORKSPACE:
            raise TileOpError(f"{self.describe()}: combining {n} values per thread needs more than "
                              f"{MAX_WORKSPACE // 1024} KB of shared workspace; use a smaller reducer")
        ws = tirx.decl_buffer((n * threads,), dtype, "reducer_ws", scope="shared.dyn")
        s = tirx.Var("rd_s", "int32")
        write = tirx.For(s, 0, n, tirx.ForKind.UNROLLED,
                         tirx.BufferStore(ws, tirx.BufferLoad(src_loc, [s]), [s * threads + t]))
        replicas = int(P.replicate)

        def make(ix, _guard, l_flat):
            acc = None
            for r in range(replicas):
                part = tirx.BufferLoad(ws, [l_flat * threads + P.map_thread(list(ix), rep=r, analyzer=ctx.analyzer)])
                acc = part if acc is None else combine(self.kind, acc, part)
            if self.init is not None:
                acc = combine(self.kind, acc, tirx.Cast(dtype, self.init) if str(self.init.dtype) != dtype
                               else self.init)
            return tirx.BufferStore(dst_loc, acc, [l_flat])

        gather = emit_by_fragment(ctx, P, 1, make, name="rd")
        sync = storage_sync("shared")
        # barriers: before writing (earlier readers of a reused workspace), between write and read, after reading
        return tirx.SeqStmt([tirx.AllocBuffer(ws), sync, write, sync, gather, sync])
