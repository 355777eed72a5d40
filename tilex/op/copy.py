"""`T.copy`: tile copies between global memory, shared memory and register fragments.

Lowered as a thread-partitioned element loop (vectorized up to 16 bytes when every access allows it). Inside a
software-pipelined loop a global->shared copy becomes ``cp.async`` (16/8/4-byte chunks, zero-filling out-of-bounds
elements). Tiles that hang over the edge of a global tensor are guarded element by element (reads outside give 0).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex._tir import map_nodes

from tilex.op.base import (InferLevel, LayoutConflictError, TileOp, TileOpError, is_fragment, is_global,
                           is_local, is_shared)
from tilex.op.partition import (access_vectorizable, coalesced_plan, emit_by_fragment, emit_by_plan,
                                fragment_vector_width, pick_vector, static_shape)
from tilex.op.region import READ, WRITE, Region, to_region, tile_shape
from tilex.op.registry import register_tile_op


def _int(e):
    return int(e.value) if isinstance(e, tirx.IntImm) else (e if isinstance(e, int) else None)


def copy_call(src, dst, is_async=0):
    """Build the TIR call for ``T.copy(src, dst)`` (start-index operands take the other side's tile shape)."""
    src_shape = tile_shape(src)
    dst_shape = tile_shape(dst)
    if src_shape is None and dst_shape is None:
        raise TileOpError("T.copy: at least one side must be a buffer or a slice (both are single elements)")
    src_r = to_region(src, dst_shape)
    dst_r = to_region(dst, src_shape)
    return tirx.call_intrin("handle", "tilex.copy", src_r.to_call(READ), dst_r.to_call(WRITE), is_async)


@register_tile_op("tilex.copy")
class CopyOp(TileOp):
    def __init__(self, src: Region, dst: Region, is_async=False):
        self.src, self.dst, self.is_async = src, dst, bool(is_async)
        s_shape = static_shape(src.shape, "T.copy source")
        d_shape = static_shape(dst.shape, "T.copy destination")
        if s_shape != d_shape:
            raise TileOpError(f"T.copy: tile shapes differ: source {src} has {s_shape}, destination {dst} has {d_shape}")
        self.extents = d_shape or [1]
        for r in (src, dst):
            if is_fragment(r.buffer) and list(r.shape) != [int(s) for s in r.buffer.shape if int(s) != 1] \
                    and r.shape != list(r.buffer.shape):
                raise TileOpError(f"T.copy: a fragment must be copied whole, got {r}")

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]),
                   int(call.args[2].value) if len(call.args) > 2 else 0)

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def describe(self):
        return f"T.copy({self.src} -> {self.dst})"

    # ---- TMA store (sm90): shared tile -> global through the Tensor Memory Accelerator -------------------------
    def tma_store_ok(self, target) -> bool:
        """Whether this copy can be a TMA store: sm90, a whole 2-d shared tile with a wgmma-style swizzle written
        to a 2-d global tensor (the same conditions as a TMA load, roles exchanged)."""
        from tilex import config
        from tilex.op.base import target_arch
        from tilex.op.tma_load import tma_eligible

        if target is None or config.get("disable_tma", False) or config.get("disable_tma_store", False):
            return False
        if target_arch(target)[0] < 90 or not (is_shared(self.src.buffer) and is_global(self.dst.buffer)):
            return False
        if len(self.src.buffer.shape) != 2 or self.src.shape != [int(e) for e in self.src.buffer.shape]:
            return False
        return tma_eligible(self.dst, self.src)

    def _tma_layout(self):
        from tilex.layout.wgmma import make_wgmma_operand_layout
        from tilex.op.tma_load import tma_box

        rows, cols, swz, _ = tma_box(self.src)
        return make_wgmma_operand_layout(rows, cols, tvm.DataType(str(self.src.buffer.dtype)).bits, swz)

    def _lower_tma_store(self, ctx):
        """Every thread fences its shared-memory writes for the async proxy and syncs; one thread stores the tile
        box by box and commits the bulk group. It does not wait here: `BulkStoreWaits` makes that thread wait
        for the boxes to be read before the next barrier (every later write of the tile comes after one, which
        ThreadSync places because the store counts as a read) and before the kernel ends."""
        from tilex.op.tma_load import tma_box

        rows, cols, swz, elems = tma_box(self.src)
        buf = self.src.buffer
        tmap = ctx.tensor_map(self.dst.buffer, (elems, rows), swz)
        row0, col0 = self.dst.mins[-2], self.dst.mins[-1]
        stores = []
        for p in range(cols // elems):
            phys, off = ctx.physical_index(buf, [0, p * elems])
            stores.append(tirx.Evaluate(tirx.call_extern(
                "void", "tilex::tma_store_2d", tirx.address_of(tmap),
                phys.access_ptr("r", offset=off[0], extent=rows * elems), col0 + p * elems, row0)))
        stores.append(tirx.Evaluate(tirx.call_extern("void", "tilex::bulk_commit")))
        # the scope names the ThreadSync pass that sees this barrier (it ignores barriers of the other scope)
        sync = tirx.Evaluate(tirx.call_intrin("void", "tirx.tvm_storage_sync", buf.scope()))
        return tirx.SeqStmt([tirx.Evaluate(tirx.call_extern("void", "tilex::fence_proxy_async")), sync,
                             tirx.IfThenElse(ctx.thread_var == 0, tirx.SeqStmt(stores), None)])

    # ---- layout inference -------------------------------------------------------------------------------------
    def infer_layout(self, ctx, level):
        sb, db = self.src.buffer, self.dst.buffer
        if level == InferLevel.STRICT and ctx.layout_map.get(sb) is None and self.tma_store_ok(ctx.target):
            return {sb: self._tma_layout()}
        s_frag, d_frag = is_fragment(sb), is_fragment(db)
        if not (s_frag or d_frag) or level == InferLevel.STRICT:
            return {}
        s_lay, d_lay = ctx.layout_map.get(sb), ctx.layout_map.get(db)
        if s_frag and d_frag:
            if s_lay is not None and d_lay is None:
                return {db: s_lay}
            if d_lay is not None and s_lay is None:
                return {sb: d_lay}
            if s_lay is not None and d_lay is not None and not s_lay.is_equal(d_lay):
                raise LayoutConflictError(
                    f"{self.describe()}: fragments '{sb.name}' and '{db.name}' have different layouts "
                    f"({s_lay} vs {d_lay}); copy through shared memory instead")
            if s_lay is None and d_lay is None and level == InferLevel.FREE:
                plan = self._plan(ctx, None)
                return {sb: plan, db: plan}
            return {}
        frag_buf = db if d_frag else sb
        if ctx.layout_map.get(frag_buf) is None and level == InferLevel.FREE:
            other = self.src if d_frag else self.dst
            return {frag_buf: self._plan(ctx, other)}
        return {}

    def _plan(self, ctx, other: Region | None):
        """A coalesced layout over the fragment's full buffer shape, vectorized as far as `other` allows."""
        frag = self.dst if is_fragment(self.dst.buffer) else self.src
        shape = [int(s) for s in frag.buffer.shape]
        bits = tvm.DataType(str((other.buffer if other else self.dst.buffer).dtype)).bits
        accesses = []
        if other is not None and (is_global(other.buffer) or is_shared(other.buffer)):
            accesses.append((other.buffer, lambda ix: other.index(_tile_index(shape, ix))))
        vec = pick_vector(shape, ctx.threads, bits, accesses, ctx.analyzer, {})
        plan = coalesced_plan(shape, ctx.threads, vec)
        while plan is None and vec > 1:
            vec //= 2
            plan = coalesced_plan(shape, ctx.threads, vec)
        if plan is None:
            raise TileOpError(f"{self.describe()}: cannot deal a {self.extents} tile evenly to {ctx.threads} threads")
        return plan

    # ---- lowering ---------------------------------------------------------------------------------------------
    def _guard(self, ctx, ix):
        """Bounds check for global sides (None when provably in bounds)."""
        conds = []
        for r in (self.src, self.dst):
            if not is_global(r.buffer):
                continue
            for e, s in zip(r.index(ix), r.buffer.shape):
                c = e < s
                if not ctx.analyzer.can_prove(c):
                    conds.append(c)
        if not conds:
            return None
        out = conds[0]
        for c in conds[1:]:
            out = tirx.And(out, c)
        return out

    def _value(self, ctx, ix):
        v = ctx.load(self.src.buffer, self.src.index(ix))
        if str(self.src.buffer.dtype) != str(self.dst.buffer.dtype):
            v = tirx.Cast(self.dst.buffer.dtype, v)
        return v

    def _phys_index_fn(self, ctx, region):
        def fn(ix):
            return ctx.physical_index(region.buffer, region.index(ix))[1] if region.buffer in ctx.remap \
                else region.index(ix)
        return fn

    def lower(self, ctx):
        sb, db = self.src.buffer, self.dst.buffer
        if is_local(sb) or is_local(db):
            return self._lower_local(ctx)
        if self.tma_store_ok(ctx.target) and ctx.layout_map.get(sb) is not None \
                and ctx.layout_map[sb].is_equal(self._tma_layout()):
            return self._lower_tma_store(ctx)
        bind = {ctx.thread_var: tvm.ir.Range(0, ctx.threads)}
        frag_side = self.dst if is_fragment(db) else (self.src if is_fragment(sb) else None)
        if frag_side is not None:
            frag = ctx.layout_map.get(frag_side.buffer)
            if frag is None:
                raise TileOpError(f"{self.describe()}: fragment '{frag_side.buffer.name}' has no layout")
            fshape = [int(s) for s in frag_side.buffer.shape]
            vec = fragment_vector_width(frag, 8, ctx.analyzer)
            while vec > 1 and not all(
                    access_vectorizable(r.buffer, lambda ix, r=r: self._phys_index_fn(ctx, r)(_tile_index(fshape, ix)),
                                        fshape, vec, ctx.analyzer, bind)
                    for r in (self.src, self.dst) if not is_fragment(r.buffer)):
                vec //= 2

            def make_frag(fix, fgix, l_flat):
                # emit_by_fragment yields indices of the fragment buffer; the copy speaks in tile indices
                ix, gix = _tile_index(fshape, fix), _tile_index(fshape, fgix)
                value = self._value(ctx, ix)
                if is_fragment(sb) and frag.is_equal(ctx.layout_map.get(sb)):
                    value = tirx.BufferLoad(ctx.remap[sb], [l_flat])
                    if str(sb.dtype) != str(db.dtype):
                        value = tirx.Cast(db.dtype, value)
                if is_fragment(db):
                    store = tirx.BufferStore(ctx.remap[db], value, [l_flat])
                else:
                    store = ctx.store(db, value, self.dst.index(ix))
                return self._guarded(ctx, gix, store, ix)

            return emit_by_fragment(ctx, frag, vec, make_frag, name="cp", bounds=fshape)
        bits = max(tvm.DataType(str(sb.dtype)).bits, tvm.DataType(str(db.dtype)).bits)
        accesses = [(r.buffer, self._phys_index_fn(ctx, r)) for r in (self.src, self.dst)]
        vec = pick_vector(self.extents, ctx.threads, bits, accesses, ctx.analyzer, bind)
        use_async = (self.is_async and is_global(sb) and is_shared(db) and str(sb.dtype) == str(db.dtype)
                     and vec * tvm.DataType(str(sb.dtype)).bits // 8 in (4, 8, 16))

        def make(ix, gix):
            if use_async:
                return self._cp_async(ctx, ix, gix, vec)
            return self._guarded(ctx, gix, ctx.store(db, self._value(ctx, ix), self.dst.index(ix)), ix)

        stmt = emit_by_plan(ctx, self.extents, vec, make, name="cp")
        if use_async:
            # the vector loop of a cp.async is a single call: drop the (vectorized) lane loop
            stmt = _strip_vector_loops(stmt)
        return stmt

    def _guarded(self, ctx, gix, store, ix):
        cond = self._guard(ctx, gix)
        if cond is None:
            return store
        if is_global(self.dst.buffer):
            return tirx.IfThenElse(cond, store, None)
        zero = tirx.BufferStore(store.buffer, tirx.const(0, self.dst.buffer.dtype), list(store.indices))
        return tirx.IfThenElse(cond, store, zero)

    def _cp_async(self, ctx, ix, gix, vec):
        nbytes = vec * tvm.DataType(str(self.src.buffer.dtype)).bits // 8
        dphys, didx = ctx.physical_index(self.dst.buffer, self.dst.index(gix))
        dst_ptr = tirx.address_of(tirx.BufferLoad(dphys, didx))
        src_ptr = tirx.address_of(tirx.BufferLoad(self.src.buffer, self.src.index(gix)))
        cond = self._guard(ctx, gix)
        if cond is None:
            return tirx.Evaluate(tirx.call_extern("void", f"tilex::cp_async<{nbytes}>", dst_ptr, src_ptr))
        return tirx.Evaluate(tirx.call_extern("void", f"tilex::cp_async_zfill<{nbytes}>", dst_ptr, src_ptr, cond))

    def _lower_local(self, ctx):
        """Copies touching a per-thread `local` buffer: every thread copies the whole tile itself."""
        ivars = [tirx.Var(f"cl{d}", "int32") for d in range(len(self.extents))]
        body = self._guarded(ctx, ivars, ctx.store(self.dst.buffer, self._value(ctx, ivars),
                                                   self.dst.index(ivars)), ivars)
        for v, e in reversed(list(zip(ivars, self.extents))):
            body = tirx.For(v, 0, e, tirx.ForKind.SERIAL, body)
        return body


def _tile_index(buffer_shape, ix):
    """Tile indices (unit dims dropped) of a whole-buffer index."""
    out = [i for i, e in zip(ix, buffer_shape) if e != 1]
    return out or [ix[-1]]


def _strip_vector_loops(stmt):

    from tilex.op.partition import substitute

    def on_for(loop):
        if loop.kind == tirx.ForKind.VECTORIZED:
            return substitute(loop.body, {loop.loop_var: tirx.const(0, "int32")})
        return loop

    return map_nodes(stmt, (tirx.For, on_for), order="post")
