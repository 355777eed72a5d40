"""`T.cumsum` / `T.cummax`: the inclusive scan of a tile along one dimension (a running sum or maximum; `reverse`
scans from the end), into a tile of the same shape (or in place).

Operands: shared-memory tiles (whole buffers or regions) and whole register fragments, in any combination.
Layout: none demanded (a fragment nobody lays out gets a coalesced plan at the free level, after its real users).
Lowering: each line of the tile (the elements along `dim` at one position of the other dimensions) is scanned by
one warp, 32 elements at a time: every lane loads one element (the operator's identity past the end), a
Kogge-Stone scan of `__shfl_up_sync` steps (`__shfl_down_sync` in reverse) combines the lanes, the carry of the
segments before is added, and the last lane's (in reverse the first lane's) result becomes the next segment's carry.
The warps of the block take the lines in turn; the loops are the same in every thread (lines and elements past the
end only skip their loads and stores), so the barriers ThreadSync places around shared accesses stay uniform. A
fragment is written to a shared-memory workspace first, and/or the scan writes into one that the destination
fragment is read from.
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.visit import row_major_offset, storage_sync
from tilex.op.base import InferLevel, TileOp, TileOpError, is_fragment, is_shared
from tilex.op.partition import coalesced_plan, emit_by_fragment, static_shape, unflatten
from tilex.op.region import READ, WRITE, Region, to_region
from tilex.op.registry import register_tile_op

SCAN_OP = "tilex.scan"
KINDS = ("sum", "max")
WARP = 32


def scan_call(src, dst, kind: str, dim: int, reverse: bool):
    """The TIR call of ``T.cum<kind>(src, dst, dim, reverse)`` (`dst` None: in place)."""
    if kind not in KINDS:
        raise TileOpError(f"T.cum{kind}: unknown scan kind, expected one of {KINDS}")
    s = to_region(src)
    d = s if dst is None else to_region(dst, like_shape=s.extents)
    return tirx.call_intrin("handle", SCAN_OP, s.to_call(READ), d.to_call(WRITE), KINDS.index(kind), int(dim),
                            int(bool(reverse)))


def _identity(kind, dtype):
    if kind == "sum":
        return tirx.const(0, dtype)
    t = tvm.DataType(dtype)
    if t.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT):
        return tirx.min_value(dtype)
    return -tirx.infinity(dtype)


def _combine(kind, a, b):
    return a + b if kind == "sum" else tirx.max(a, b)


@register_tile_op(SCAN_OP)
class ScanOp(TileOp):
    free_rank = 1  # any layout works: let the fragments' real producers and consumers choose

    def __init__(self, src: Region, dst: Region, kind: str, dim: int, reverse: bool):
        self.src, self.dst, self.kind, self.reverse = src, dst, kind, bool(reverse)
        self.extents = static_shape(src.extents, f"T.cum{kind} source")
        d_ext = static_shape(dst.extents, f"T.cum{kind} destination")
        rank = len(self.extents)
        if not -rank <= dim < rank:
            raise TileOpError(f"T.cum{kind}: dim={dim} is out of range for a {rank}-d source")
        self.dim = dim % rank
        if [e for e in d_ext if e != 1] != [e for e in self.extents if e != 1]:
            raise TileOpError(f"T.cum{kind}: the destination {dst} has the shape {d_ext}, the source {src} "
                              f"{self.extents}; they must be equal")
        for r in (src, dst):
            if not (is_shared(r.buffer) or is_fragment(r.buffer)):
                raise TileOpError(f"T.cum{kind}: operands live in shared memory or in fragments, got "
                                  f"'{r.buffer.name}' in {r.buffer.scope()}")
            if is_fragment(r.buffer) and not r.is_whole():
                raise TileOpError(f"T.cum{kind}: a fragment operand must be a whole buffer, got {r}")
        if str(src.buffer.dtype) != str(dst.buffer.dtype):
            raise TileOpError(f"T.cum{kind}: the source is {src.buffer.dtype} but the destination "
                              f"{dst.buffer.dtype}; they must be the same dtype")
        if tvm.DataType(str(src.buffer.dtype)).lanes != 1 or str(src.buffer.dtype) == "bool":
            raise TileOpError(f"T.cum{kind}: scans numbers, got {src.buffer.dtype}")

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]), KINDS[int(call.args[2].value)],
                   int(call.args[3].value), bool(call.args[4].value))

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def reads_writes(self, buffer):
        if buffer.same_as(self.src.buffer):
            return True, buffer.same_as(self.dst.buffer)
        return False, True

    def takes_shared(self, buffer):
        return True

    def describe(self):
        rev = ", reverse=True" if self.reverse else ""
        return f"T.cum{self.kind}({self.src} -> {self.dst}, dim={self.dim}{rev})"

    # ---- layout inference -------------------------------------------------------------------------------------
    def infer_layout(self, ctx, level):
        if level != InferLevel.FREE:
            return {}
        out = {}
        for buf in (self.src.buffer, self.dst.buffer):
            if is_fragment(buf) and ctx.layout_map.get(buf) is None and buf not in out:
                shape = [int(x) for x in buf.shape]
                plan = coalesced_plan(shape, ctx.threads, 1)
                if plan is None:
                    raise TileOpError(f"{self.describe()}: cannot lay out {shape} over {ctx.threads} threads")
                out[buf] = plan
        return out

    # ---- lowering ---------------------------------------------------------------------------------------------
    def lower(self, ctx):
        if ctx.threads % WARP:
            raise TileOpError(f"{self.describe()}: scans run by whole warps; the kernel has {ctx.threads} threads "
                              f"(not a multiple of {WARP})")
        dtype = str(self.src.buffer.dtype)
        total = math.prod(self.extents)
        ws = None
        if is_fragment(self.src.buffer) or is_fragment(self.dst.buffer):
            if total * tvm.DataType(dtype).bits // 8 > 48 * 1024:
                raise TileOpError(f"{self.describe()}: scanning a fragment goes through a shared workspace of the "
                                  f"tile, more than 48 KB here; scan a smaller tile")
            ws = tirx.decl_buffer((total,), dtype, "scan_ws", scope="shared.dyn")
        stmts = [] if ws is None else [tirx.AllocBuffer(ws), storage_sync("shared")]

        def ws_access(ix):
            return ws, [row_major_offset(list(ix), self.extents)]

        if is_fragment(self.src.buffer):
            src_loc = ctx.remap[self.src.buffer]

            def stage(ix, _g, l_flat):
                buf, idx = ws_access(ix)
                return tirx.BufferStore(buf, tirx.BufferLoad(src_loc, [l_flat]), idx)

            stmts += [self._by_fragment(ctx, self.src.buffer, stage), storage_sync("shared")]
            load = lambda ix: tirx.BufferLoad(*ws_access(ix))  # noqa: E731
        else:
            load = lambda ix: ctx.load(self.src.buffer, self.src.index(self._tile(ix)))  # noqa: E731
        if is_fragment(self.dst.buffer):
            store = lambda ix, v: tirx.BufferStore(*_with_value(ws_access(ix), v))  # noqa: E731
        else:
            store = lambda ix, v: ctx.store(self.dst.buffer, v, self.dst.index(self._tile(ix)))  # noqa: E731
        stmts.append(self._scan(ctx, dtype, load, store))
        if is_fragment(self.dst.buffer):
            dst_loc = ctx.remap[self.dst.buffer]

            def unstage(ix, _g, l_flat):
                return tirx.BufferStore(dst_loc, tirx.BufferLoad(*ws_access(ix)), [l_flat])

            stmts += [storage_sync("shared"), self._by_fragment(ctx, self.dst.buffer, unstage)]
        if ws is not None:
            stmts.append(storage_sync("shared"))  # the workspace may be reused after this operator
        return tirx.SeqStmt(stmts)

    def _tile(self, ix):
        """Region tile indices (its non-unit dimensions) of the full-rank element `ix`."""
        tile = [i for i, e in zip(ix, self.extents) if e != 1]
        return tile or [ix[-1]]

    def _by_fragment(self, ctx, buf, make):
        frag = ctx.layout_map.get(buf)
        if frag is None:
            raise TileOpError(f"{self.describe()}: fragment '{buf.name}' has no layout")
        return emit_by_fragment(ctx, frag, 1, make, name="scan", bounds=[int(x) for x in buf.shape])

    def _scan(self, ctx, dtype, load, store):
        """Every line scanned by one warp (see the module docstring); `load(ix)` / `store(ix, value)` access the
        element `ix` (full-rank indices of the tile) of the scan's input and output."""
        t = ctx.thread_var
        warps = ctx.threads // WARP
        lane, warp = tirx.floormod(t, WARP), tirx.floordiv(t, WARP)
        n = self.extents[self.dim]
        others = [e for d, e in enumerate(self.extents) if d != self.dim]
        lines = math.prod(others)
        segments = -(-n // WARP)
        identity = _identity(self.kind, dtype)
        val = tirx.decl_buffer((1,), dtype, "scan_val", scope="local")
        nb = tirx.decl_buffer((1,), dtype, "scan_nb", scope="local")
        carry = tirx.decl_buffer((1,), dtype, "scan_carry", scope="local")
        it, seg = tirx.Var("scan_it", "int32"), tirx.Var("scan_seg", "int32")
        line = it * warps + warp
        line_ix = unflatten(line, others) if others else []
        segment = (segments - 1 - seg) if self.reverse else seg
        pos = segment * WARP + lane
        ix = list(line_ix)
        ix.insert(self.dim, pos)
        conds = ([line < lines] if lines % warps else []) + ([pos < n] if n % WARP else [])
        ok = None
        for c in conds:
            ok = c if ok is None else tirx.And(ok, c)
        v, other = tirx.BufferLoad(val, [0]), tirx.BufferLoad(nb, [0])
        element = load(ix)
        mask = tirx.const(intrin.FULL_WARP_MASK, "uint32")
        body = [tirx.BufferStore(val, element if ok is None else tirx.if_then_else(ok, element, identity), [0])]
        offset = 1
        while offset < WARP:
            # every lane shuffles (a collective), then keeps the neighbour's value or its own
            if self.reverse:  # lane i takes lanes i + 1, i + 2, ...: a suffix scan
                shuffled, takes = intrin.shuffle("down", dtype, mask, v, offset, WARP), lane + offset < WARP
            else:
                shuffled, takes = intrin.shuffle("up", dtype, mask, v, offset, WARP), lane >= offset
            body += [tirx.BufferStore(nb, shuffled, [0]),
                     tirx.BufferStore(val, tirx.Select(takes, _combine(self.kind, v, other), v), [0])]
            offset *= 2
        carry_lane = 0 if self.reverse else WARP - 1
        body += [
            tirx.BufferStore(val, _combine(self.kind, v, tirx.BufferLoad(carry, [0])), [0]),
            store(ix, v) if ok is None else tirx.IfThenElse(ok, store(ix, v), None),
            tirx.BufferStore(carry, intrin.shuffle("sync", dtype, mask, v, carry_lane, WARP), [0]),
        ]
        seg_loop = tirx.For(seg, 0, segments, tirx.ForKind.SERIAL, tirx.SeqStmt(body))
        line_loop = tirx.For(it, 0, -(-lines // warps), tirx.ForKind.SERIAL,
                             tirx.SeqStmt([tirx.BufferStore(carry, identity, [0]), seg_loop]))
        return tirx.SeqStmt([tirx.AllocBuffer(val), tirx.AllocBuffer(nb), tirx.AllocBuffer(carry), line_loop])


def _with_value(access, value):
    buf, idx = access
    return buf, value, idx
