"""The warp-specialized form of a derived software pipeline whose consumers leave their wgmma in flight (a GEMM
main loop), built at tile level by InjectSoftwarePipeline.

Consumes: a ``T.Pipelined`` loop whose :class:`~tilex.transform.pipeline.schedule.DerivedPlan` passed
:func:`tilex.transform.hopper.ws_decision.warp_specializable`, with leading producers and an asynchronous consumer
(`PipelineContext.async_consumer`; other loops go to :mod:`.ws_groups`).
Produces, in the loop's place (:class:`~.tma_stages.TmaStages`, one load group): the ``tma_full`` / ``tma_empty``
mbarrier arrays (one per stage), their initialization in a ``tilex.ws_init`` region, the producer loop in a
``tilex.ws_producer`` region (wait on the stage's *empty* barrier, arm *full* with the stage's byte count, one
``tilex.tma_load`` per copy), the consumer
loop (wait on *full*, the consumers under ``tilex.async_mma`` = 2, release the previous stage on *empty*, one
arrival per warp) with the tile's last stage released right after the final ``wgmma_wait<0>``, and a barrier.
Both loops run over ``[ws_lo, ws_hi)`` with stage / phase counter ``g = k - ws_lo + ws_base``; the three vars are
bound by ``tilex.ws_pipeline_*`` attributes that PersistentTiles resolves. WarpSpecialize then splits the block.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import ASYNC_MMA_SCOPE, ASYNC_MMA_WS, WS_PIPELINE_BASE, WS_PIPELINE_HI, WS_PIPELINE_LO
from tilex.ir.visit import seq
from tilex.transform.hopper.tma_stages import TmaStages, ptr
from tilex.transform.pipeline.analysis import retarget


def rewrite(ctx, loop, plan):
    """Producer warpgroup (TMA + mbarriers) / consumer warpgroups (wgmma) version of the derived pipeline."""
    stages, consumers = plan.stages, plan.consumers
    bufmap = ctx.multi_buffer({b: stages for b in plan.produced})
    # one load group; `base` (bound by PersistentTiles: 0, or tiles done so far times the trip count) carries the
    # stage and the barrier phases from one output tile to the next in a persistent kernel, and [lo, hi) is the
    # loop's own range or the segment of it stream-K gives this block
    ts = TmaStages(loop, stages, 1)
    k, g, s, lo, hi, base = ts.k, ts.g, ts.s, ts.lo, ts.hi, ts.base
    (full, empty), = ts.barriers
    producer = ts.producer([plan.producers], bufmap)
    compute = tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, ASYNC_MMA_WS, retarget(seq(consumers), bufmap, s))
    lane0 = tirx.floormod(ctx.thread_var, 32) == 0
    release = tirx.IfThenElse(
        tirx.And(k - lo > 0, lane0), intrin.mbar_arrive(ptr(empty, tirx.floormod(g - 1, stages))), None)
    consumer = tirx.For(k, lo, hi - lo, tirx.ForKind.SERIAL, seq([ts.wait_full(full), compute, release]))
    # the last stage is released as soon as its MMAs have completed, not by the next tile's first iteration:
    # in a persistent kernel the producer can then fill all S stages while the consumers run the epilogue
    last = base + hi - lo - 1
    trips = tvm.sym.Analyzer().simplify(loop.extent)
    cond = lane0 if isinstance(trips, tirx.IntImm) and trips.value > 0 else tirx.And(hi - lo > 0, lane0)
    drain = seq([intrin.wgmma_wait(0), tirx.IfThenElse(
        cond, intrin.mbar_arrive(ptr(empty, tirx.floormod(last, stages))), None)])
    consumer = seq([consumer, drain])
    # (the barrier after the consumers' final wgmma wait, in `assemble`, plays the same role as in the cp.async
    # pipeline)
    producer = _segment_attrs(base, lo, hi, loop, producer)
    consumer = _segment_attrs(base, lo, hi, loop, consumer)
    return ts.assemble(ctx, producer, consumer)


def _segment_attrs(base, lo, hi, loop, body):
    """`body` under the attributes binding its stage-counter base and its iteration range [lo, hi)."""
    body = tirx.AttrStmt(hi, WS_PIPELINE_HI, loop.min + loop.extent, body)
    body = tirx.AttrStmt(lo, WS_PIPELINE_LO, loop.min, body)
    return tirx.AttrStmt(base, WS_PIPELINE_BASE, loop.extent, body)

