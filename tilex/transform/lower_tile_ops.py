"""LowerTileOps: replace every tile operator by per-thread TIR, and give buffers their physical form.

Consumes: a PrimFunc annotated by LayoutInference (``tilex.layout_map``, ``tilex.loop_layout``).
Produces: plain TIR: shared buffers become 1-d buffers addressed through their layouts (swizzles applied), register
fragments become per-thread ``local`` arrays of their Fragment's local size, tile-op calls and T.Parallel nests
become thread-partitioned loops, cp.async/ldmatrix/mma calls into ``src/tilex/*.h``. Inside a thread region
(``tilex.thread_range``: T.ws, a branch on the thread index) operators run on the region's threads, counted from
its first (`tilex.transform.thread_regions`), and a TMA store's issuing thread waits for its reads before the
region goes on; ``T.access_ptr`` becomes the element's ``tvm_access_ptr`` in the buffer's physical form. In a
program that synchronizes itself, a T.gemm whose shared operands only TMA loads write runs without a fence and
barrier of its own (the program's mbarrier wait ordered them).
"""
from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import (ACCESS_PTR_OP, ASYNC_MMA_SCOPE, ASYNC_MMA_WS_SYNC, LAYOUT_MAP_ATTR, LOOP_LAYOUT_ATTR,
                            MANUAL_SYNC_ATTR, REDUCER_MARKER, SHARED_USED_BYTES, THREAD_RANGE, USE_SWIZZLE_OP)
from tilex.ir.source import add_location, span_of
from tilex.ir.visit import BufferLoadNode, is_op_call, map_nodes, mutate, seq_items, walk
from tilex.layout.codec import decode
from tilex.op.atomic import expose_shared_atomics
from tilex.op.base import LowerContext, TileOpError, is_fragment, is_shared
from tilex.op.explicit_async import TmaCopyOp, tma_only_tiles
from tilex.op.gemm import GemmOp
from tilex.op.parallel import ParallelOp
from tilex.op.reducer import reducers_of
from tilex.op.registry import parse_tile_op
from tilex.transform.kernel_scope import kernel_info
from tilex.transform.op_collect import collect_views, is_parallel_nest
from tilex.transform.thread_regions import complete_bulk_stores, region_thread

#: tilex ops that may remain in a program after its tile operators are lowered (a later pass consumes them)
_MARKERS_AFTER_LOWERING = (USE_SWIZZLE_OP,)


def _allocated_buffers(body):
    out = []
    walk(body, (tirx.AllocBuffer, lambda n: out.append(n.buffer)))
    return out


def _tile_ops(body):
    """The tile operators of `body` that parse (one that does not is reported where it is lowered, located)."""
    ops = []

    def on_eval(node):
        if isinstance(node.value, tvm.ir.Call):
            try:
                op = parse_tile_op(node.value)
            except Exception:  # noqa: BLE001 - reported by its lowering, with the user's line
                op = None
            if op is not None:
                ops.append(op)

    walk(body, (tirx.Evaluate, on_eval))
    return ops


def _shared_elems(buf, layout_map):
    lay = layout_map.get(buf)
    return math.prod(lay.output_shape) if lay is not None else math.prod(int(s) for s in buf.shape)


def _physical_buffers(buffers, layout_map, staged_tiles=False):
    remap = {}
    # swizzled tiles (a layout, whole KBs) need 1 KB-aligned addresses; dynamic shared memory is merged by packing
    # buffers one after another, so once such tiles exist (declared, or `staged_tiles`: allocated by a tile
    # operator's lowering) every other dynamic shared buffer is padded to whole KBs (static `shared` arrays such as
    # mbarriers live outside that pool)
    kb_tiles = staged_tiles or any(
        b.scope() == "shared.dyn" and layout_map.get(b) is not None
        and _shared_elems(b, layout_map) * tvm.DataType(str(b.dtype)).bits % (8 * 1024) == 0 for b in buffers)
    for buf in buffers:
        lay = layout_map.get(buf)
        if is_shared(buf):
            size = _shared_elems(buf, layout_map)
            bits = tvm.DataType(str(buf.dtype)).bits
            if kb_tiles and buf.scope() == "shared.dyn" and size * bits % (8 * 1024):
                per_kb = 8 * 1024 // bits
                size = (size + per_kb - 1) // per_kb * per_kb
            remap[buf] = tirx.decl_buffer((size,), buf.dtype, buf.name, scope=buf.scope())
        elif is_fragment(buf):
            if lay is None:
                raise TileOpError(f"fragment '{buf.name}' has no layout (is it used by any tile operator?)")
            remap[buf] = tirx.decl_buffer((lay.local_size,), buf.dtype, buf.name, scope="local")
    return remap


def lower_tile_ops(func, target=None):
    info = kernel_info(func)
    if info is None:
        return func
    enc = func.attrs.get(LAYOUT_MAP_ATTR) if func.attrs is not None else None
    layout_map = {b: decode(v) for b, v in enc.items()} if enc is not None else {}
    ctx = LowerContext(layout_map=layout_map, thread_var=info.thread_var, threads=info.threads, target=target,
                       analyzer=tvm.sym.Analyzer(), remap={}, reducers=frozenset(reducers_of(func.body)))
    staged = any(op.stages_swizzled_shared(ctx) for op in _tile_ops(func.body))
    remap = ctx.remap = _physical_buffers(_allocated_buffers(func.body), layout_map, staged)
    views = [op for _, op in collect_views(func.body)]
    for op in views:  # a shared tile's view: the same shared memory as its base's (one tile for barriers and planning)
        remap[op.view] = op.physical_view(remap[op.base]) if is_shared(op.view) else \
            _physical_buffers([op.view], layout_map)[op.view]
    ctx.analyzer.bind(info.thread_var, tvm.ir.Range(0, info.threads), allow_override=True)
    for var, ext in info.block_extents.items():
        ctx.analyzer.bind(var, tvm.ir.Range(0, ext), allow_override=True)
    # a program that synchronizes itself: its MMAs on tiles only TMA writes need no fence or barrier of their own
    manual = func.attrs is not None and MANUAL_SYNC_ATTR in func.attrs
    ctx.async_only = tma_only_tiles(func.body) if manual else frozenset()
    regions = []  # the thread regions being lowered, innermost last

    def on_eval(node, m):
        if is_op_call(node.value, REDUCER_MARKER):  # read above (ctx.reducers); no code
            return tirx.Evaluate(tirx.const(0, "int32"))
        op = parse_tile_op(node.value) if isinstance(node.value, tvm.ir.Call) else None
        if op is None:
            _check_not_tile_op(node.value)
            return node
        before = ctx.async_mma
        if manual and type(op) is GemmOp and not before and \
                all(r.buffer in ctx.async_only for r in (op.A, op.B) if is_shared(r.buffer)):
            ctx.async_mma = ASYNC_MMA_WS_SYNC
        try:
            stmt = _lower_located(op, ctx, span_of(node.value, node))
        finally:
            ctx.async_mma = before
        if regions and not isinstance(op, TmaCopyOp):
            stmt = complete_bulk_stores(stmt)  # its issuing thread is the region's: waits before the tile changes
        return stmt

    def on_for(node, m):
        if is_parallel_nest(node):
            op = ParallelOp(node)
            if LOOP_LAYOUT_ATTR in node.annotations:
                op.loop_layout = decode(node.annotations[LOOP_LAYOUT_ATTR])
            return _lower_located(op, ctx, span_of(node))
        ctx.analyzer.bind(node.loop_var, tvm.ir.Range.from_min_extent(node.min, node.extent), allow_override=True)
        body = m.mutate(node.body)
        if body.same_as(node.body):
            return node
        return tirx.For(node.loop_var, node.min, node.extent, node.kind, body, node.thread_binding,
                        node.annotations)

    def on_alloc(node, m):
        phys = remap.get(node.buffer)
        if phys is None:
            return node
        if is_shared(node.buffer) and int(phys.shape[0]) != _shared_elems(node.buffer, layout_map):
            # padded to whole KB: the bytes it uses ride along for a placement of tilex's own (shared_reuse)
            used = _shared_elems(node.buffer, layout_map) * tvm.DataType(str(phys.dtype)).bits // 8
            return tirx.AllocBuffer(phys, annotations={SHARED_USED_BYTES: tirx.const(used, "int64")})
        return tirx.AllocBuffer(phys)

    def on_decl(node, m):
        op = next((v for v in views if v.view.same_as(node.buffer)), None)
        if op is None:
            return node
        # the view's registers (shared memory) are the base's: declared over its local array (its shared buffer)
        return tirx.DeclBuffer(remap[op.view], data=remap[op.base].data)

    def on_attr(node, m):
        if node.attr_key == THREAD_RANGE:  # a region: its operators run on its threads, counted from its first
            regions.append(node)
            try:
                with region_thread(ctx, node, info.thread_var) as in_block:
                    body = in_block(m.mutate(node.body))
            finally:
                regions.pop()
            return tirx.AttrStmt(node.node, node.attr_key, node.value, body)
        if node.attr_key != ASYNC_MMA_SCOPE:
            body = m.mutate(node.body)
            return node if body.same_as(node.body) else tirx.AttrStmt(node.node, node.attr_key, node.value, body)
        ctx.async_mma = int(node.value.value)
        try:
            return _merge_wgmma_groups(m.mutate(node.body))
        finally:
            ctx.async_mma = 0

    def on_if(node, m):
        # facts guarded by the condition (e.g. k + S - 1 < n in a pipeline) let guards inside fold away
        with ctx.analyzer.constraint_scope(node.condition):
            then_case = m.mutate(node.then_case)
        else_case = m.mutate(node.else_case) if node.else_case is not None else None
        return tirx.IfThenElse(node.condition, then_case, else_case)

    body = mutate(func.body, [(tirx.Evaluate, on_eval), (tirx.For, on_for),
                                                 (tirx.AllocBuffer, on_alloc), (tirx.DeclBuffer, on_decl),
                                 (tirx.IfThenElse, on_if),
                                 (tirx.AttrStmt, on_attr)])
    body = _remap_leftover_accesses(body, ctx, info.block_extents)
    # element atomics on shared memory were built before buffers took their final form: make them visible to
    # ThreadSync (tvm_access_ptr) so it orders them against the plain accesses around them
    body = expose_shared_atomics(body)
    if ctx.host_init:
        # tensor maps are encoded by the host part of the function, before the kernel launch
        body = tirx.SeqStmt(_host_pointers(ctx.host_init, func.body) + [body])
    func = func.with_body(body).without_attr(LAYOUT_MAP_ATTR)
    return func


def _host_pointers(stmts, body):
    """`stmts` (host code) with the data pointer of a global view declared in the kernel body (``T.reshape``,
    ``T.Tensor(shape, dtype, A.data)``) replaced by the data it views, which the host has."""
    views = {}
    walk(body, (tirx.DeclBuffer, lambda d: views.__setitem__(d.buffer, d.data) if str(d.buffer.scope()) in
                ("global", "") else None))
    if not views:
        return stmts

    def on_call(call):
        while is_op_call(call, "tirx.buffer_data") and call.args[0] in views:
            call = views[call.args[0]]
        return call

    return [map_nodes(s, (tvm.ir.Call, on_call)) for s in stmts]


def _lower_located(op, ctx, span):
    """`op.lower(ctx)`; an error it raises names where the user wrote the operator (`span`), keeping its type."""
    try:
        return op.lower(ctx)
    except (ValueError, TypeError, NotImplementedError) as e:
        add_location(e, span)
        raise


def _loop_ranges(body):
    """The range of every loop variable of `body` that heads loops of one range only (a variable that heads two
    loops of different ranges is left out)."""
    ranges, clash = {}, set()

    def on_for(loop):
        rng = tvm.ir.Range.from_min_extent(loop.min, loop.extent)
        seen = ranges.setdefault(loop.loop_var, rng)
        if seen is not rng and not (tvm_ffi.structural_equal(seen.min, rng.min)
                                    and tvm_ffi.structural_equal(seen.extent, rng.extent)):
            clash.add(loop.loop_var)

    walk(body, (tirx.For, on_for))
    return {v: r for v, r in ranges.items() if v not in clash}


def _remap_leftover_accesses(body, ctx, block_extents):
    """Accesses written by the user outside tile ops (e.g. ``A_s[i, j]`` in a serial loop) go through layouts.

    Each physical index is simplified under the ranges of the block's thread and block indices and of the loops
    around it: a swizzled address of ``for v in T.vectorized(8): A_s[r, c * 8 + v]`` then reads as a base plus
    ``v``, which TVM's vectorizer turns into one vector access (left unsimplified, the swizzle's xor hides it and
    the store becomes a lane-wise scatter)."""
    ana = tvm.sym.Analyzer()
    ana.bind(ctx.thread_var, tvm.ir.Range(0, ctx.threads), allow_override=True)
    for var, rng in {**block_extents, **_loop_ranges(body)}.items():
        ana.bind(var, rng if isinstance(rng, tvm.ir.Range) else tvm.ir.Range(0, rng), allow_override=True)

    def check(buf, node):
        if is_fragment(buf):
            lay = ctx.layout_map[buf]
            if not (lay.replicate >= ctx.threads):
                raise add_location(TileOpError(
                    f"fragment '{buf.name}' is accessed outside T.Parallel/tile operators; only a fully replicated "
                    f"fragment can be (use T.alloc_local for per-thread data)"), span_of(node))

    def on_load(n):
        if n.source in ctx.remap:
            check(n.source, n)
            phys, idx = ctx.physical_index(n.source, list(n.indices))
            return tirx.BufferLoad(phys, [ana.simplify(i) for i in idx])
        return n

    def on_call(c):
        if not is_op_call(c, ACCESS_PTR_OP):  # T.access_ptr: the element's address in the buffer's physical form
            return c
        load, extent, mask = c.args
        buf = load.source
        offset = load.indices[0] if len(load.indices) == 1 else buf.offset_of(list(load.indices))[0]
        return buf.access_ptr(int(mask.value), offset=offset, extent=extent)

    def on_store(n):
        if n.buffer in ctx.remap:
            check(n.buffer, n)
            phys, idx = ctx.physical_index(n.buffer, list(n.indices))
            return tirx.BufferStore(phys, n.value, [ana.simplify(i) for i in idx])
        return n

    return map_nodes(body, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store), (tvm.ir.Call, on_call)],
                     order="post")


def _check_not_tile_op(value):
    """A tilex op that is neither a registered tile operator nor a marker a later pass consumes would reach the
    CUDA code generator as an unknown call: say so here."""
    if isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name.startswith("tilex.") \
            and value.op.name not in _MARKERS_AFTER_LOWERING:
        raise add_location(TileOpError(f"'{value.op.name}' is not a registered tile operator (is its module "
                                       f"imported by tilex/op/__init__.py?): {value}"), span_of(value))


def _is_group_seam(items):
    """commit, wait<1>, fence: the end of one asynchronous gemm's wgmma group and the start of the next."""
    return (len(items) == 3 and intrin.is_call(items[0], intrin.WGMMA_COMMIT)
            and intrin.name_of(items[1]) == intrin.name_of(intrin.wgmma_wait(1))
            and intrin.is_call(items[2], intrin.WGMMA_FENCE))


def _merge_wgmma_groups(stmt):
    """Consecutive asynchronous gemms of one pipeline iteration in one wgmma group: drop the commit / wait<1> /
    fence between them. Waiting after each gemm would drain the previous gemm's MMAs while the next one is
    issued, leaving the tensor cores half the iteration's work queued; one group per iteration keeps it all
    queued while the previous iteration's group completes (the wait at the end still covers the stage release)."""
    def flat(s):  # the gemms' statement lists sit in nested SeqStmts
        return [y for x in seq_items(s) for y in flat(x)] if isinstance(s, tirx.SeqStmt) else [s]

    items = flat(stmt)
    keep, i = [], 0
    while i < len(items):
        if _is_group_seam(items[i:i + 3]):
            i += 3
            continue
        keep.append(items[i])
        i += 1
    if len(keep) == len(items):
        return stmt
    return tirx.SeqStmt(keep) if len(keep) > 1 else keep[0]
