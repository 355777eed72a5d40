"""The derived software pipeline on cp.async, run by every thread of the block.

Each produced buffer ``X (shape)`` becomes ``X (S, shape)``; a prologue issues the copies of the first S-1
iterations; iteration k waits until at most S-2 cp.async groups are in flight (so stage k % S has landed),
synchronizes the block once, issues the copy of iteration k+S-1 into stage (k+S-1) % S (the stage everyone
finished reading in iteration k-1) as one commit group, and runs the consumers on stage k % S (an asynchronous
wgmma runs before that refill and stays in flight until the next iteration's). Producer copies are marked
asynchronous (cp.async); copies that cannot be (sub-4-byte vectors) stay synchronous, which the same schedule keeps
correct.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import ASYNC_MMA_CP_ASYNC, ASYNC_MMA_CP_ASYNC_SYNC, ASYNC_MMA_SCOPE
from tilex.ir.visit import seq, storage_sync, substitute
from tilex.transform.pipeline.analysis import annotations_without_pipeline, make_async, retarget


def _async_mma(stmt, mode):
    return tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, mode, stmt)


def rewrite(ctx, loop, plan):
    """`loop` rewritten for its :class:`~tilex.transform.pipeline.schedule.DerivedPlan` `plan`."""
    stages, producers, consumers, produced = plan.stages, plan.producers, plan.consumers, plan.produced
    k = loop.loop_var
    n = loop.extent
    bufmap = ctx.multi_buffer({b: stages for b in produced})
    analyzer = tvm.sym.Analyzer()

    def issue(it):
        # written for iteration k, then moved to iteration `it` (stage index included)
        body = seq([make_async(retarget(s, bufmap, tirx.floormod(k, stages))) for s, _ in producers])
        return substitute(body, {k: it})

    commit = intrin.cp_async_commit()
    prologue = []
    for s in range(stages - 1):
        it = loop.min + s
        stmt = issue(it)
        cond = it < loop.min + n
        if not analyzer.can_prove(cond):
            stmt = tirx.IfThenElse(cond, stmt, None)
        prologue += [stmt, commit]
    ahead = k + (stages - 1)
    refill = [tirx.IfThenElse(ahead < loop.min + n, issue(ahead), None), commit]
    in_flight = ctx.async_consumer(consumers)
    # otherwise a wgmma gemm reading only landed stages needs no fence and barrier of its own (a decode into its
    # register operand keeps it from staying in flight): the iteration's barrier below already ordered them
    landed_gemms = [] if in_flight else ctx.landed_gemms(consumers)
    compute = retarget(seq([_async_mma(c, ASYNC_MMA_CP_ASYNC_SYNC) if i in landed_gemms else c
                            for i, c in enumerate(consumers)]), bufmap, tirx.floormod(k, stages))
    landed = [intrin.cp_async_wait(stages - 2), intrin.fence_proxy_async(), storage_sync()]
    if in_flight:
        # wgmma runs asynchronously: iteration k issues its MMAs, then waits only for those of k - 1
        # (wgmma_wait<1>), which frees stage (k - 1) % S == (k + S - 1) % S for the refill issued after it
        compute = _async_mma(compute, ASYNC_MMA_CP_ASYNC)
        step = landed + [compute] + refill
        # a barrier after the last MMAs: shared memory written after the loop (an epilogue tile) may reuse the
        # bytes of stages that another warpgroup's MMAs are still reading until its own wait
        tail = [intrin.wgmma_wait(0), storage_sync()]
    else:
        # one barrier per iteration: after it every thread (a) sees stage k % S and (b) has finished computing
        # iteration k - 1, so stage (k - 1) % S == (k + S - 1) % S may be refilled before computing k
        step = landed + refill + [compute]
        tail = []
    ann = annotations_without_pipeline(loop)
    new_loop = tirx.For(k, loop.min, n, tirx.ForKind.SERIAL, seq(step), None, ann)
    return seq(prologue + [new_loop] + tail + [intrin.cp_async_wait(0)])
