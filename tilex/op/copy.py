"""`T.copy`: tile copies between global memory, shared memory and register fragments.

Lowered as a thread-partitioned element loop (vectorized up to 16 bytes when every access allows it). Inside a
software-pipelined loop a global->shared copy becomes ``cp.async`` (16/8/4-byte chunks, zero-filling out-of-bounds
elements). Tiles that hang over the edge of a global tensor are guarded element by element (reads outside give 0).

A register fragment copied whole, or read in blocks its layout repeats over, is walked register by register. Any
other part of a fragment (``acc[0:4, :]``, ``lse[k, :]``, a destination slice) is copied by the threads holding its
elements, each visiting the registers that hold some (a replicated source written out by one replica); between two
fragments, inference lays them out so that every thread holds the elements it copies, whatever the corner.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx

from tilex import config
from tilex.ir import intrin
from tilex.ir.hardware import CP_ASYNC, LDMATRIX, MBARRIER_TX, TMA_STORE, WGMMA, supports, unsupported_message
from tilex.ir.visit import map_nodes, storage_sync, substitute
from tilex.layout.convert import in_same_threads
from tilex.layout import (LayoutError, make_swizzled_layout, make_wgmma_operand_layout, swizzle_applicable,
                          wgmma_swizzle_bytes)
from tilex.op.base import (InferLevel, TileOp, TileOpError, is_fragment, is_global,
                           is_local, is_shared)
from tilex.layout.fragment_access import (access_layout, chunks_in_one_replica, offsets_inside,
                                          spread_over_blocks, threads_agree)
from tilex.op.partition import (access_vectorizable, analyzer_scope, block_offset, coalesced_plan,
                                emit_by_fragment, emit_by_fragment_box, emit_by_plan, fragment_vector_width,
                                pick_vector, placed_vector_width, static_shape, unflatten)
from tilex.op.region import READ, WRITE, Region, to_region, tile_shape
from tilex.op.registry import register_tile_op
from tilex.op.tma_load import tma_box, tma_box_dims, tma_tile_eligible


def _int(e):
    return int(e.value) if isinstance(e, tirx.IntImm) else (e if isinstance(e, int) else None)


def copy_call(src, dst, is_async=0, disable_tma=False):
    """Build the TIR call for ``T.copy(src, dst)`` (start-index operands take the other side's tile shape).
    `disable_tma` keeps this copy off TMA (no TMA store, no TMA load in a warp-specialized pipeline); it travels as
    a 4th integer argument, present only when set."""
    src_shape = tile_shape(src)
    dst_shape = tile_shape(dst)
    if src_shape is None and dst_shape is None:
        raise TileOpError("T.copy: at least one side must be a buffer or a slice (both are single elements)")
    src_r = to_region(src, dst_shape)
    dst_r = to_region(dst, src_shape)
    extra = [1] if disable_tma else []
    return tirx.call_intrin("handle", "tilex.copy", src_r.to_call(READ), dst_r.to_call(WRITE), is_async, *extra)


@register_tile_op("tilex.copy")
class CopyOp(TileOp):
    def __init__(self, src: Region, dst: Region, is_async=False, disable_tma=False):
        self.src, self.dst, self.is_async = src, dst, bool(is_async)
        self.disable_tma = bool(disable_tma)
        s_shape = static_shape(src.shape, "T.copy source")
        d_shape = static_shape(dst.shape, "T.copy destination")
        if s_shape != d_shape:
            raise TileOpError(f"T.copy: tile shapes differ: source {src} has {s_shape}, destination {dst} has {d_shape}")
        self.extents = d_shape or [1]
        # the fragment sides that are only part of their fragment (`_lower_box`, `_lower_fragment_parts`)
        self.parts = [r for r in (src, dst) if is_fragment(r.buffer) and _fragment_slice(r) is not None]

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]),
                   int(call.args[2].value) if len(call.args) > 2 else 0,
                   int(call.args[3].value) if len(call.args) > 3 else 0)

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def reads_writes(self, buffer):
        if buffer.same_as(self.dst.buffer):
            return not self.dst.is_whole(), True  # a part written keeps the rest
        return True, False

    def takes_shared(self, buffer):
        return True

    def describe(self):
        return f"T.copy({self.src} -> {self.dst})"

    # ---- TMA store (sm90): shared tile -> global through the Tensor Memory Accelerator -------------------------
    def tma_store_ok(self, target) -> bool:
        """Whether this copy can be a TMA store: a target with TMA stores and the async-proxy fence (sm90+), TMA
        not disabled (for the kernel or this copy), a whole 2-d shared tile with a wgmma-style swizzle written to
        a global tensor of rank 2..5 (extents 1 outside the tile's rows and columns: the same conditions as a TMA
        load, roles exchanged)."""
        if target is None or self.disable_tma or config.get("disable_tma", False) \
                or config.get("disable_tma_store", False):
            return False
        if not (supports(target, TMA_STORE) and supports(target, MBARRIER_TX)) \
                or not (is_shared(self.src.buffer) and is_global(self.dst.buffer)):
            return False
        if len(self.src.buffer.shape) != 2 or self.src.shape != [int(e) for e in self.src.buffer.shape]:
            return False
        return tma_tile_eligible(self.dst, self.src)

    def _tma_layout(self):
        rows, cols, swz, _ = tma_box(self.src)
        return make_wgmma_operand_layout(rows, cols, tvm.DataType(str(self.src.buffer.dtype)).bits, swz)

    def _lower_tma_store(self, ctx):
        """Every thread fences its shared-memory writes for the async proxy and syncs; one thread stores the tile
        box by box and commits the bulk group. It does not wait here: `BulkStoreWaits` makes that thread wait
        for the boxes to be read before the next barrier (every later write of the tile comes after one, which
        ThreadSync places because the store counts as a read) and before the kernel ends."""
        rows, cols, swz, elems = tma_box(self.src)
        buf = self.src.buffer
        tmap = ctx.tensor_map(self.dst.buffer, tma_box_dims(self.dst, self.src), swz)
        base = [self.dst.mins[d] for d in reversed(range(len(self.dst.buffer.shape)))]  # innermost first
        stores = []
        for p in range(cols // elems):
            phys, off = ctx.physical_index(buf, [0, p * elems])
            stores.append(intrin.tma_store(tirx.address_of(tmap),
                                           phys.access_ptr("r", offset=off[0], extent=rows * elems),
                                           [base[0] + p * elems, *base[1:]]))
        stores.append(intrin.bulk_commit())
        # the scope names the ThreadSync pass that sees this barrier (it ignores barriers of the other scope)
        sync = storage_sync(buf.scope())
        return tirx.SeqStmt([intrin.fence_proxy_async(), sync,
                             tirx.IfThenElse(ctx.thread_var == 0, tirx.SeqStmt(stores), None)])

    # ---- layout inference -------------------------------------------------------------------------------------
    def infer_layout(self, ctx, level):
        sb, db = self.src.buffer, self.dst.buffer
        if level == InferLevel.STRICT and ctx.layout_map.get(sb) is None and self.tma_store_ok(ctx.target):
            return {sb: self._tma_layout()}
        if level == InferLevel.COMMON and is_shared(sb) and is_fragment(db) and ctx.layout_map.get(sb) is None \
                and not self.parts:
            # after the strict level, so a gemm operand keeps the layout its gemm pinned
            lay = self._fragment_source_layout(ctx.target)
            if lay is not None:
                return {sb: lay}
        s_frag, d_frag = is_fragment(sb), is_fragment(db)
        if not (s_frag or d_frag) or level == InferLevel.STRICT:
            return {}
        s_lay, d_lay = ctx.layout_map.get(sb), ctx.layout_map.get(db)
        if s_frag and d_frag and self.parts:
            return self._infer_parts(ctx, level, s_lay, d_lay)
        if s_frag and d_frag:
            if s_lay is not None and d_lay is None:
                return {db: s_lay}
            if d_lay is not None and s_lay is None:
                return {sb: d_lay}
            if s_lay is not None and d_lay is not None and not in_same_threads(d_lay, s_lay):
                # elements that change threads: a conflict for inference to settle (through shared memory);
                # different registers of the same threads are moved by the lowering
                return {db: s_lay}
            if s_lay is None and d_lay is None and level == InferLevel.FREE:
                plan = self._plan(ctx, None)
                return {sb: plan, db: plan}
            return {}
        frag_buf = db if d_frag else sb
        if ctx.layout_map.get(frag_buf) is None and level == InferLevel.FREE:
            other = self.src if d_frag else self.dst
            return {frag_buf: self._plan(ctx, None if self.parts else other)}
        return {}

    def _infer_parts(self, ctx, level, s_lay, d_lay):
        """Between two fragments, one side only a part of its fragment: a side without a layout takes the one under
        which every thread holds the elements it copies (the other side's, seen through the copy's offsets); with
        both laid out so that some thread would read an element another holds, the source is asked for the layout
        of its destination repeated over its blocks (a conflict inference settles by converting the source)."""
        sb, db = self.src.buffer, self.dst.buffer
        if s_lay is not None and d_lay is None:
            lay = self._derived(ctx, self.src, s_lay, self.dst)
            if lay is not None:
                return {db: lay}
            return {db: self._plan(ctx, None)} if level == InferLevel.FREE else {}
        if d_lay is not None and s_lay is None:
            lay = self._derived(ctx, self.dst, d_lay, self.src)
            if lay is not None:
                return {sb: lay}
            return {sb: _plan_whole(sb, ctx.threads)} if level == InferLevel.FREE else {}
        if s_lay is None and d_lay is None:
            return {sb: _plan_whole(sb, ctx.threads)} if level == InferLevel.FREE else {}
        if self._parts_owned(ctx, s_lay, d_lay) is None:
            return {}
        want = self._source_wish(ctx, d_lay)
        return {sb: want} if want is not None and not want.is_equal(s_lay) else {}

    def _tile_vars(self):
        return [tirx.Var(f"cp_y{d}", "int32") for d in range(len(self.extents))]

    def _parts_owned(self, ctx, s_lay, d_lay):
        """None when every thread holding a destination element (under `d_lay`) holds its source element (under
        `s_lay`) for every corner the regions may have; else a sentence naming one that does not."""
        ys = self._tile_vars()
        return threads_agree(d_lay, self.dst.index(ys), s_lay, self.src.index(ys), ys, self.extents,
                             analyzer=ctx.analyzer)

    def _derived(self, ctx, frm, frm_lay, to):
        """The layout of `to`'s fragment (`to` covering it whole) under which each thread holds the elements it
        copies to or from `frm` (laid out as `frm_lay`), for every corner `frm` may have; None when there is none
        such (a part `to`, or threads that change with the corner)."""
        if _fragment_slice(to) is not None:
            return None
        shape = [int(x) for x in to.buffer.shape]
        ys = [tirx.Var(f"cp_y{d}", "int32") for d in range(len(shape))]
        tile = _tile_index(shape, ys)
        at = offsets_inside(frm.index(tile), ys, shape, frm_lay.input_shape, ctx.analyzer)
        lay = access_layout(frm_lay, at, ys, shape) if at is not None else None
        if lay is None:
            return None
        s_lay, d_lay = (frm_lay, lay) if frm is self.src else (lay, frm_lay)
        return lay if self._parts_owned(ctx, s_lay, d_lay) is None else None

    def _source_wish(self, ctx, d_lay):
        """The source fragment's layout made of blocks of the copy's shape, each laid out as the (whole) destination,
        registers one block after another, when that gives every thread the elements it copies for every corner."""
        if _fragment_slice(self.dst) is not None:
            return None
        block = [_int(e) for e in self.src.extents]
        want = spread_over_blocks(d_lay, block, [int(x) for x in self.src.buffer.shape])
        if want is None or self._parts_owned(ctx, want, d_lay) is not None:
            return None
        return want

    def _fragment_source_layout(self, target):
        """A swizzled layout for a whole 2-d shared tile read into a fragment (e.g. the A operand of a register-A
        gemm), or None: its xor spreads the 8 rows x 16 bytes a warp reads at once (a fragment register / an
        ldmatrix phase) over all banks. sm90 gets the wgmma swizzle, the layout TMA fills."""
        buf = self.src.buffer
        shape = [int(s) for s in buf.shape]
        if len(shape) < 2 or [_int(e) for e in self.src.extents[-2:]] != shape[-2:]:
            return None
        rows, cols = shape[-2:]
        bits = tvm.DataType(str(buf.dtype)).bits
        if target is not None and supports(target, WGMMA) and wgmma_swizzle_bytes(rows, cols, bits):
            lay = make_wgmma_operand_layout(rows, cols, bits)
        elif swizzle_applicable(rows, cols, bits):
            lay = make_swizzled_layout(rows, cols, bits)
        else:
            return None
        return lay.expand(shape[:-2]) if len(shape) > 2 else lay

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

    def _cast_lanes(self):
        """Most lanes a converting copy may cast at once: 4 when float8 is on either side (TVM's CUDA codegen
        converts float8 vectors through CUDA's __nv_fp8x4 / __nv_fp8x2 types; 8 lanes print a cast nvcc
        rejects), 1 between float8 and bfloat16, else unlimited."""
        sd, dd = str(self.src.buffer.dtype), str(self.dst.buffer.dtype)
        if sd == dd or not ("float8" in sd or "float8" in dd):
            return 1 << 30
        # CUDA has no vector conversion between float8 and bfloat16: one element at a time there
        return 1 if "bfloat16" in (sd, dd) else 4

    def _may_be_ragged(self, ctx, fshape):
        """Whether some element of the tile may fall outside a global side (its copy is guarded)."""
        ivars = [tirx.Var(f"rg{d}", "int32") for d in range(len(fshape))]
        with analyzer_scope(ctx.analyzer, {v: tvm.ir.Range(0, e) for v, e in zip(ivars, fshape)}):
            return self._guard(ctx, _tile_index(fshape, ivars)) is not None

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
        if is_shared(sb) and is_fragment(db):
            stmt = self._lower_ldmatrix(ctx)
            if stmt is not None:
                return stmt
        bind = {ctx.thread_var: tvm.ir.Range(0, ctx.threads)}
        frag_side = self.dst if is_fragment(db) else (self.src if is_fragment(sb) else None)
        if frag_side is not None:
            frag = ctx.layout_map.get(frag_side.buffer)
            if frag is None:
                raise TileOpError(f"{self.describe()}: fragment '{frag_side.buffer.name}' has no layout")
            if self.parts and not self._block_applies(ctx, frag):
                return self._lower_parts(ctx)
            fshape, offset, placement = [int(s) for s in frag_side.buffer.shape], 0, None
            block = is_fragment(sb) and _fragment_slice(self.src) is not None
            if block:  # walk the block's sub-fragment: its register l is the source's placement(l) + offset
                frag, fshape, placement, offset = self._fragment_block(ctx, frag)
            direct = block or (is_fragment(sb) and frag.is_equal(ctx.layout_map.get(sb)))
            vec = fragment_vector_width(frag, 8, ctx.analyzer)
            if block:
                vec = placed_vector_width(placement, vec)
            while vec > 1 and not all(
                    access_vectorizable(r.buffer, lambda ix, r=r: self._phys_index_fn(ctx, r)(_tile_index(fshape, ix)),
                                        fshape, vec, ctx.analyzer, bind)
                    for r in (self.src, self.dst) if not is_fragment(r.buffer)):
                vec //= 2
            # the zero fill of a ragged tile stores a broadcast constant, and TVM's CUDA codegen cannot print one
            # wider than 16 bytes (8 floats would need make_ulonglong4 of 8 values): narrower vectors there
            dst_bits = tvm.DataType(str(db.dtype)).bits
            if vec * dst_bits > 128 and not is_global(db) and self._may_be_ragged(ctx, fshape):
                vec = 128 // dst_bits
            vec = min(vec, self._cast_lanes())

            def make_frag(fix, fgix, l_flat):
                # emit_by_fragment yields indices of the fragment buffer; the copy speaks in tile indices
                ix, gix = _tile_index(fshape, fix), _tile_index(fshape, fgix)
                value = self._value(ctx, ix)
                if direct:
                    reg = ctx.analyzer.simplify(placement.map([l_flat], ctx.analyzer)[0] + offset) if block else l_flat
                    value = tirx.BufferLoad(ctx.remap[sb], [reg])
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
        vec = pick_vector(self.extents, ctx.threads, bits, accesses, ctx.analyzer, bind,
                          max_bits=min(128, bits * self._cast_lanes()))
        use_async = (self.is_async and is_global(sb) and is_shared(db) and str(sb.dtype) == str(db.dtype)
                     and vec * tvm.DataType(str(sb.dtype)).bits // 8 in (4, 8, 16))
        if self.is_async and not supports(ctx.target, CP_ASYNC):  # the pipeline's commit / wait need it too
            raise TileOpError(unsupported_message(ctx.target, CP_ASYNC, f"{self.describe()} in a T.Pipelined loop"))

        def make(ix, gix):
            if use_async:
                return self._cp_async(ctx, ix, gix, vec)
            return self._guarded(ctx, gix, ctx.store(db, self._value(ctx, ix), self.dst.index(ix)), ix)

        stmt = emit_by_plan(ctx, self.extents, vec, make, name="cp")
        if use_async:
            # the vector loop of a cp.async is a single call: drop the (vectorized) lane loop
            stmt = _strip_vector_loops(stmt)
        return stmt

    def _block_applies(self, ctx, frag):
        """Whether this copy reads a block of its source fragment into shared or global memory that
        `_fragment_block` walks as a sub-fragment (extents dividing the fragment, the layout repeating over
        blocks, a corner at a multiple of the extents)."""
        if not (self.parts == [self.src] and _fragment_slice(self.src) is True) or is_fragment(self.dst.buffer):
            return False
        try:
            self._fragment_block(ctx, frag)
        except TileOpError:
            return False
        return True

    def _lower_parts(self, ctx):
        """A copy with a fragment side that is only part of its fragment: each thread copies the elements of the
        part it holds (`_lower_box`; between two fragments, `_lower_fragment_parts`)."""
        if is_fragment(self.src.buffer) and is_fragment(self.dst.buffer):
            return self._lower_fragment_parts(ctx)
        return self._lower_box(ctx, self.parts[0])

    def _lower_box(self, ctx, part):
        """Fragment part `part` <-> shared or global memory: every thread visits the registers holding elements of
        the part (emit_by_fragment_box); a replicated source is written out by its replica 0 alone, a destination
        written in every replica. Vectorized where a register chunk stays inside the part, in one replica, and the
        memory side takes the vector."""
        frag = ctx.layout_map[part.buffer]
        other = self.dst if part is self.src else self.src
        last = _int(part.extents[-1])
        vec = fragment_vector_width(frag, 8, ctx.analyzer)
        while vec > 1 and not (last % vec == 0 and ctx.analyzer.can_prove_equal(tirx.floormod(part.mins[-1], vec), 0)
                               and chunks_in_one_replica(frag, vec)):
            vec //= 2
        bind = {ctx.thread_var: tvm.ir.Range(0, ctx.threads)}
        while vec > 1 and not access_vectorizable(other.buffer, self._phys_index_fn(ctx, other), self.extents, vec,
                                                  ctx.analyzer, bind):
            vec //= 2
        dst_bits = tvm.DataType(str(self.dst.buffer.dtype)).bits
        if vec * dst_bits > 128 and not is_global(self.dst.buffer) and self._may_be_ragged(ctx, self.extents):
            vec = 128 // dst_bits
        vec = min(vec, self._cast_lanes())
        sb, db = self.src.buffer, self.dst.buffer

        def make(ix, gix, l_flat):
            tix, gtix = _part_tile_index(part, ix), _part_tile_index(part, gix)
            if part is self.src:
                value = tirx.BufferLoad(ctx.remap[sb], [l_flat])
                if str(sb.dtype) != str(db.dtype):
                    value = tirx.Cast(db.dtype, value)
                store = ctx.store(db, value, self.dst.index(tix))
            else:
                store = tirx.BufferStore(ctx.remap[db], self._value(ctx, tix), [l_flat])
            return self._guarded(ctx, gtix, store, tix)

        return emit_by_fragment_box(ctx, frag, vec, part.mins, part.extents, make, one_replica=part is self.src,
                                    name="cp")

    def _lower_fragment_parts(self, ctx):
        """Fragment -> fragment, a side only part of its fragment: every thread (each replica) writes the
        destination elements it holds from the source elements it holds -- which `_parts_owned` checks for every
        corner the regions may have; inference asked for layouts that make it so."""
        s_lay, d_lay = ctx.layout_map[self.src.buffer], ctx.layout_map[self.dst.buffer]
        why = self._parts_owned(ctx, s_lay, d_lay)
        if why is not None:
            raise TileOpError(f"{self.describe()}: some thread would copy an element that another thread holds: "
                              f"{why} (source layout {s_lay}, destination layout {d_lay}); copy through a shared "
                              f"tile instead")
        db = self.dst.buffer

        def make(ix, gix, l_flat):
            return tirx.BufferStore(ctx.remap[db], self._value(ctx, _part_tile_index(self.dst, ix)), [l_flat])

        return emit_by_fragment_box(ctx, d_lay, 1, self.dst.mins, self.dst.extents, make, name="cp")

    def _fragment_block(self, ctx, frag):
        """(sub-fragment, block extents, register placement, register offset) of a source block of fragment layout
        `frag` (extents dividing the fragment's shape, starting at multiples of them): the fragment must repeat one
        sub-fragment over its blocks (Fragment.tile_of)."""
        ext = [_int(e) for e in self.src.extents]
        try:
            sub, strides, placement = frag.tile_of(ext)
        except LayoutError as e:
            raise TileOpError(f"{self.describe()}: the fragment's layout does not split into blocks of {ext} "
                              f"({e})") from None
        try:
            offset = block_offset(self.src.mins, ext, strides, ctx.analyzer)
        except ValueError as e:
            raise TileOpError(f"{self.describe()}: {e}") from None
        return sub, ext, placement, offset

    def _ldmatrix_ok(self, ctx, frag):
        """Whether shared -> fragment can be ``ldmatrix.x4``: a 16-bit 2-d tile whose fragment gives every thread
        its registers in groups of 8 that form the mma m16k16 A pattern (lane l: rows l//4 and +8, columns
        2*(l%4) + {0, 1} and +8; the tile's origin shared by the warp) -- the mma.sync and wgmma A fragments --
        read from 16-byte rows that are contiguous and aligned in the shared layout. Checked by enumeration."""
        sb, db = self.src.buffer, self.dst.buffer
        shape = [int(x) for x in db.shape]
        if str(sb.dtype) != str(db.dtype) or tvm.DataType(str(sb.dtype)).bits != 16 or len(shape) != 2:
            return False
        if self.extents != shape or list(frag.input_shape) != shape or any(_int(m) != 0 for m in self.src.mins[-2:]):
            return False
        if frag.local_size % 8 or frag.thread_extent % 32 or len(frag.local_shape) != 1:
            return False
        if [int(x) for x in sb.shape[-2:]] != shape:
            return False
        t, l = np.meshgrid(np.arange(frag.thread_extent), np.arange(frag.local_size), indexing="ij")
        rc = frag.inverse().map_numpy(t, l)
        row, col = np.asarray(rc[0]), np.asarray(rc[1])
        lane, e = t % 32, l % 8
        base = (t - lane, l - e)  # the same warp's lane 0, first register of the group
        row0, col0 = row[base], col[base]
        want_row = row0 + lane // 4 + 8 * ((e // 2) % 2)
        want_col = col0 + (lane % 4) * 2 + e % 2 + 8 * (e // 4)
        if not (np.array_equal(row, want_row) and np.array_equal(col, want_col) and (col0 % 8 == 0).all()):
            return False
        # 8 consecutive columns from an aligned column must stay one aligned 16-byte chunk in shared memory
        lay = ctx.layout_map.get(sb)
        r, c = np.meshgrid(np.arange(shape[0]), np.arange(0, shape[1], 8), indexing="ij")
        lead = [np.zeros_like(r)] * (len(sb.shape) - 2)
        for j in range(8):
            if lay is None:
                off = r * shape[1] + c + j
            else:
                out = lay.map_numpy(*lead, r, c + j)
                off = sum(np.asarray(o) * int(np.prod(lay.output_shape[k + 1:])) for k, o in enumerate(out))
            if j == 0:
                first = off
                if (first % 8).any():
                    return False
            elif not np.array_equal(off, first + j):
                return False
        return True

    def _lower_ldmatrix(self, ctx):
        """Shared -> A-operand fragment with one ``ldmatrix.x4`` per 8 registers (None if `_ldmatrix_ok` fails):
        lane l of the warp points at row l % 16, column 8 * (l // 16) of the group's 16x16 tile."""
        frag = ctx.layout_map.get(self.dst.buffer)
        if frag is None or not supports(ctx.target, LDMATRIX) or not self._ldmatrix_ok(ctx, frag):
            return None
        t = ctx.thread_var
        lane = tirx.floormod(t, 32)
        q = tirx.Var("ldm_q", "int32")
        bind = {t: tvm.ir.Range(0, ctx.threads), q: tvm.ir.Range(0, frag.local_size // 8)}
        with analyzer_scope(ctx.analyzer, bind):
            local = unflatten(q * 8, list(frag.local_shape))
            warp0 = tirx.floordiv(t, 32) * 32
            row0, col0 = (ctx.analyzer.simplify(x) for x in frag.inverse().map([warp0, *local])[:2])
            phys, idx = ctx.physical_index(self.src.buffer, self.src.index([row0 + tirx.floormod(lane, 16),
                                                                            col0 + tirx.floordiv(lane, 16) * 8]))
            off = ctx.analyzer.simplify(idx[0])
        dst = ctx.remap[self.dst.buffer].access_ptr("w", offset=q * 8, extent=8)
        body = intrin.ldmatrix(4, False, dst, phys.access_ptr("r", offset=off, extent=8))
        body = tirx.For(q, 0, frag.local_size // 8, tirx.ForKind.UNROLLED, body)
        if frag.thread_extent < ctx.threads:  # (whole warps: ldmatrix is warp-collective)
            body = tirx.IfThenElse(t < frag.thread_extent, body, None)
        return body

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
            return intrin.cp_async(nbytes, dst_ptr, src_ptr)
        return intrin.cp_async_zfill(nbytes, dst_ptr, src_ptr, cond)

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


def _part_tile_index(region, ix):
    """Tile indices (the region's non-unit dims, from its corner) of buffer index `ix` inside `region`."""
    out = [i - m for i, m, e in zip(ix, region.mins, region.extents) if _int(e) != 1]
    return out or [ix[-1] - region.mins[-1]]


def _plan_whole(buf, threads):
    """A coalesced layout for the whole fragment `buf`, vectorized to 16 bytes where its shape allows."""
    shape = [int(x) for x in buf.shape]
    vec = max(1, 128 // tvm.DataType(str(buf.dtype)).bits)
    plan = None
    while plan is None and vec >= 1:
        plan = coalesced_plan(shape, threads, vec) if shape[-1] % vec == 0 else None
        vec //= 2
    if plan is None:
        raise TileOpError(f"cannot deal fragment '{buf.name}' of shape {shape} evenly to {threads} threads")
    return plan


def _strip_vector_loops(stmt):
    def on_for(loop):
        if loop.kind == tirx.ForKind.VECTORIZED:
            return substitute(loop.body, {loop.loop_var: tirx.const(0, "int32")})
        return loop

    return map_nodes(stmt, (tirx.For, on_for), order="post")


def _fragment_slice(region):
    """None when `region` covers its fragment whole; True for a block whose extents divide the fragment's shape
    (read through CopyOp._fragment_block when the layout repeats over such blocks); False for any other part."""
    shape = [int(x) for x in region.buffer.shape]
    ext = [_int(e) for e in region.extents]
    if ext == shape or [e for e in ext if e != 1] == [x for x in shape if x != 1]:
        return None
    if len(ext) != len(shape) or any(e is None or e < 1 or x % e for e, x in zip(ext, shape)):
        return False
    return True
