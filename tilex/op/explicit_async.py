"""Asynchronous tile operators whose completion the program waits for itself (tilex.language.expert).

* ``T.tma_copy`` (`TmaCopyOp`): a load (global -> shared) is the TMA boxes of `tilex.op.tma_load` issued by one
  thread of the threads running it (the first), after it adds the tile's bytes to the transaction count of the
  program's mbarrier (``mbarrier.expect_tx``); nobody waits: the program arrives on and waits for that barrier. A
  store (shared -> global) is the TMA store of ``T.copy`` (every thread fences its shared-memory writes for the
  async proxy and meets the others at a barrier, one thread stores the boxes and commits the bulk group) without
  the wait for the group: the program waits with ``T.tma_store_wait``.
* ``T.async_copy`` (`AsyncCopyOp`): a global -> shared ``T.copy`` as ``cp.async`` chunks and one
  ``cp.async.commit_group``; the program waits with ``T.ptx_wait_group``. ThreadSync sees the tile written there
  (``tilex.async_write``), so the barrier before a later read of it by other threads is placed as usual.
* ``T.wgmma_gemm`` (`WgmmaGemmOp`): ``T.gemm`` on warpgroup MMAs only (no mma.sync fallback), issued and committed
  without a wait; the program waits with ``T.wait_wgmma``. Its shared operands are fenced and synchronized first
  unless only TMA loads write them in the program (`LowerContext.async_only`: the program's mbarriers order them).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.hardware import CP_ASYNC, MBARRIER_TX, TMA_LOAD, TMA_STORE, supports, unsupported_message
from tilex.ir.names import ASYNC_MMA_FENCED_DEFER, ASYNC_MMA_WS_DEFER, ASYNC_WRITE_OP
from tilex.ir.visit import buffers_written, walk
from tilex.op import gemm_wgmma
from tilex.op.base import InferLevel, TileOp, TileOpError, is_global, is_shared
from tilex.op.copy import CopyOp
from tilex.op.gemm import GemmOp, gemm_call
from tilex.op.region import READ, WRITE, Region, tile_shape, to_region
from tilex.op.registry import parse_tile_op, register_tile_op
from tilex.op.tma_load import TmaLoadOp, tma_box, tma_bytes, tma_eligible, tma_tile_eligible

TMA_COPY_OP = "tilex.tma_copy"
ASYNC_COPY_OP = "tilex.async_copy"
WGMMA_GEMM_OP = "tilex.wgmma_gemm"


def _regions(src, dst):
    """The two Regions of a copy written like ``T.copy`` (a start element takes the other side's tile shape)."""
    src_shape, dst_shape = tile_shape(src), tile_shape(dst)
    if src_shape is None and dst_shape is None:
        raise TileOpError("at least one side must be a buffer or a slice (both are single elements)")
    return to_region(src, dst_shape), to_region(dst, src_shape)


# ---- T.tma_copy ---------------------------------------------------------------------------------------------------
def tma_copy_call(src, dst, barrier=None):
    """The ``tilex.tma_copy`` call: `barrier` (a BufferLoad of an mbarrier) for a load, None for a store."""
    src_r, dst_r = _regions(src, dst)
    bar = barrier if barrier is not None else tirx.const(0, "int32")
    return tirx.call_intrin("handle", TMA_COPY_OP, src_r.to_call(READ), dst_r.to_call(WRITE), bar)


@register_tile_op(TMA_COPY_OP)
class TmaCopyOp(TileOp):
    def __init__(self, src: Region, dst: Region, barrier=None):
        self.src, self.dst, self.barrier = src, dst, barrier
        self.is_load = is_global(src.buffer) and is_shared(dst.buffer)
        if not self.is_load and not (is_shared(src.buffer) and is_global(dst.buffer)):
            raise TileOpError(f"{self.describe()}: copies global -> shared (a load) or shared -> global (a store), "
                              f"got {src.buffer.scope()} -> {dst.buffer.scope()}")
        if self.is_load and barrier is None:
            raise TileOpError(f"{self.describe()}: a load needs barrier= (an mbarrier from T.alloc_barrier), on "
                              f"which the program waits for the tile")

    @classmethod
    def from_call(cls, call):
        bar = call.args[2]
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]),
                   None if isinstance(bar, tirx.IntImm) else bar)

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def reads_writes(self, buffer):
        return (False, True) if buffer.same_as(self.dst.buffer) else (True, False)

    def describe(self):
        return f"T.tma_copy({self.src} -> {self.dst})"

    def _load(self):
        return TmaLoadOp(self.src, self.dst, self.barrier)

    def _store(self):
        return CopyOp(self.src, self.dst)

    def _check(self, target):
        features = (TMA_LOAD, MBARRIER_TX) if self.is_load else (TMA_STORE, MBARRIER_TX)
        for feature in features:
            if not supports(target, feature):
                raise TileOpError(unsupported_message(target, feature, self.describe()))
        if self.is_load:
            if not tma_eligible(self.src, self.dst, symbolic_sizes=True):
                raise TileOpError(f"{self.describe()}: not a TMA load: the global tensor must be contiguous with "
                                  f"static 16-byte aligned strides, of the shared tile's dtype (8/16-bit data, "
                                  f"32-bit integer words, or a 2/4-byte vector), the tile a whole 2-d box of at "
                                  f"most 256 rows with a wgmma swizzle (or one vector of at most 256 elements)")
            return
        sb = self.src.buffer
        if len(sb.shape) != 2 or self.src.shape != [int(e) for e in sb.shape] or \
                not tma_tile_eligible(self.dst, self.src):
            raise TileOpError(f"{self.describe()}: not a TMA store: the shared tile must be a whole 2-d buffer with "
                              f"a wgmma swizzle, the global tensor contiguous with static 16-byte aligned strides")

    def infer_layout(self, ctx, level):
        if level != InferLevel.STRICT:
            return {}
        if self.is_load:
            return self._load().infer_layout(ctx, level)
        sb = self.src.buffer
        if ctx.layout_map.get(sb) is None and len(sb.shape) == 2:
            try:
                tma_box(self.src)
            except TileOpError:
                return {}  # reported by lower, located
            return {sb: self._store()._tma_layout()}
        return {}

    def lower(self, ctx):
        self._check(ctx.target)
        if not self.is_load:
            store = self._store()
            have = ctx.layout_map.get(self.src.buffer)
            if have is None or not have.is_equal(store._tma_layout()):
                raise TileOpError(f"{self.describe()}: the shared tile '{self.src.buffer.name}' must have the wgmma "
                                  f"swizzle layout for a TMA store, it has {have}")
            return store._lower_tma_store(ctx)
        loads = self._load().lower(ctx)
        bar = tirx.address_of(ctx.load(self.barrier.source, list(self.barrier.indices)))
        issue = tirx.SeqStmt([intrin.mbar_expect_tx(bar, tma_bytes(self.dst)), loads])
        return tirx.IfThenElse(ctx.thread_var == 0, issue, None)


# ---- T.async_copy -------------------------------------------------------------------------------------------------
def async_copy_call(src, dst):
    src_r, dst_r = _regions(src, dst)
    return tirx.call_intrin("handle", ASYNC_COPY_OP, src_r.to_call(READ), dst_r.to_call(WRITE))


@register_tile_op(ASYNC_COPY_OP)
class AsyncCopyOp(CopyOp):
    def __init__(self, src: Region, dst: Region):
        super().__init__(src, dst, is_async=True)

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]))

    def describe(self):
        return f"T.async_copy({self.src} -> {self.dst})"

    def lower(self, ctx):
        sb, db = self.src.buffer, self.dst.buffer
        if not (is_global(sb) and is_shared(db)) or str(sb.dtype) != str(db.dtype):
            raise TileOpError(f"{self.describe()}: cp.async copies global -> shared tiles of one dtype, got "
                              f"{sb.scope()} {sb.dtype} -> {db.scope()} {db.dtype}")
        if not supports(ctx.target, CP_ASYNC):
            raise TileOpError(unsupported_message(ctx.target, CP_ASYNC, self.describe()))
        stmt = super().lower(ctx)
        found = []
        walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if intrin.is_call(c, intrin.CP_ASYNC)
                    or intrin.is_call(c, intrin.CP_ASYNC_ZFILL) else None))
        if not found:
            raise TileOpError(f"{self.describe()}: the tile cannot be copied in 4-, 8- or 16-byte cp.async chunks "
                              f"(rows of a multiple of 4 bytes, aligned in both tiles)")
        phys = ctx.remap.get(db, db)
        size = 1
        for s in phys.shape:
            size *= int(s)
        written = tirx.Evaluate(tirx.call_intrin("void", ASYNC_WRITE_OP, phys.access_ptr("w", offset=0, extent=size)))
        return tirx.SeqStmt([stmt, written, intrin.cp_async_commit()])


# ---- T.wgmma_gemm -------------------------------------------------------------------------------------------------
def wgmma_gemm_call(A, B, C, transpose_A=False, transpose_B=False, policy=0, clear_accum=False):
    """The ``tilex.wgmma_gemm`` call: ``tilex.gemm``'s arguments; `clear_accum` may be a run-time condition
    (``j == 0`` of an unrolled loop), carried in its place."""
    runtime = tvm.ir.is_prim_expr(clear_accum) and not isinstance(clear_accum, tirx.IntImm)
    call = gemm_call(A, B, C, transpose_A, transpose_B, policy, False if runtime else clear_accum)
    args = list(call.args)
    if runtime:
        args[_CLEAR_ARG] = clear_accum
    return tirx.call_intrin("handle", WGMMA_GEMM_OP, *args)


_CLEAR_ARG = 6  # A, B, C, transpose_A, transpose_B, policy, clear_accum, swapped


@register_tile_op(WGMMA_GEMM_OP)
class WgmmaGemmOp(GemmOp):
    """`GemmOp` issued without a wait; `clear_cond` is a run-time clear_accum condition (None: the flag)."""

    clear_cond = None

    @classmethod
    def from_call(cls, call):
        clear = call.args[_CLEAR_ARG]
        if isinstance(clear, tirx.IntImm):
            return super().from_call(call)
        r = [Region.from_call(x) for x in call.args[:3]]
        flags = [int(x.value) for x in call.args[3:_CLEAR_ARG]] + [0, int(call.args[_CLEAR_ARG + 1].value)]
        op = cls(*r, *flags)
        op.clear_cond = clear
        return op

    def describe(self):
        return f"T.wgmma_gemm({self.A}, {self.B}, {self.C})"

    def _plan(self, threads, target):
        p = gemm_wgmma.plan(self, threads, target)
        if p is None:
            raise TileOpError(f"{self.describe()}: cannot run on warpgroup MMAs here: "
                              f"{gemm_wgmma.refusal(self, threads, target)}; use T.gemm, which falls back to "
                              f"mma.sync")
        return p

    def infer_layout(self, ctx, level):
        if level == InferLevel.STRICT:
            self._check(ctx.threads)
            self._plan(ctx.threads, ctx.target)
        return super().infer_layout(ctx, level)

    def lower(self, ctx):
        self._plan(ctx.threads, ctx.target)
        shared = [r.buffer for r in (self.A, self.B) if is_shared(r.buffer)]
        before = ctx.async_mma
        # operands only TMA writes: the program's mbarrier wait ordered them; otherwise fence and synchronize first
        ctx.async_mma = ASYNC_MMA_WS_DEFER if all(b in ctx.async_only for b in shared) else ASYNC_MMA_FENCED_DEFER
        try:
            mma = super().lower(ctx)
        finally:
            ctx.async_mma = before
        if self.clear_cond is None:
            return mma
        self.clear_accum = True
        try:
            clear = self._clear(ctx)
        finally:
            self.clear_accum = False
        return tirx.SeqStmt([tirx.IfThenElse(self.clear_cond, tirx.SeqStmt(clear) if len(clear) > 1 else clear[0],
                                             None), mma])


# ---- what the program's own synchronization orders ------------------------------------------------------------------
def tma_only_tiles(body) -> frozenset:
    """The shared tiles of the tile program `body` that only TMA loads (T.tma_copy, ``tilex.tma_load``) write:
    nothing writes them through the generic proxy, so MMAs reading them after the program's mbarrier wait need no
    proxy fence or barrier."""
    tma, generic = set(), set()

    def on_eval(node):
        call = node.value
        try:
            op = parse_tile_op(call) if isinstance(call, tvm.ir.Call) else None
        except Exception:  # noqa: BLE001 - a malformed operator is reported where it is lowered
            op = None
        if op is None:
            generic.update(b for b in buffers_written(node) if is_shared(b))
            return
        if isinstance(op, TmaLoadOp) or (isinstance(op, TmaCopyOp) and op.is_load):
            tma.add(op.dst.buffer)
            return
        generic.update(b for b in op.buffers() if is_shared(b) and op.reads_writes(b)[1])

    walk(body, [(tirx.Evaluate, on_eval),
                (tirx.BufferStore, lambda n: generic.add(n.buffer) if is_shared(n.buffer) else None)])
    return frozenset(tma - generic)
