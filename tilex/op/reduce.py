"""`T.reduce_*`: reduce a tile along one dimension (sum, max, min, abssum, absmax; bitand, bitor, bitxor of
integer tiles) into a smaller tile.

Layout: the destination of a fragment reduction is the source Fragment *projected* onto the kept dimensions
(`tilex.layout.project`): replicated over exactly the threads that held the reduced dimension (and over the
source's own replicas), so every such thread ends with the full result. Lowering: each thread folds the elements
it holds into per-row partials (registers), then partials are combined across the threads that held the reduced
dimension - xor shuffles for digit fields inside a warp, a shared-memory workspace for fields across warps. A
replicated source (a GEMM operand held by warps side by side) is never combined across its replicas: they hold
copies of the same elements, and each computes the result on its own. A shared-memory source is reduced by groups
of up to a warp's lanes per output element when the block has threads to spare (each lane folds a strided share of
the row, xor shuffles combine the group, a shared workspace hands the result to the fragment's holders); otherwise
by a coalesced set of threads, each owning whole output elements.

Either operand may be a shared tile (as in TileLang, which stages such operands through fragments): a
fragment's reduction into a shared destination runs as above in registers laid out as the projection, and one
thread of each replica group stores (clear=False: combines with) the element; a shared source into a shared
destination is reduced by the coalesced threads, each storing the elements it owns.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.visit import row_major_offset, storage_sync
from tilex.layout import Fragment
from tilex.layout.project import project
from tilex.op.base import InferLevel, TileOp, TileOpError, is_fragment, is_shared
from tilex.op.partition import coalesced_plan, emit_by_fragment, static_shape
from tilex.op.region import READ, READ_WRITE, Region, to_region
from tilex.op.registry import register_tile_op

#: shared-memory workspace bound of one cross-warp combine (every thread's partial values)
MAX_WORKSPACE = 48 * 1024
KINDS = ("sum", "max", "min", "abssum", "absmax", "bitand", "bitor", "bitxor")
#: the kinds that need integer tiles
BITWISE_KINDS = ("bitand", "bitor", "bitxor")


def reduce_call(src, dst, reduce_type, dim=-1, clear=True):
    if reduce_type not in KINDS:
        raise TileOpError(f"T.reduce: unknown reduce_type '{reduce_type}', expected one of {KINDS}")
    s, d = to_region(src), to_region(dst)
    return tirx.call_intrin("handle", "tilex.reduce", s.to_call(READ), d.to_call(READ_WRITE),
                            KINDS.index(reduce_type), int(dim), int(bool(clear)))


def combine(kind, a, b):
    """`a` and `b` combined by the reduction `kind` (sum / abssum: +, max / absmax, min, bitwise)."""
    if kind in ("sum", "abssum"):
        return a + b
    if kind in ("max", "absmax"):
        return tirx.max(a, b)
    if kind == "bitand":
        return tirx.bitwise_and(a, b)
    if kind == "bitor":
        return tirx.bitwise_or(a, b)
    if kind == "bitxor":
        return tirx.bitwise_xor(a, b)
    return tirx.min(a, b)


def identity_value(kind, dtype):
    """The starting value of a reduction `kind` in `dtype` (0, the lowest / highest value, every bit set)."""
    if kind in ("sum", "abssum", "bitor", "bitxor"):
        return tirx.const(0, dtype)
    if kind == "bitand":  # every bit set
        return tirx.max_value(dtype) if dtype.startswith("uint") else tirx.const(-1, dtype)
    if kind == "max":
        return tirx.min_value(dtype)
    if kind == "absmax":
        return tirx.const(0, dtype)
    return tirx.max_value(dtype)


def is_integer_dtype(dtype) -> bool:
    """Whether `dtype` is a scalar signed or unsigned integer (not bool)."""
    t = tvm.DataType(str(dtype))
    return t.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) and t.lanes == 1


@register_tile_op("tilex.reduce")
class ReduceOp(TileOp):
    def __init__(self, src: Region, dst: Region, kind: str, dim: int, clear: bool):
        self.src, self.dst, self.kind, self.clear = src, dst, kind, bool(clear)
        s_shape = static_shape(src.buffer.shape, "T.reduce source")
        d_shape = static_shape(dst.buffer.shape, "T.reduce destination")
        if dim < -len(s_shape) or dim >= len(s_shape):
            raise TileOpError(f"T.reduce_{kind}: dim={dim} is out of range for a {len(s_shape)}-d source")
        self.dim = dim % len(s_shape)
        want = [e for d, e in enumerate(s_shape) if d != self.dim] or [1]
        if [e for e in d_shape if True] != want and [e for e in d_shape if e != 1] != [e for e in want if e != 1]:
            raise TileOpError(f"T.reduce_{kind}: reducing {src.buffer.name}{s_shape} over dim {self.dim} gives "
                              f"{want}, but the destination {dst.buffer.name} is {d_shape}")
        self.s_shape, self.d_shape = s_shape, d_shape
        if not (is_fragment(dst.buffer) or is_shared(dst.buffer)):
            raise TileOpError(f"T.reduce_{kind}: the destination must be a fragment or shared memory, "
                              f"got '{dst.buffer.name}' in {dst.buffer.scope()}")
        if not (is_fragment(src.buffer) or is_shared(src.buffer)):
            raise TileOpError(f"T.reduce_{kind}: the source must be a fragment or shared memory, "
                              f"got '{src.buffer.name}' in {src.buffer.scope()}")
        if kind in BITWISE_KINDS and not (is_integer_dtype(src.buffer.dtype) and is_integer_dtype(dst.buffer.dtype)):
            raise TileOpError(f"T.reduce_{kind}: a bitwise reduction needs integer tiles, got '{src.buffer.name}' "
                              f"({src.buffer.dtype}) -> '{dst.buffer.name}' ({dst.buffer.dtype})")

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]), KINDS[int(call.args[2].value)],
                   int(call.args[3].value), int(call.args[4].value))

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def reads_writes(self, buffer):
        if buffer.same_as(self.dst.buffer):
            return not (self.clear and self.dst.is_whole()), True
        return True, False

    def takes_shared(self, buffer):
        return buffer.same_as(self.src.buffer)

    def describe(self):
        return f"T.reduce_{self.kind}({self.src.buffer.name} -> {self.dst.buffer.name}, dim={self.dim})"

    # ---- layout inference -------------------------------------------------------------------------------------
    def _projected(self, src_layout):
        lay, _ = project(src_layout, [self.dim])
        if len(lay.input_shape) != len(self.d_shape):
            lay = _reshape_1(lay, self.d_shape)
        return lay

    def infer_layout(self, ctx, level):
        sb, db = self.src.buffer, self.dst.buffer
        if level == InferLevel.STRICT:
            return {}
        if is_fragment(sb):
            s_lay = ctx.layout_map.get(sb)
            if s_lay is None:
                if level == InferLevel.FREE:
                    plan = coalesced_plan(self.s_shape, ctx.threads, 1)
                    if plan is None:
                        raise TileOpError(f"{self.describe()}: cannot lay out {self.s_shape} over {ctx.threads} threads")
                    return {sb: plan}
                return {}
            if not is_fragment(db):
                return {}  # a shared destination: stored from registers laid out as the projection
            want = self._projected(s_lay)
            have = ctx.layout_map.get(db)
            # against a layout the result already has: a conflict for inference to settle
            return {} if have is not None and have.is_equal(want) else {db: want}
        if is_fragment(db) and ctx.layout_map.get(db) is None and level == InferLevel.FREE:
            plan = coalesced_plan(self.d_shape, ctx.threads, 1)
            if plan is None:
                raise TileOpError(f"{self.describe()}: cannot lay out {self.d_shape} over {ctx.threads} threads")
            return {db: plan}
        return {}

    # ---- lowering ---------------------------------------------------------------------------------------------
    def lower(self, ctx):
        if is_shared(self.src.buffer):
            return self._lower_from_shared(ctx)
        return self._lower_fragment(ctx)

    def _value(self, v):
        return tirx.abs(v) if self.kind in ("abssum", "absmax") else v

    def _lower_fragment(self, ctx):
        sb, db = self.src.buffer, self.dst.buffer
        F = ctx.layout_map[sb]
        P, rep_terms = project(F, [self.dim])
        to_shared = not is_fragment(db)
        if to_shared:  # the result in registers laid out as the projection, then stored
            D = _reshape_1(P, self.d_shape) if len(P.input_shape) != len(self.d_shape) else P
        else:
            D = ctx.layout_map[db]
            if not D.is_equal(_reshape_1(P, self.d_shape) if len(P.input_shape) != len(self.d_shape) else P):
                raise TileOpError(f"{self.describe()}: destination layout {D} is not the projection {P} of {F}")
        _check_digits(P, rep_terms, self.describe())
        dtype = str(db.dtype)
        src_loc = ctx.remap[sb]
        dst_loc = None if to_shared else ctx.remap[db]
        n = D.local_size
        in_place = self.clear and not to_shared
        acc = dst_loc if in_place else tirx.decl_buffer((n,), dtype, "red_acc", scope="local")
        stmts = [] if in_place else [tirx.AllocBuffer(acc)]
        s = tirx.Var("rs", "int32")
        stmts.append(tirx.For(s, 0, n, tirx.ForKind.UNROLLED,
                              tirx.BufferStore(acc, identity_value(self.kind, dtype), [s])))
        keep = [d for d in range(len(self.s_shape)) if d != self.dim]

        def make(ix, _g, l_flat):
            kept = [ix[d] for d in keep] or [tirx.const(0, "int32")]
            slot = D.local_offset(self._to_dst(kept), ctx.analyzer)
            v = tirx.BufferLoad(src_loc, [l_flat])
            if str(sb.dtype) != dtype:
                v = tirx.Cast(dtype, v)
            return tirx.BufferStore(acc, combine(self.kind, tirx.BufferLoad(acc, [slot]), self._value(v)), [slot])

        stmts.append(emit_by_fragment(ctx, F, 1, make, name="red", bounds=self.s_shape))
        # power-of-two fields inside a warp combine by xor shuffles; anything else goes through shared memory
        fields = [(sc, e) for sc, e, _ in rep_terms]
        warp_terms = [(sc, e) for sc, e in fields if sc * e <= 32 and _pow2(sc) and _pow2(e)]
        block_terms = [(sc, e) for sc, e in fields if (sc, e) not in warp_terms]
        for sc, e in warp_terms:
            off = sc
            while off < sc * e:
                sh = intrin.shfl_xor(dtype, tirx.BufferLoad(acc, [s]), off)
                stmts.append(tirx.For(s, 0, n, tirx.ForKind.UNROLLED,
                                      tirx.BufferStore(acc, combine(self.kind, tirx.BufferLoad(acc, [s]), sh), [s])))
                off *= 2
        if block_terms:
            stmts.extend(self._cross_warp(ctx, acc, n, dtype, block_terms, P.thread_extent))
        if to_shared:
            stmts.append(self._store_shared(ctx, D, acc))
        elif not self.clear:
            stmts.append(tirx.For(s, 0, n, tirx.ForKind.UNROLLED, tirx.BufferStore(
                dst_loc, combine(self.kind, tirx.BufferLoad(dst_loc, [s]), tirx.BufferLoad(acc, [s])), [s])))
        return tirx.SeqStmt(stmts)

    def _cross_warp(self, ctx, acc, n, dtype, terms, holders):
        threads = ctx.threads
        if n * threads * tvm.DataType(dtype).bits // 8 > MAX_WORKSPACE:
            raise TileOpError(f"{self.describe()}: a cross-warp reduction of {n} values per thread needs more than "
                              f"48 KB of shared workspace; use fewer rows per block")
        t = ctx.thread_var
        ws = tirx.decl_buffer((n * threads,), dtype, "red_ws", scope="shared.dyn")
        s = tirx.Var("ws_s", "int32")
        write = tirx.For(s, 0, n, tirx.ForKind.UNROLLED,
                         tirx.BufferStore(ws, tirx.BufferLoad(acc, [s]), [s * threads + t]))
        base = t
        for sc, e in terms:
            # clear this digit field of the thread id (written without `t - t % x`, which trips TVM's simplifier
            # under `t < x` constraints)
            base = tirx.floordiv(base, sc * e) * (sc * e) + tirx.floormod(base, sc)
        total = int(np.prod([e for _, e in terms]))
        r = tirx.Var("ws_r", "int32")
        partner = base
        radix = 1
        for sc, e in terms:
            partner = partner + tirx.floormod(tirx.floordiv(r, radix), e) * sc
            radix *= e
        tmp = tirx.decl_buffer((n,), dtype, "red_tmp", scope="local")
        read = [
            tirx.For(s, 0, n, tirx.ForKind.UNROLLED, tirx.BufferStore(tmp, identity_value(self.kind, dtype), [s])),
            tirx.For(r, 0, total, tirx.ForKind.UNROLLED, tirx.For(s, 0, n, tirx.ForKind.UNROLLED, tirx.BufferStore(
                tmp, combine(self.kind, tirx.BufferLoad(tmp, [s]), tirx.BufferLoad(ws, [s * threads + partner])),
                [s]))),
            tirx.For(s, 0, n, tirx.ForKind.UNROLLED, tirx.BufferStore(acc, tirx.BufferLoad(tmp, [s]), [s])),
        ]
        if holders < threads:
            # threads that hold no element have no group; keep their partner reads inside the workspace
            read = [tirx.IfThenElse(t < holders, tirx.SeqStmt(read), None)]
        sync = storage_sync("shared")
        # barriers: before writing (earlier readers of a reused workspace), between write and read, after reading
        return [tirx.AllocBuffer(ws), tirx.AllocBuffer(tmp), sync, write, sync] + read + [sync]

    def _kept_shape(self):
        return [e for d, e in enumerate(self.s_shape) if d != self.dim]

    def _to_dst(self, kept):
        """Destination indices of the element at kept source indices `kept` (the destination's shape may add or
        drop unit dimensions: [X, Y] or [X, 1, Y] for a reduced middle dimension)."""
        want = self._kept_shape() or [1]
        if list(self.d_shape) == want:
            return list(kept)
        vals = [k for k, e in zip(kept, want) if e != 1]
        return [vals.pop(0) if e != 1 else tirx.const(0, "int32") for e in self.d_shape]

    def _from_dst(self, ix):
        """The kept source indices of destination element `ix` (the inverse of `_to_dst`)."""
        want = self._kept_shape()
        if list(self.d_shape) == (want or [1]):
            return list(ix[: len(want)])
        vals = [i for i, e in zip(ix, self.d_shape) if e != 1]
        return [vals.pop(0) if e != 1 else tirx.const(0, "int32") for e in want]

    def _dst_index(self, ix):
        """Buffer indices of the destination element `ix` (given over the destination's shape)."""
        return [m + i for m, i in zip(self.dst.mins, ix)]

    def _store_shared(self, ctx, D, acc):
        """Store the result held in `acc` (registers laid out as `D`) into the shared destination: one thread of
        each replica group writes an element; clear=False combines it with the element's value."""
        db, t = self.dst.buffer, ctx.thread_var

        def make(ix, _g, l_flat):
            v = tirx.BufferLoad(acc, [l_flat])
            if not self.clear:
                v = combine(self.kind, ctx.load(db, self._dst_index(ix)), v)
            store = ctx.store(db, v, self._dst_index(ix))
            if int(D.replicate) > 1:
                store = tirx.IfThenElse(ctx.analyzer.simplify(D.map_thread(list(ix), 0) == t), store, None)
            return store

        return emit_by_fragment(ctx, D, 1, make, name="red_st", bounds=self.d_shape)

    def _cooperative_group(self, ctx) -> int:
        """How many threads reduce each destination element of a shared source together (a power of two up to a
        warp: the block's threads over the elements), or 0 when it does not pay (fewer than 4, rows shorter than 16)
        or the block is not whole warps."""
        try:
            rows = int(np.prod([int(e) for e in self.d_shape]))
            length = int(self.s_shape[self.dim])
        except (TypeError, ValueError):
            return 0
        if ctx.threads % 32 or length < 16:  # whole warps shuffle; a short row is not worth two barriers
            return 0
        group = min(32, ctx.threads // max(rows, 1), length)
        group = 1 << (group.bit_length() - 1) if group > 0 else 0
        return group if group >= 4 else 0

    def _lower_cooperative(self, ctx, group):
        """A shared source reduced by groups of `group` lanes: the block's threads take destination elements in
        turn (``t // group``), each lane folds every `group`-th element of its row, xor shuffles combine the group,
        and its first lane publishes the result -- into the shared destination, or through a shared workspace to
        the threads that hold the element of the fragment destination (they then combine or store it)."""
        sb, db = self.src.buffer, self.dst.buffer
        dtype = str(db.dtype)
        rows = int(np.prod([int(e) for e in self.d_shape]))
        length = int(self.s_shape[self.dim])
        t = ctx.thread_var
        row = tirx.min(tirx.floordiv(t, group), rows - 1)  # threads past the last group compute a copy of it
        lane = tirx.floormod(t, group)
        ix, rest = [], row
        for e in reversed([int(e) for e in self.d_shape]):
            ix.insert(0, tirx.floormod(rest, e))
            rest = tirx.floordiv(rest, e)
        part = tirx.decl_buffer((1,), dtype, "red_part", scope="local")
        j = tirx.Var("rj", "int32")
        full = self._from_dst(ix)
        full.insert(self.dim, lane + j * group)
        v = ctx.load(sb, self.src.index(full))
        if str(sb.dtype) != dtype:
            v = tirx.Cast(dtype, v)
        zero = tirx.const(0, "int32")
        steps = (length + group - 1) // group
        fold = tirx.BufferStore(part, combine(self.kind, tirx.BufferLoad(part, [zero]), self._value(v)), [zero])
        if steps * group != length:
            fold = tirx.IfThenElse(lane + j * group < length, fold, None)
        stmts = [tirx.AllocBuffer(part), tirx.BufferStore(part, identity_value(self.kind, dtype), [zero]),
                 tirx.For(j, 0, steps, tirx.ForKind.UNROLLED if steps <= 8 else tirx.ForKind.SERIAL, fold)]
        off = group // 2
        while off >= 1:
            sh = intrin.shfl_xor(dtype, tirx.BufferLoad(part, [zero]), off)
            stmts.append(tirx.BufferStore(part, combine(self.kind, tirx.BufferLoad(part, [zero]), sh), [zero]))
            off //= 2
        first = tirx.And(lane == 0, t < rows * group)
        result = tirx.BufferLoad(part, [zero])
        if not is_fragment(db):  # the first lane stores (combines with) the shared element itself
            dst_ix = self._dst_index(ix)
            value = result if self.clear else combine(self.kind, ctx.load(db, dst_ix), result)
            stmts.append(tirx.IfThenElse(first, ctx.store(db, value, dst_ix), None))
            return tirx.SeqStmt(stmts)
        if rows * tvm.DataType(dtype).bits // 8 > MAX_WORKSPACE:
            return None
        ws = tirx.decl_buffer((rows,), dtype, "red_ws", scope="shared.dyn")
        sync = storage_sync("shared")
        # barriers: before writing (readers of the workspace in an earlier pass), between writing and reading
        stmts = [tirx.AllocBuffer(ws), sync] + stmts + [tirx.IfThenElse(first, tirx.BufferStore(ws, result, [row]),
                                                                          None), sync]
        D = ctx.layout_map[db]
        dst_loc = ctx.remap[db]

        def owner(dix, _g, l_flat):
            got = tirx.BufferLoad(ws, [row_major_offset(dix, [int(e) for e in self.d_shape])])
            value = got if self.clear else combine(self.kind, tirx.BufferLoad(dst_loc, [l_flat]), got)
            return tirx.BufferStore(dst_loc, value, [l_flat])

        stmts.append(emit_by_fragment(ctx, D, 1, owner, name="red", bounds=self.d_shape))
        return tirx.SeqStmt(stmts)

    def _lower_from_shared(self, ctx):
        sb, db = self.src.buffer, self.dst.buffer
        group = self._cooperative_group(ctx)
        if group:
            out = self._lower_cooperative(ctx, group)
            if out is not None:
                return out
        to_shared = not is_fragment(db)
        # a shared destination: each of a coalesced set of threads computes and stores whole elements
        D = coalesced_plan(self.d_shape, ctx.threads, 1) if to_shared else ctx.layout_map[db]
        dtype = str(db.dtype)
        dst_loc = tirx.decl_buffer((1,), dtype, "red_val", scope="local") if to_shared else ctx.remap[db]
        j = tirx.Var("rj", "int32")

        def make(ix, _g, l_flat):
            slot = tirx.const(0, "int32") if to_shared else l_flat
            if self.clear:
                acc = identity_value(self.kind, dtype)
            else:
                acc = ctx.load(db, self._dst_index(ix)) if to_shared else tirx.BufferLoad(dst_loc, [slot])
            full = self._from_dst(ix)
            full.insert(self.dim, j)
            v = ctx.load(sb, self.src.index(full))
            if str(sb.dtype) != dtype:
                v = tirx.Cast(dtype, v)
            upd = tirx.BufferStore(dst_loc, combine(self.kind, tirx.BufferLoad(dst_loc, [slot]), self._value(v)),
                                   [slot])
            stmts = [tirx.BufferStore(dst_loc, acc, [slot]),
                     tirx.For(j, 0, self.s_shape[self.dim], tirx.ForKind.SERIAL, upd)]
            if to_shared:
                stmts.append(ctx.store(db, tirx.BufferLoad(dst_loc, [slot]), self._dst_index(ix)))
            return tirx.SeqStmt(stmts)

        body = emit_by_fragment(ctx, D, 1, make, name="red", bounds=self.d_shape)
        return tirx.SeqStmt([tirx.AllocBuffer(dst_loc), body]) if to_shared else body


def _reshape_1(lay, shape):
    """Same fragment over `shape` when it differs from lay.input_shape only by unit dimensions."""
    if len([e for e in shape if e != 1]) != len([e for e in lay.input_shape if e != 1]):
        raise TileOpError(f"cannot view {lay} as shape {shape}")
    pos = [d for d, e in enumerate(shape) if e != 1]
    # keep the fragment's (possibly padded) extents on the non-unit dimensions
    shape = list(shape)
    for d, e in zip(pos, [e for e in lay.input_shape if e != 1]):
        shape[d] = e

    def pick(vs):
        return [vs[d] for d in pos] or [tirx.const(0, "int32")]

    rep = int(lay.replicate)
    if rep > 1:
        return Fragment(shape, lambda *a: lay.map_thread(pick(a[:-1]), a[-1]), lambda *a: lay.map_index(pick(a)),
                        replicate=rep)
    return Fragment(shape, lambda *a: lay.map_thread(pick(a)), lambda *a: lay.map_index(pick(a)))


def _pow2(x):
    return x > 0 and x & (x - 1) == 0


def _check_digits(P, rep_terms, what):
    """Replica r of element y must sit at thread ``base(y) + sum(digit_k(r) * scale_k)`` with
    ``digit_k(r) == (thread // scale_k) % extent_k``, so that combining partners can be found from a thread id
    alone (xor shuffles, shared-memory partners). Checked by enumeration."""
    grids = np.meshgrid(*[np.arange(s) for s in P.input_shape], indexing="ij")
    for sc, e, radix in rep_terms:
        for r in range(int(P.replicate)):
            t, _ = P.map_numpy(*grids, rep=r)
            if not np.all((np.asarray(t) // sc) % e == (r // radix) % e):
                raise TileOpError(f"{what}: the threads sharing a reduced row are not a mixed-radix group of "
                                  f"thread ids; this source layout is not supported by reduce yet")
