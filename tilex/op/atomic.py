"""`T.atomic_add` / `T.atomic_max` / `T.atomic_min`: atomic read-modify-write into global or shared memory.

Two forms (both lower to the device helpers of ``src/tilex/atomic.h``):

* element: ``T.atomic_add(C[i, j], v)`` -- ``dst`` a single element of a global/shared buffer, ``v`` a scalar
  expression. Built directly as ``tilex::atomic_add(&C[i, j], v)`` (a ``call_extern``), so it can sit anywhere:
  inside ``T.Parallel`` (whose lowering substitutes the loop variables inside the call), a serial loop, an ``if``.
* tile: ``T.atomic_add(C[by * bm, bx * bn], C_frag)`` / ``T.atomic_add(C_region, S_shared)`` -- ``value`` a buffer or
  region (fragment, shared, global or local). The tile operator ``tilex.atomic`` behaves like ``T.copy(value, dst)``
  (a start element takes the other side's tile shape) but combines into ``dst`` atomically. Lowered as a
  thread-partitioned loop (by the source fragment's layout, else a coalesced plan); ragged global tiles are guarded;
  additions are vectorized where the hardware has a vector atomic: on sm_90 global memory ``float2``/``float4``
  atomicAdd for fp32 and ``red.global.add.noftz.v{2,4}.{f16x2,bf16x2}`` (up to 8 halves) for fp16/bf16; elsewhere
  ``__half2``/``__nv_bfloat162`` pairs for fp16/bf16; scalar atomics otherwise. On sm_90, a whole row-major shared
  tile is added by TMA reductions (``cp.reduce.async.bulk.tensor``); with ``use_tma=True`` (TileLang's spelling) a
  fragment is too, through a shared tile staged by the operator (swizzled like a wgmma operand, so writes from an
  accumulator are free of bank conflicts). Where the TMA cannot add the tile (another target, a ragged or strided
  global tensor) ``use_tma`` falls back to the atomics above.

The previous value is never returned (TileLang's ``return_prev=True`` is not supported). A replicated source fragment
contributes each element once (only replica 0 adds). A per-thread ``T.alloc_local`` source is added by every thread
(each thread's own values), like ``T.copy`` from a local buffer copies in every thread.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir import intrin
from tilex.ir.hardware import TMA_STORE, VECTOR_ATOMICS, supports
from tilex.ir.visit import BufferLoadNode, BufferRegionNode, dtype_of, lanes, map_nodes, storage_sync, substitute
from tilex.layout import Layout, make_wgmma_operand_layout, wgmma_swizzle_bytes
from tilex.op.base import InferLevel, TileOp, TileOpError, is_fragment, is_global, is_local, is_shared
from tilex.op.partition import (access_vectorizable, coalesced_plan, emit_by_fragment, emit_by_plan,
                                fragment_vector_width, pick_vector, static_shape, unflatten)
from tilex.op.region import READ, READ_WRITE, Region, tile_shape, to_region
from tilex.op.registry import register_tile_op
from tilex.op.tma_load import tma_reduce_box, tma_reduce_tile_box

ADD, MAX, MIN = 0, 1, 2
KIND_NAMES = {ADD: "add", MAX: "max", MIN: "min"}
KINDS = {v: k for k, v in KIND_NAMES.items()}

#: element types ``src/tilex/atomic.h`` handles for every kind (fp16/bf16 max/min through a compare-and-swap loop)
SUPPORTED_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "int64", "uint64")

_OP_NAME = "tilex.atomic"


def _api(kind):
    return f"T.atomic_{KIND_NAMES[kind]}"


def _kind(kind):
    if isinstance(kind, str):
        if kind not in KINDS:
            raise TileOpError(f"unknown atomic operation {kind!r} (expected one of {sorted(KINDS)})")
        return KINDS[kind]
    return int(kind)


def _check_dtype(kind, buffer, what):
    dt = str(buffer.dtype)
    if dt not in SUPPORTED_DTYPES:
        raise TileOpError(f"{_api(kind)}: {what} '{buffer.name}' has dtype {dt}; atomics support "
                          f"{', '.join(SUPPORTED_DTYPES)}")


def _check_dst_scope(kind, buffer):
    if not (is_global(buffer) or is_shared(buffer)):
        raise TileOpError(f"{_api(kind)}: the destination '{buffer.name}' is in '{buffer.scope()}' memory; atomics "
                          f"need a global or shared buffer (registers are private to a thread: update them directly)")


#: element types of an atomic that returns the value before or takes a memory order (one PTX atom each)
_INTS = ("int32", "uint32", "int64", "uint64")
FETCH_DTYPES = {ADD: _INTS + ("float32", "float64"), MAX: _INTS, MIN: _INTS}


# ---- frontend builders ----------------------------------------------------------------------------------------------
def atomic_element(kind, dst, value, memory_order=None, return_prev=False):
    """``tilex::atomic_<kind>(&dst, value)`` for one element ``dst`` (a BufferLoad of a global/shared buffer); with
    `return_prev` or a memory order other than relaxed, ``tilex::atomic_fetch`` (an expression: the value before)."""
    kind = _kind(kind)
    if not isinstance(dst, BufferLoadNode):
        raise TileOpError(f"{_api(kind)}: with a scalar value the destination must be one element like C[i, j], "
                          f"got {type(dst).__name__}: {dst}")
    buf = dst.source
    _check_dst_scope(kind, buf)
    _check_dtype(kind, buf, "destination")
    if lanes(dst) != 1:
        raise TileOpError(f"{_api(kind)}: the destination {buf.name}{list(dst.indices)} must be a single element")
    dt = str(buf.dtype)
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (int, float)):
        value = tirx.const(value, dt)
    elif isinstance(value, tvm.ir.Expr) and not is_tile(value):
        if lanes(value) != 1:
            raise TileOpError(f"{_api(kind)}: the value must be a scalar, got {dtype_of(value)}")
        if dtype_of(value) != dt:
            value = tirx.Cast(dt, value)
    else:
        raise TileOpError(f"{_api(kind)}: expected a scalar value for the element {buf.name}{list(dst.indices)}, "
                          f"got {type(value).__name__}")
    if return_prev or memory_order not in (None, "relaxed"):
        if dt not in FETCH_DTYPES[kind]:
            raise TileOpError(f"{_api(kind)}(return_prev / memory_order) on {dt} '{buf.name}': supported for "
                              f"{', '.join(FETCH_DTYPES[kind])}")
        return intrin.atomic_fetch(KIND_NAMES[kind], memory_order or "relaxed", dt, tirx.address_of(dst), value)
    return intrin.atomic(intrin.atomic_name(KIND_NAMES[kind]), tirx.address_of(dst), value)


def atomic_add_vector(dst, value, width):
    """``tilex::atomic_add_vec`` of `width` consecutive elements: ``dst`` and ``value`` are the first elements (like
    ``C[i, 4 * j]`` / ``S[i, 4 * j]``, or regions whose start is taken) of two buffers; the last index of each steps
    through the `width` elements. ``dst`` (global or shared) must be aligned to `width` elements, as the hardware's
    vector atomics need (float32 x4 and float16/bfloat16 pairs are one instruction on sm_90; others element-wise)."""
    api = f"T.atomic_addx{width}"
    dst, value = _first_element(api, "destination", dst), _first_element(api, "value", value)
    _check_dst_scope(ADD, dst.source)
    _check_dtype(ADD, dst.source, "destination")
    dt = str(dst.source.dtype)
    vals = []
    for k in range(width):
        idx = list(value.indices)
        idx[-1] = idx[-1] + k
        v = tirx.BufferLoad(value.source, idx)
        vals.append(v if str(value.source.dtype) == dt else tirx.Cast(dt, v))
    return intrin.atomic(intrin.atomic_name("add", vector_global=is_global(dst.source)), tirx.address_of(dst), *vals)


def _first_element(api, what, obj):
    if isinstance(obj, (BufferRegionNode, Region)):
        region = to_region(obj)
        return tirx.BufferLoad(region.buffer, [tirx.const(m, "int32") if isinstance(m, int) else m
                                               for m in region.mins])
    if isinstance(obj, BufferLoadNode) and lanes(obj) == 1:
        return obj
    raise TileOpError(f"{api}: the {what} must be the first of the elements, like X[i, 4 * j], got "
                      f"{type(obj).__name__}: {obj}")


def is_tile(obj):
    """Whether `obj` is a tile operand (a buffer or a region), not a single element."""
    return tirx.is_buffer_var(obj) or isinstance(obj, (BufferRegionNode, Region))


def atomic_call(kind, dst, value, use_tma=False):
    """The TIR call for a tile atomic ``T.atomic_<kind>(dst, value)`` (start elements take the other tile's shape);
    `use_tma` travels as a 4th argument, present only when set."""
    kind = _kind(kind)
    src_shape = tile_shape(value)
    dst_shape = tile_shape(dst)
    if src_shape is None and dst_shape is None:
        raise TileOpError(f"{_api(kind)}: at least one side must be a buffer or a region (both are single elements)")
    try:
        src_r = to_region(value, dst_shape)
        dst_r = to_region(dst, src_shape)
    except ValueError as err:
        raise TileOpError(f"{_api(kind)}: {err}") from None
    AtomicOp(src_r, dst_r, kind, use_tma)  # check now: errors point at the user's line
    extra = [1] if use_tma else []
    return tirx.call_intrin("handle", _OP_NAME, src_r.to_call(READ), dst_r.to_call(READ_WRITE), kind, *extra)


def atomic(kind, dst, value, memory_order=None, return_prev=False, use_tma=False):
    """Front door of ``T.atomic_add/max/min``: element form for a scalar value, tile form for a buffer/region."""
    kind = _kind(kind)
    if memory_order is not None and memory_order not in intrin.ATOMIC_ORDERS:
        raise TileOpError(f"{_api(kind)}: memory_order must be one of {sorted(intrin.ATOMIC_ORDERS)} or None, got "
                          f"{memory_order!r}")
    if is_tile(value) or (is_tile(dst) and isinstance(value, BufferLoadNode)):
        if return_prev or memory_order not in (None, "relaxed"):
            raise TileOpError(f"{_api(kind)}: a tile atomic is relaxed and returns nothing (return_prev / "
                              f"memory_order are for one element: {_api(kind)}(C[i, j], v, ...))")
        return atomic_call(kind, dst, value, use_tma)  # a start element takes the other side's tile shape
    if is_tile(dst):
        raise TileOpError(f"{_api(kind)}: a tile destination needs a tile value (a buffer or region), got "
                          f"{type(value).__name__}; for a scalar per element use T.Parallel with "
                          f"{_api(kind)}(C[i, j], v)")
    return atomic_element(kind, dst, value, memory_order, return_prev)


# ---- the tile operator ----------------------------------------------------------------------------------------------
@register_tile_op(_OP_NAME)
class AtomicOp(TileOp):
    """``dst (op)= src`` element by element, atomically on ``dst`` (global or shared)."""

    def __init__(self, src: Region, dst: Region, kind=ADD, use_tma=False):
        self.src, self.dst, self.kind, self.use_tma = src, dst, _kind(kind), bool(use_tma)
        if self.kind not in KIND_NAMES:
            raise TileOpError(f"tilex.atomic: unknown operation code {kind}")
        api = _api(self.kind)
        _check_dst_scope(self.kind, dst.buffer)
        _check_dtype(self.kind, dst.buffer, "destination")
        _check_dtype(self.kind, src.buffer, "value")
        s_shape = static_shape(src.shape, f"{api} value")
        d_shape = static_shape(dst.shape, f"{api} destination")
        if s_shape != d_shape:
            raise TileOpError(f"{api}: tile shapes differ: destination {dst} has {d_shape}, value {src} has {s_shape}")
        self.extents = d_shape or [1]
        if is_fragment(src.buffer) and src.shape != [int(s) for s in src.buffer.shape if int(s) != 1] \
                and src.shape != list(src.buffer.shape):
            raise TileOpError(f"{api}: a fragment value must be used whole, got {src}")

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]),
                   int(call.args[2].value) if len(call.args) > 2 else ADD,
                   len(call.args) > 3 and bool(call.args[3].value))

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def describe(self):
        return f"{_api(self.kind)}({self.dst}, {self.src})"

    def _staging_swizzle(self):
        """Swizzle (bytes) of the staged tile a TMA reduction reads (the source's 2-d shape in the destination's
        dtype): the wgmma-style one when the tile has it (the writes from an accumulator fragment then avoid bank
        conflicts), else 0 (row-major)."""
        rows, cols = (int(e) for e in self.src.buffer.shape)
        return wgmma_swizzle_bytes(rows, cols, tvm.DataType(str(self.dst.buffer.dtype)).bits)

    def _staging_layout(self):
        rows, cols = (int(e) for e in self.src.buffer.shape)
        swz = self._staging_swizzle()
        if swz:
            return make_wgmma_operand_layout(rows, cols, tvm.DataType(str(self.dst.buffer.dtype)).bits, swz)
        return Layout([rows, cols], lambda *ix: list(ix))

    # ---- layout inference (as T.copy from a fragment) ---------------------------------------------------------------
    def infer_layout(self, ctx, level):
        sb = self.src.buffer
        if level == InferLevel.STRICT and is_shared(sb) and ctx.layout_map.get(sb) is None \
                and self._tma_reduce_box(ctx.target) is not None:
            return {sb: self._staging_layout()}  # the layout the TMA boxes read
        if level != InferLevel.FREE or not is_fragment(sb) or ctx.layout_map.get(sb) is not None:
            return {}
        bits = tvm.DataType(str(self.dst.buffer.dtype)).bits
        vec = pick_vector(self.extents, ctx.threads, bits, [(self.dst.buffer, self.dst.index)], ctx.analyzer, {})
        plan = coalesced_plan(self.extents, ctx.threads, vec)
        while plan is None and vec > 1:
            vec //= 2
            plan = coalesced_plan(self.extents, ctx.threads, vec)
        if plan is None:
            raise TileOpError(f"{self.describe()}: cannot deal a {self.extents} tile evenly to {ctx.threads} threads")
        return {sb: plan}

    # ---- lowering -----------------------------------------------------------------------------------------------
    def _hw_vector(self, ctx):
        """Widest vector atomic (elements) src/tilex/atomic.h has for this operation, type, space and arch."""
        if self.kind != ADD:
            return 1
        dt, glob = str(self.dst.buffer.dtype), is_global(self.dst.buffer)
        if dt == "float32":
            return 4 if glob and supports(ctx.target, VECTOR_ATOMICS) else 1
        if dt in ("float16", "bfloat16"):
            return 8 if glob and supports(ctx.target, VECTOR_ATOMICS) else 2
        return 1

    def _dst_phys_fn(self, ctx):
        def fn(ix):
            idx = self.dst.index(ix)
            return ctx.physical_index(self.dst.buffer, idx)[1] if self.dst.buffer in ctx.remap else idx
        return fn

    def _lanes_ok(self, ctx, v, bind):
        """A vector of v lanes: dst contiguous and aligned, and never straddling the edge of a ragged global tile
        (each global side's row length a multiple of v; a global source contiguous too, so it starts aligned)."""
        if not access_vectorizable(self.dst.buffer, self._dst_phys_fn(ctx), self.extents, v, ctx.analyzer, bind):
            return False
        for r in (self.src, self.dst):
            if not is_global(r.buffer):
                continue
            inner = r.buffer.shape[-1]
            if not (isinstance(inner, tirx.IntImm) and int(inner.value) % v == 0):
                return False
        if is_global(self.src.buffer) and not access_vectorizable(self.src.buffer, self.src.index, self.extents, v,
                                                                  ctx.analyzer, bind):
            return False
        return True

    def _guard(self, ctx, gix):
        conds = []
        for r in (self.src, self.dst):
            if not is_global(r.buffer):
                continue
            for e, s in zip(r.index(gix), r.buffer.shape):
                c = e < s
                if not ctx.analyzer.can_prove(c):
                    conds.append(c)
        out = None
        for c in conds:
            out = c if out is None else tirx.And(out, c)
        return out

    def _helper(self, vec):
        if vec == 1:
            return intrin.atomic_name(KIND_NAMES[self.kind])
        return intrin.atomic_name("add", vector_global=is_global(self.dst.buffer))

    def _cast(self, value):
        if dtype_of(value) != str(self.dst.buffer.dtype):
            value = tirx.Cast(self.dst.buffer.dtype, value)
        return value

    def _address(self, ctx, ix, vec):
        """Address of dst element `ix`. In shared memory a ``tvm_access_ptr`` (read+write, `vec` elements), so that
        ThreadSync sees the atomic as a write and puts barriers around it; ``&C[...]`` in global memory."""
        phys, idx = ctx.physical_index(self.dst.buffer, self.dst.index(ix))
        if is_shared(self.dst.buffer) and len(idx) == 1 and phys is not self.dst.buffer:
            return phys.access_ptr("rw", offset=idx[0], extent=vec)
        return tirx.address_of(tirx.BufferLoad(phys, idx))

    def _emit(self, ctx, vec, ix, gix, value, extra_cond=None):
        addr = self._address(ctx, ix, vec)
        stmt = tirx.Evaluate(intrin.atomic(self._helper(vec), addr, self._cast(value)))
        cond = self._guard(ctx, gix)
        if extra_cond is not None:
            cond = extra_cond if cond is None else tirx.And(extra_cond, cond)
        return stmt if cond is None else tirx.IfThenElse(cond, stmt, None)

    # ---- TMA reduction (sm90): a whole shared tile added into global memory by the TMA unit ---------------------------
    def _tma_reduce_enabled(self, target):
        """Whether this is a float add that TMA reductions could do on `target` (sm90, TMA not disabled)."""
        return (self.kind == ADD and target is not None and not config.get("disable_tma", False)
                and not config.get("disable_tma_store", False) and supports(target, TMA_STORE)
                and str(self.dst.buffer.dtype) in ("float32", "float16", "bfloat16"))

    def _tma_reduce_box(self, target):
        """The TMA box when one TMA reduction can add this whole row-major shared tile into its global tile,
        else None."""
        return tma_reduce_box(self.dst, self.src) if self._tma_reduce_enabled(target) else None

    def _lower_tma_reduce(self, ctx, box, swizzle):
        sb = self.src.buffer
        rows, cols = (int(e) for e in sb.shape)
        phys = ctx.remap.get(sb, sb)
        return self._tma_reduce_stmts(ctx, box, swizzle, phys,
                                      lambda c: ctx.physical_index(sb, c)[1][0], rows, cols)

    def _tma_reduce_stmts(self, ctx, box, swizzle, phys, offset_of, rows, cols):
        """Every thread fences its shared-memory writes of the tile (`phys`, element (r, c) at ``offset_of([r,
        c])``) for the async proxy and syncs; thread 0 issues the reduction (one box per swizzle plane) and commits
        the bulk group (BulkStoreWaits makes it wait for the tile to be read before the next barrier, which orders
        any later write of the tile)."""
        gb = self.dst.buffer
        elems = swizzle * 8 // tvm.DataType(str(gb.dtype)).bits if swizzle else cols
        tmap = ctx.tensor_map(gb, (elems, *box[1:]), swizzle)
        base = [self.dst.mins[d] for d in reversed(range(len(gb.shape)))]
        reds = []
        for p in range(cols // elems):
            reds.append(intrin.tma_reduce_add(tirx.address_of(tmap),
                                              phys.access_ptr("r", offset=offset_of([0, p * elems]),
                                                              extent=rows * elems),
                                              [base[0] + p * elems, *base[1:]]))
        return tirx.SeqStmt([intrin.fence_proxy_async(), storage_sync(phys.scope()),
                             tirx.IfThenElse(ctx.thread_var == 0, tirx.SeqStmt([*reds, intrin.bulk_commit()]), None)])

    # ---- a fragment added by TMA through a staged shared tile (sm90) ----------------------------------------------
    def _staged_box(self, ctx):
        """The TMA box when this float add of a whole 2-d fragment can go through a shared tile staged by this
        operator (swizzled like a wgmma operand) and one TMA reduction, else None."""
        sb = self.src.buffer
        if not self._tma_reduce_enabled(ctx.target) or len(sb.shape) != 2 \
                or list(self.extents) != [int(e) for e in sb.shape] or ctx.layout_map.get(sb) is None:
            return None
        if self._staging_swizzle() not in (32, 64, 128):
            return None
        return tma_reduce_tile_box(self.dst, *(int(e) for e in sb.shape))

    def stages_swizzled_shared(self, ctx):
        return self.use_tma and is_fragment(self.src.buffer) and self._staged_box(ctx) is not None

    def _lower_staged(self, ctx, box):
        """``T.copy(fragment, staged)`` then the TMA reduction of the staged tile (`_lower_tma_reduce`). The tile
        is laid out like a wgmma operand, so writes from an accumulator fragment are free of bank conflicts;
        ThreadSync orders its reuse after the previous reduction's read (BulkStoreWaits)."""
        sb, gb = self.src.buffer, self.dst.buffer
        m, n = (int(e) for e in sb.shape)
        dtype = str(gb.dtype)
        bits = tvm.DataType(dtype).bits
        swizzle, layout = self._staging_swizzle(), self._staging_layout()
        # whole KB: swizzled tiles stay 1 KB-aligned in the merged dynamic shared memory
        size = (m * n * bits // 8 + 1023) // 1024 * 1024 * 8 // bits
        stage = tirx.decl_buffer((size,), dtype, f"{sb.name}_stage", scope="shared.dyn")
        frag = ctx.layout_map[sb]
        vec = fragment_vector_width(frag, max(1, 128 // bits), ctx.analyzer)

        def make(ix, _gix, l_flat):
            value = tirx.BufferLoad(ctx.remap[sb], [l_flat])
            if str(sb.dtype) != dtype:
                value = tirx.Cast(dtype, value)
            return tirx.BufferStore(stage, value, [ctx.layout_offset(layout, list(ix))])

        writes = emit_by_fragment(ctx, frag, vec, make, name="stage")
        reduce = self._tma_reduce_stmts(ctx, box, swizzle, stage, layout.offset, m, n)
        return tirx.SeqStmt([tirx.AllocBuffer(stage), writes, reduce])

    def lower(self, ctx):
        sb = self.src.buffer
        if is_local(sb):
            return self._lower_local(ctx)
        if is_fragment(sb) and self.use_tma:
            box = self._staged_box(ctx)
            if box is not None:
                return self._lower_staged(ctx, box)
        if is_shared(sb):
            box = self._tma_reduce_box(ctx.target)
            lay = ctx.layout_map.get(sb)
            if box is not None and (lay is None or lay.is_equal(self._staging_layout())):
                return self._lower_tma_reduce(ctx, box, self._staging_swizzle())
        bind = {ctx.thread_var: tvm.ir.Range(0, ctx.threads)}
        hw = self._hw_vector(ctx)
        if is_fragment(sb):
            frag = ctx.layout_map.get(sb)
            if frag is None:
                raise TileOpError(f"{self.describe()}: fragment '{sb.name}' has no layout")
            vec = fragment_vector_width(frag, hw, ctx.analyzer) if hw > 1 else 1
            while vec > 1 and not self._lanes_ok(ctx, vec, bind):
                vec //= 2
            nd = len(frag.input_shape)
            inv = frag.inverse() if frag.replicate > 1 else None

            def make_frag(ix, gix, l_flat):
                value = tirx.BufferLoad(ctx.remap[sb], [l_flat])
                first = None
                if inv is not None:  # a replicated fragment: only replica 0 adds its copy
                    rep = ctx.analyzer.simplify(
                        inv.map([ctx.thread_var, *unflatten(l_flat, list(frag.local_shape))])[nd])
                    if not (isinstance(rep, tirx.IntImm) and rep.value == 0):
                        first = tirx.EQ(rep, tirx.const(0, dtype_of(rep)))
                return self._emit(ctx, vec, ix, gix, value, first)

            stmt = emit_by_fragment(ctx, frag, vec, make_frag, name="atom")
        else:
            bits = tvm.DataType(str(self.dst.buffer.dtype)).bits
            vec = 1
            if hw > 1:
                vec = pick_vector(self.extents, ctx.threads, bits, [(self.dst.buffer, self._dst_phys_fn(ctx))],
                                  ctx.analyzer, bind, max_bits=hw * bits)
                while vec > 1 and not self._lanes_ok(ctx, vec, bind):
                    vec //= 2

            def make(ix, gix):
                return self._emit(ctx, vec, ix, gix, ctx.load(sb, self.src.index(ix)))

            stmt = emit_by_plan(ctx, self.extents, vec, make, name="atom")
        if vec > 1:
            stmt = _pack_lanes(stmt, self._helper(vec), vec, ctx.analyzer)
        return stmt

    def _lower_local(self, ctx):
        """A per-thread `local` source: every thread adds its whole tile (serial loop, scalar atomics)."""
        ivars = [tirx.Var(f"al{d}", "int32") for d in range(len(self.extents))]
        body = self._emit(ctx, 1, ivars, ivars, ctx.load(self.src.buffer, self.src.index(ivars)))
        for v, e in reversed(list(zip(ivars, self.extents))):
            body = tirx.For(v, 0, e, tirx.ForKind.SERIAL, body)
        return body


def _simplify(analyzer, expr):
    """Simplify the index arithmetic of an address or a value (calls such as tvm_access_ptr: their arguments)."""
    if isinstance(expr, tvm.ir.Call):
        if isinstance(expr.op, tvm.ir.Op) and expr.op.name in ("tirx.address_of", "tirx.tvm_access_ptr"):
            return tirx.call_intrin("handle", expr.op.name, *[_simplify(analyzer, a) for a in expr.args])
        return expr
    if isinstance(expr, BufferLoadNode):
        return tirx.BufferLoad(expr.source, [analyzer.simplify(i) for i in expr.indices])
    if isinstance(expr, tvm.ir.Expr) and not isinstance(expr, tvm.ir.Call):
        try:
            return analyzer.simplify(expr)
        except Exception:  # noqa: BLE001 - leave it to TVM's simplifier
            return expr
    return expr


def _pack_lanes(stmt, helper, vec, analyzer):
    """Turn each vectorized lane loop around a vector-atomic call into one call taking all lanes' values.

    TVM's vectorizer cannot vectorize an extern call (it would scalarize it), so the lane loop is removed here:
    ``for lv in vectorized(v): helper(&dst[.. lv ..], value(lv))`` -> ``helper(&dst[.. 0 ..], value(0), ...,
    value(v-1))``; everything else in the loop body (the bounds guard, built from the vector's first element) takes
    lane 0.
    """

    def on_for(loop):
        if loop.kind != tirx.ForKind.VECTORIZED:
            return loop
        lv = loop.loop_var
        zero = tirx.const(0, dtype_of(lv))

        def on_eval(ev):
            call = ev.value
            if intrin.name_of(call) == helper:
                addr = _simplify(analyzer, substitute(call.args[1], {lv: zero}))
                vals = [_simplify(analyzer, substitute(call.args[2], {lv: tirx.const(k, dtype_of(lv))}))
                        for k in range(vec)]
                return tirx.Evaluate(intrin.atomic(helper, addr, *vals))
            return ev

        body = map_nodes(loop.body, (tirx.Evaluate, on_eval))
        return substitute(body, {lv: zero})

    return map_nodes(stmt, (tirx.For, on_for), order="post")


def expose_shared_atomics(stmt):
    """Make element atomics on shared memory visible to TVM's ThreadSync.

    ``T.atomic_add(S[i], v)`` is built at parse time as ``tilex::atomic_add(&S[i], v)``; ThreadSync does not count
    ``address_of`` as an access, so it would not put barriers between such atomics and other accesses of ``S``.
    Run on per-thread TIR (after shared buffers have their physical 1-d form, i.e. at the end of LowerTileOps), this
    rewrites ``&S[k]`` inside ``tilex::atomic_*`` calls on a shared buffer to ``tvm_access_ptr(S, k, 1, rw)``.
    """

    def on_eval(ev):
        call = ev.value
        if not intrin.is_atomic(call) or len(call.args) < 2:
            return ev
        addr = call.args[1]
        if not (isinstance(addr, tvm.ir.Call) and isinstance(addr.op, tvm.ir.Op) and addr.op.name == "tirx.address_of"):
            return ev
        load = addr.args[0]
        if not (isinstance(load, BufferLoadNode) and is_shared(load.source) and len(load.indices) == 1):
            return ev
        ptr = load.source.access_ptr("rw", offset=load.indices[0], extent=1)
        return tirx.Evaluate(intrin.atomic(intrin.name_of(call), ptr, *call.args[2:]))

    return map_nodes(stmt, (tirx.Evaluate, on_eval))
