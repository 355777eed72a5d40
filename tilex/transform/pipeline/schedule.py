"""Which schedule a ``T.Pipelined`` loop gets.

Derived (no explicit schedule, or one equal to it): the global->shared copies that can be issued iterations
ahead (the leading ones, and later ones whose destination no earlier statement touches:
:func:`producer_indices`) are the producers (stage 0), every other statement a consumer (stage S-1): a
:class:`DerivedPlan`. Anything else given with ``order=`` / ``stage=`` is an explicit schedule, checked by
:func:`tilex.transform.pipeline.explicit.check_explicit`. A loop that fits neither is left serial (None).
"""
from __future__ import annotations

from dataclasses import dataclass

from tilex.ir.names import NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE
from tilex.ir.visit import BufferLoadNode, seq_items, walk
from tilex.op.base import TileOpError, is_global, is_shared
from tilex.op.copy import CopyOp
from tilex.transform.pipeline.analysis import accesses, describe, tile_op, written_shared
from tilex.transform.pipeline.explicit import ExplicitSchedule, check_explicit


@dataclass
class DerivedPlan:
    """The derived schedule of a loop: `stages` buffers per produced shared buffer; `producers` the
    (statement, CopyOp) global->shared copies loaded ahead (in body order); `consumers` the other statements (in
    body order); `produced` the copies' destinations; `leading` whether every producer comes before every
    consumer in the body."""

    stages: int
    producers: list
    consumers: list
    produced: set
    leading: bool = True

    def buffer_versions(self):
        """{shared buffer: versions it needs}."""
        return {b: self.stages for b in self.produced}


def _global_to_shared(ctx, op):
    return (isinstance(op, CopyOp) and is_global(op.src.buffer) and is_shared(op.dst.buffer)
            and op.dst.buffer in ctx.allocs)


def _coordinate_reads(op):
    reads = set()
    for e in [*op.src.mins, *op.src.extents, *op.dst.mins]:
        walk(e, (BufferLoadNode, lambda n: reads.add(n.source)))
    return reads


def producer_indices(ctx, stmts):
    """Indices of the body statements that are loaded ahead: the leading global->shared copies, and any later one
    (attention's V tile after the softmax) that issuing an iteration early cannot change: no earlier statement
    of the body touches its destination, no later one writes it, no statement writes its source, and its
    coordinates read nothing the body computes."""
    acc = [accesses(s) for s in stmts]
    written = set().union(*(w for _, w in acc)) if acc else set()
    out, consumers_seen = [], False
    for i, st in enumerate(stmts):
        op = tile_op(st)
        if not _global_to_shared(ctx, op):
            consumers_seen = True
            continue
        if not consumers_seen:
            out.append(i)
            continue
        dst = op.dst.buffer
        if (any(dst in acc[j][0] or dst in acc[j][1] for j in range(i))
                or any(dst in acc[j][1] for j in range(i + 1, len(stmts)))
                or op.src.buffer in written or _coordinate_reads(op) & written):
            consumers_seen = True
            continue
        out.append(i)
    return out


def derived_plan(ctx, loop, stages=None):
    """The :class:`DerivedPlan` of `loop` (with `stages`, default its ``num_stages``), or None when the body does
    not have the shape (no producer, no consumer, fewer than 2 stages, consumers writing a produced buffer)."""
    if stages is None:
        stages = int(loop.annotations[NUM_STAGES])
    stmts = seq_items(loop.body)
    chosen = producer_indices(ctx, stmts)
    producers = [(stmts[i], tile_op(stmts[i])) for i in chosen]
    consumers = [s for i, s in enumerate(stmts) if i not in chosen]
    if stages < 2 or not producers or not consumers:
        return None
    produced = {op.dst.buffer for _, op in producers}
    if any(written_shared(c) & produced for c in consumers):
        return None  # consumers write a produced buffer: multi-buffering would change the program
    leading = chosen == list(range(len(chosen)))
    return DerivedPlan(stages, producers, consumers, produced, leading)


def derived_stages(ctx, stmts, stages):
    """The stage vector of the derived schedule: the copies loaded ahead 0, the rest S-1."""
    chosen = set(producer_indices(ctx, stmts))
    return [0 if i in chosen else max(stages - 1, 0) for i in range(len(stmts))]


def schedule(ctx, loop):
    """A :class:`DerivedPlan`, an :class:`ExplicitSchedule` or None (left serial) for a ``T.Pipelined`` loop."""
    ann = loop.annotations
    if PIPELINE_STAGE not in ann and PIPELINE_ORDER not in ann:
        return derived_plan(ctx, loop)
    stmts = seq_items(loop.body)
    m = len(stmts)
    stage = [int(v) for v in ann[PIPELINE_STAGE]] if PIPELINE_STAGE in ann else None
    order = [int(v) for v in ann[PIPELINE_ORDER]] if PIPELINE_ORDER in ann else None
    for name, vals in (("stage", stage), ("order", order)):
        if vals is not None and len(vals) != m:
            listing = "; ".join(f"{i}: {describe(st)}" for i, st in enumerate(stmts))
            raise TileOpError(f"T.Pipelined({name}={vals}) has {len(vals)} entries, but the loop body has {m} "
                              f"top-level statements ({listing})")
    if stage is None:
        stage = derived_stages(ctx, stmts, int(ann[NUM_STAGES]))
    if order is None:
        order = list(range(m))
    if sorted(order) != list(range(m)) or any(v < 0 for v in stage):
        raise TileOpError(f"T.Pipelined(order={order}, stage={stage}): order must be a permutation of 0..{m - 1} "
                          f"and stages must be >= 0")
    depth = max(stage)
    if depth >= 1 and order == list(range(m)) and stage == derived_stages(ctx, stmts, depth + 1):
        plan = derived_plan(ctx, loop, depth + 1)
        if plan is not None:
            return plan  # the schedule tilex would derive itself: built (and warp-specialized) alike
    return check_explicit(ctx, loop, stmts, stage, order)


__all__ = ["DerivedPlan", "ExplicitSchedule", "derived_plan", "derived_stages", "schedule"]
