"""InjectSoftwarePipeline: software-pipeline ``T.Pipelined`` loops (multi-buffered shared tiles, overlapped loads).

Consumes: tile-level IR (before layout inference). A loop annotated ``tilex.num_stages = S`` may carry an explicit
schedule, ``tilex.pipeline_stage`` / ``tilex.pipeline_order``: for each top-level statement i of the loop body the
stage it runs in (statement i of iteration k runs in slot k + stage[i]) and its position in the steady-state body.
Produces: tile-level IR in which each such loop is rewritten (its pipeline annotations dropped) by the schedule
:func:`~tilex.transform.pipeline.schedule.schedule` picks for it:

* a derived plan on sm_90a that :func:`~tilex.transform.hopper.ws_decision.warp_specializable` accepts, in a kernel
  where no other loop is accepted (the producer warpgroup runs one loop): producer and consumer loops for
  WarpSpecialize (:mod:`tilex.transform.hopper.ws_loops` for a GEMM main loop,
  :mod:`tilex.transform.hopper.ws_groups` when the consumers compute between their MMAs, as attention does);
* any other derived plan (every loop of a kernel with several warp-specializable ones): the cp.async pipeline
  (:mod:`.cp_async`);
* an explicit schedule: :mod:`.explicit`;
* none (the loop does not fit a plan): the loop is left serial (still correct, not overlapped).

Tiles allocated inside a pipelined loop's body are allocated before the loop first, and a per-iteration scalar the
body computes at its top (``j = d + i_ts``) is read as its value (:mod:`.iteration_scalars`) when the pipeline that
this allows still leaves SCALAR_PIPELINE_ROOM of the block's shared memory free (otherwise the loops are built as
written, as they fitted before). The pipelined shared buffers
are allocated once with the most stages any loop wants. If one of them is also used
outside its pipelined loop, or has a T.view, the kernel keeps its original, serial loops. A program that
synchronizes itself (`tilex.transform.hopper.ws_decision.manual_synchronization`: T.ws, its own mbarriers,
T.tma_copy, ...) keeps all its loops as written (serial), and the function attribute
``tilex.manual_synchronization`` says why.
"""
from __future__ import annotations

import warnings

from tvm import tirx

from tilex.ir.names import MANUAL_SYNC_ATTR, NUM_STAGES
from tilex.ir.shared_memory import shared_usage
from tilex.ir.visit import buffers_used, map_nodes, mutate, seq, seq_items, walk
from tilex.transform.hopper import ws_groups, ws_loops
from tilex.transform.hopper.occupancy import fits_block
from tilex.transform.hopper.ws_decision import manual_synchronization, warp_specializable
from tilex.transform.kernel_scope import kernel_info
from tilex.transform.op_collect import collect_views
from tilex.transform.pipeline import cp_async, explicit
from tilex.transform.pipeline.analysis import strip_annotations, viewing
from tilex.transform.pipeline.context import PipelineContext
from tilex.transform.pipeline.iteration_scalars import inline_iteration_scalars
from tilex.transform.pipeline.schedule import DerivedPlan, schedule


#: shared memory a pipeline that iteration scalars enable must leave free for what later passes add (reduction and
#: layout-conversion workspaces, mbarriers, alignment)
SCALAR_PIPELINE_ROOM = 8 * 1024


def inject_pipeline(func, target=None):
    with viewing(func.body):  # writes through a fragment's T.view are writes of the fragment
        reason = manual_synchronization(func.body)
        if reason is not None:  # compiled as written: its T.Pipelined loops run serially
            body = mutate(func.body, (tirx.For, lambda n, m: _strip_all(n, m)))
            return func.with_body(body).with_attr(MANUAL_SYNC_ATTR, reason)
        func = func.with_body(_hoist_loop_allocations(func.body))
        inlined = func.with_body(inline_iteration_scalars(func.body))
        if inlined.body.same_as(func.body):
            return _inject(func, target)
        # the loops that reading iteration scalars as their values lets pipeline multi-buffer more tiles: kept only
        # when the block still fits with room to spare (else the loops run as before, which the program fitted)
        out = _inject(inlined, target)
        if _fits_with_room(out, target) or not _fits_with_room(plain := _inject(func, target), target):
            return out
        return plain


def _fits_with_room(func, target):
    usage, unknown = shared_usage(func.body)
    if unknown or target is None:
        return not unknown
    return fits_block(usage["static"], usage["dynamic"] + SCALAR_PIPELINE_ROOM, target)


def _inject(func, target):
    """The loops of `func` (allocations hoisted; not synchronizing itself) pipelined."""
    info = kernel_info(func)
    allocs = {}

    def on_alloc(n):
        allocs[n.buffer] = n

    walk(func.body, (tirx.AllocBuffer, on_alloc))
    ctx = PipelineContext(allocs, info.threads if info is not None else None, target,
                          info.thread_var if info is not None else None, _top_level_loops(func.body), func.body)
    explicit_loops = []
    specializable = []

    def size(node):
        # every loop's schedule first: a buffer two loops multi-buffer is allocated with the larger count
        if NUM_STAGES in node.annotations:
            sched = schedule(ctx, node)
            for b, v in (sched.buffer_versions() if sched is not None else {}).items():
                ctx.depth[b] = max(v, ctx.depth.get(b, 0))
            if isinstance(sched, DerivedPlan) and warp_specializable(ctx, node, sched):
                specializable.append(node)

    walk(func.body, (tirx.For, size))
    # the producer warpgroup runs one pipelined loop: a kernel with several that qualify keeps them all on cp.async
    one_producer = len(specializable) <= 1

    def on_for(node, m):
        body = m.mutate(node.body)
        if not body.same_as(node.body):
            node = tirx.For(node.loop_var, node.min, node.extent, node.kind, body, node.thread_binding,
                            node.annotations)
        if NUM_STAGES not in node.annotations:
            return node
        sched = schedule(ctx, node)
        if sched is None:
            return strip_annotations(node)
        if not isinstance(sched, DerivedPlan):
            explicit_loops.append(node)
            return explicit.rewrite(ctx, node, sched)
        if one_producer and warp_specializable(ctx, node, sched):
            if sched.leading and ctx.async_consumer(sched.consumers):
                return ws_loops.rewrite(ctx, node, sched)  # a GEMM main loop
            return ws_groups.rewrite(ctx, node, sched)
        return cp_async.rewrite(ctx, node, sched)

    body = mutate(func.body, (tirx.For, on_for))
    if not ctx.multi:
        return func.with_body(body) if not body.same_as(func.body) else func
    # a multi-buffered buffer must not be used anywhere else in its old form (a T.view of it reads that form too)
    leftover = (buffers_used(body) | {view.base for _, view in collect_views(body)}) & set(ctx.multi)
    if leftover:
        # used outside its pipelined loop: keep the original program (serial, correct)
        if explicit_loops:
            warnings.warn(f"T.Pipelined: shared buffer(s) {', '.join(sorted(b.name for b in leftover))} are used "
                          f"outside their pipelined loop and cannot be multi-buffered; the loops run unpipelined",
                          stacklevel=2)
        body = mutate(func.body, (tirx.For, lambda n, m: _strip_all(n, m)))
        return func.with_body(body)
    body = map_nodes(body, (tirx.AllocBuffer, lambda n: tirx.AllocBuffer(ctx.multi[n.buffer])
                                                  if n.buffer in ctx.multi else n))
    return func.with_body(body)


def _hoist_loop_allocations(body):
    """Each AllocBuffer among the top-level statements of a T.Pipelined loop's body moved to just before the loop
    (TileLang programs allocate a loop's tiles inside it): a pipeline's prologue and stages use the tiles outside
    that body, where an allocation in it does not reach. The tiles are the same either way (an allocation neither
    initializes nor frees anything)."""

    def on_seq(node, m):
        out, changed = [], False
        for s in node.seq:
            new = m.mutate(s)
            changed = changed or not new.same_as(s)
            if isinstance(new, tirx.For) and NUM_STAGES in new.annotations:
                items = seq_items(new.body)
                allocs = [x for x in items if isinstance(x, tirx.AllocBuffer)]
                if allocs and len(allocs) < len(items):
                    rest = [x for x in items if not isinstance(x, tirx.AllocBuffer)]
                    out.extend(allocs)
                    new = tirx.For(new.loop_var, new.min, new.extent, new.kind, seq(rest), new.thread_binding,
                                   new.annotations)
                    changed = True
            out.append(new)
        return tirx.SeqStmt(out) if changed else node

    return mutate(body, (tirx.SeqStmt, on_seq))


def _top_level_loops(body):
    """For loops that are direct children of the innermost launch scope's statement list."""
    node = body
    while isinstance(node, tirx.AttrStmt):
        node = node.body
    return [s for s in seq_items(node) if isinstance(s, tirx.For)]


def _strip_all(node, m):
    body = m.mutate(node.body)
    node = tirx.For(node.loop_var, node.min, node.extent, node.kind, body, node.thread_binding, node.annotations)
    return strip_annotations(node) if NUM_STAGES in node.annotations else node
