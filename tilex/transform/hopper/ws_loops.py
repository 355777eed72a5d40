"""The warp-specialized form of a derived software pipeline whose consumers leave their wgmma in flight (a GEMM
main loop), built at tile level by InjectSoftwarePipeline.

Consumes: a ``T.Pipelined`` loop whose :class:`~tilex.transform.pipeline.schedule.DerivedPlan` passed
:func:`tilex.transform.hopper.ws_decision.warp_specializable`, with leading producers and an asynchronous consumer
(`PipelineContext.async_consumer`; other loops go to :mod:`.ws_groups`).
Produces, in the loop's place: the ``tma_full`` / ``tma_empty`` mbarrier arrays (one per stage), their
initialization in a ``tilex.ws_init`` region, the producer loop in a ``tilex.ws_producer`` region (wait on the
stage's *empty* barrier, arm *full* with the stage's byte count, one ``tilex.tma_load`` per copy), the consumer
loop (wait on *full*, the consumers under ``tilex.async_mma`` = 2, release the previous stage on *empty*, one
arrival per warp) with the tile's last stage released right after the final ``wgmma_wait<0>``, and a barrier.
Both loops run over ``[ws_lo, ws_hi)`` with stage / phase counter ``g = k - ws_lo + ws_base``; the three vars are
bound by ``tilex.ws_pipeline_*`` attributes that PersistentTiles resolves. WarpSpecialize then splits the block.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import ASYNC_MMA_SCOPE, ASYNC_MMA_WS, WS_INIT, WS_PIPELINE_BASE, WS_PIPELINE_HI, WS_PIPELINE_LO, WS_PRODUCER
from tilex.ir.visit import seq, storage_sync
from tilex.op.region import Region
from tilex.op.tma_load import tma_bytes, tma_load_call
from tilex.transform.pipeline.analysis import retarget


def rewrite(ctx, loop, plan):
    """Producer warpgroup (TMA + mbarriers) / consumer warpgroups (wgmma) version of the derived pipeline."""
    stages, producers, consumers, produced = plan.stages, plan.producers, plan.consumers, plan.produced
    k, n = loop.loop_var, loop.extent
    bufmap = ctx.multi_buffer({b: stages for b in produced})
    full = tirx.decl_buffer((stages,), "uint64", "tma_full", scope="shared")
    empty = tirx.decl_buffer((stages,), "uint64", "tma_empty", scope="shared")
    t = ctx.thread_var
    # position in the kernel's stream of pipeline iterations: k - min + base, where the base var (bound by
    # the PersistentTiles pass: 0, or tiles done so far times the trip count) carries the stage and the
    # barrier phases from one output tile to the next in a persistent kernel
    base = tirx.Var("ws_base", "int32")
    # the loop runs over [lo, hi): PersistentTiles binds these to the loop's own bounds, or to a segment of
    # them when stream-K splits an output tile's iterations between blocks
    lo, hi = tirx.Var("ws_lo", "int32"), tirx.Var("ws_hi", "int32")
    g = k - lo + base
    s = tirx.floormod(g, stages)
    it = tirx.floordiv(g, stages)
    nbytes = 0
    loads = []
    for stmt, op in producers:
        nbytes += tma_bytes(op.dst)
        dst = Region(bufmap[op.dst.buffer], [s, *op.dst.mins], [1, *op.dst.extents])
        loads.append(tirx.Evaluate(tma_load_call(op.src, dst, tirx.BufferLoad(full, [s]))))

    def ptr(buf, i):
        return tirx.address_of(tirx.BufferLoad(buf, [i]))

    producer = tirx.For(k, lo, hi - lo, tirx.ForKind.SERIAL, seq([
        tirx.IfThenElse(g >= stages, intrin.mbar_wait(ptr(empty, s), tirx.floormod(it + 1, 2)), None),
        intrin.mbar_arrive_expect_tx(ptr(full, s), nbytes),
        *loads]))
    warps = ctx.threads // 32
    compute = tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, ASYNC_MMA_WS, retarget(seq(consumers), bufmap, s))
    lane0 = tirx.floormod(t, 32) == 0
    release = tirx.IfThenElse(
        tirx.And(k - lo > 0, lane0), intrin.mbar_arrive(ptr(empty, tirx.floormod(g - 1, stages))), None)
    consumer = tirx.For(k, lo, hi - lo, tirx.ForKind.SERIAL, seq([
        intrin.mbar_wait(ptr(full, s), tirx.floormod(it, 2)), compute, release]))
    # the last stage is released as soon as its MMAs have completed, not by the next tile's first iteration:
    # in a persistent kernel the producer can then fill all S stages while the consumers run the epilogue
    last = base + hi - lo - 1
    trips = tvm.sym.Analyzer().simplify(n)
    cond = lane0 if isinstance(trips, tirx.IntImm) and trips.value > 0 else tirx.And(hi - lo > 0, lane0)
    drain = seq([intrin.wgmma_wait(0), tirx.IfThenElse(
        cond, intrin.mbar_arrive(ptr(empty, tirx.floormod(last, stages))), None)])
    consumer = seq([consumer, drain])
    i = tirx.Var("bar_i", "int32")
    init = seq([tirx.IfThenElse(t == 0, seq([
        tirx.For(i, 0, stages, tirx.ForKind.UNROLLED, seq([intrin.mbar_init(ptr(full, i), 1),
                                                           intrin.mbar_init(ptr(empty, i), warps)])),
        intrin.mbar_init_fence()]), None)])
    # (the barrier after the consumers' final wgmma wait, below, plays the same role as in the cp.async pipeline)
    producer = segment_attrs(base, lo, hi, loop, producer)
    consumer = segment_attrs(base, lo, hi, loop, consumer)
    return seq([tirx.AllocBuffer(full), tirx.AllocBuffer(empty),
                tirx.AttrStmt(tirx.const(0, "int32"), WS_INIT, 0, init),
                tirx.AttrStmt(tirx.const(0, "int32"), WS_PRODUCER, ctx.threads, producer),
                consumer, storage_sync()])


def segment_attrs(base, lo, hi, loop, body):
    """`body` under the attributes binding its stage-counter base and its iteration range [lo, hi)."""
    body = tirx.AttrStmt(hi, WS_PIPELINE_HI, loop.min + loop.extent, body)
    body = tirx.AttrStmt(lo, WS_PIPELINE_LO, loop.min, body)
    return tirx.AttrStmt(base, WS_PIPELINE_BASE, loop.extent, body)

