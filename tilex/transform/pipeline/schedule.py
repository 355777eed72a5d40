"""Which schedule a ``T.Pipelined`` loop gets.

Derived (no explicit schedule, or one equal to it): the leading global->shared copies into buffers allocated
outside the loop are the producers (stage 0), every other statement a consumer (stage S-1): a
:class:`DerivedPlan`. Anything else given with ``order=`` / ``stage=`` is an explicit schedule, checked by
:func:`tilex.transform.pipeline.explicit.check_explicit`. A loop that fits neither is left serial (None).
"""
from __future__ import annotations

from dataclasses import dataclass

from tilex.ir.names import NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE
from tilex.ir.visit import seq_items
from tilex.op.base import TileOpError, is_global, is_shared
from tilex.op.copy import CopyOp
from tilex.transform.pipeline.analysis import describe, tile_op, written_shared
from tilex.transform.pipeline.explicit import ExplicitSchedule, check_explicit


@dataclass
class DerivedPlan:
    """The derived schedule of a loop: `stages` buffers per produced shared buffer; `producers` the leading
    (statement, CopyOp) global->shared copies; `consumers` the other statements; `produced` the copies'
    destinations."""

    stages: int
    producers: list
    consumers: list
    produced: set

    def buffer_versions(self):
        """{shared buffer: versions it needs}."""
        return {b: self.stages for b in self.produced}


def _is_producer_copy(ctx, op, consumers_seen):
    return (isinstance(op, CopyOp) and is_global(op.src.buffer) and is_shared(op.dst.buffer)
            and op.dst.buffer in ctx.allocs and not consumers_seen)


def derived_plan(ctx, loop, stages=None):
    """The :class:`DerivedPlan` of `loop` (with `stages`, default its ``num_stages``), or None when the body does
    not have the shape (no producer, no consumer, fewer than 2 stages, consumers writing a produced buffer)."""
    if stages is None:
        stages = int(loop.annotations[NUM_STAGES])
    producers, consumers = [], []
    for s in seq_items(loop.body):
        op = tile_op(s)
        if _is_producer_copy(ctx, op, consumers):
            producers.append((s, op))
        else:
            consumers.append(s)
    if stages < 2 or not producers or not consumers:
        return None
    produced = {op.dst.buffer for _, op in producers}
    if any(written_shared(c) & produced for c in consumers):
        return None  # consumers write a produced buffer: multi-buffering would change the program
    return DerivedPlan(stages, producers, consumers, produced)


def derived_stages(ctx, stmts, stages):
    """The stage vector of the derived schedule: the leading global->shared copies 0, the rest S-1."""
    out, consumers = [], False
    for st in stmts:
        if _is_producer_copy(ctx, tile_op(st), consumers):
            out.append(0)
        else:
            consumers = True
            out.append(max(stages - 1, 0))
    return out


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
