"""`T.fill` / `T.clear`: set every element of a tile (fragment, shared, local or global) to one value."""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.visit import dtype_of
from tilex.op.base import InferLevel, TileOp, TileOpError, is_fragment, is_local
from tilex.op.partition import coalesced_plan, emit_by_fragment, emit_by_plan, pick_vector, static_shape
from tilex.op.region import WRITE, Region, to_region
from tilex.op.registry import register_tile_op


def fill_call(buffer, value):
    r = to_region(buffer)
    if isinstance(value, (int, float)):
        value = tirx.const(value, r.buffer.dtype)
    elif dtype_of(value) != str(r.buffer.dtype):
        value = tirx.Cast(r.buffer.dtype, value)
    return tirx.call_intrin("handle", "tilex.fill", r.to_call(WRITE), value)


@register_tile_op("tilex.fill")
class FillOp(TileOp):
    free_rank = 1  # a fill does not care about the layout: let the buffer's real producers/consumers choose
    def __init__(self, dst: Region, value):
        self.dst, self.value = dst, value
        self.extents = static_shape(dst.shape, "T.fill") or [1]

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), call.args[1])

    def buffers(self):
        return [self.dst.buffer]

    def describe(self):
        return f"T.fill({self.dst}, {self.value})"

    def infer_layout(self, ctx, level):
        buf = self.dst.buffer
        if level == InferLevel.FREE and is_fragment(buf) and ctx.layout_map.get(buf) is None:
            shape = [int(s) for s in buf.shape]
            plan = coalesced_plan(shape, ctx.threads, 4)
            if plan is None:
                plan = coalesced_plan(shape, ctx.threads, 1)
            if plan is None:
                raise TileOpError(f"{self.describe()}: cannot deal {self.extents} to {ctx.threads} threads")
            return {buf: plan}
        return {}

    def lower(self, ctx):
        buf = self.dst.buffer
        if is_local(buf):
            ivars = [tirx.Var(f"f{d}", "int32") for d in range(len(self.extents))]
            body = ctx.store(buf, self.value, self.dst.index(ivars))
            for v, e in reversed(list(zip(ivars, self.extents))):
                body = tirx.For(v, 0, e, tirx.ForKind.UNROLLED, body)
            return body
        if is_fragment(buf):
            frag = ctx.layout_map.get(buf)
            if frag is None:
                raise TileOpError(f"{self.describe()}: fragment '{buf.name}' has no layout")
            if [e for e in self.extents if e != 1] != [int(s) for s in buf.shape if int(s) != 1]:
                raise TileOpError(f"{self.describe()}: a fragment must be filled whole")

            def make_frag(ix, _g, l_flat):
                return tirx.BufferStore(ctx.remap[buf], self.value, [l_flat])

            return emit_by_fragment(ctx, frag, 1, make_frag, name="fill", bounds=[int(x) for x in buf.shape])
        bind = {ctx.thread_var: tvm.ir.Range(0, ctx.threads)}

        def phys(ix):
            return ctx.physical_index(buf, self.dst.index(ix))[1]

        vec = pick_vector(self.extents, ctx.threads, tvm.DataType(str(buf.dtype)).bits, [(buf, phys)], ctx.analyzer, bind)

        def make(ix, gix):
            store = ctx.store(buf, self.value, self.dst.index(ix))
            conds = [e < s for e, s in zip(self.dst.index(gix), buf.shape)
                     if not ctx.analyzer.can_prove(e < s)] if buf.scope() in ("global", "") else []
            for c in conds:
                store = tirx.IfThenElse(c, store, None)
            return store

        return emit_by_plan(ctx, self.extents, vec, make, name="fill")
