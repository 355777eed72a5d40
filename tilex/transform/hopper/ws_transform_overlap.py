"""The warp-specialized loop whose consumers transform a tile in shared memory and then multiply it (a decode of
packed weights into a float16 tile read by T.gemm): the MMA of iteration k runs during the transform of k + 1.

Consumes (from :mod:`.ws_groups`): a loop body whose last statement is its only wgmma gemm, reading shared tiles
that the statements before it write whole (and nothing else reads), with an accumulator nothing else touches.
Produces: the consumer loop with those tiles double-buffered. Iteration k: a block barrier (the warpgroups'
MMAs of k - 2, the last readers of this copy, completed before their wait of k - 1), the transform into copy
k % 2, the fenced gemm issued without waiting, ``wgmma_wait<1>`` (the gemm of k - 1 completes), the release of the
stages the transform read (only now: plain loads' data is not waited for by an arrive) and of those that gemm
read. After the loop: the last gemm completes and frees its stages.
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir import intrin
from tilex.ir.hardware import block_shared_memory_limit, compute_capability
from tilex.ir.names import ASYNC_MMA_FENCED_DEFER, ASYNC_MMA_SCOPE
from tilex.ir.shared_memory import buffer_bytes
from tilex.ir.visit import count_accesses, seq, storage_sync
from tilex.op.base import is_shared
from tilex.op.parallel import stores_whole
from tilex.transform.pipeline.analysis import retarget


def overlap_tiles(ctx, loop, consumers, acc, gemms, sync_gemms, loop_written):
    """The shared tiles to double-buffer so the loop's gemm overlaps the next iteration's transform, or None when
    the loop is not of that form, a tile is used outside the loop, or the extra copies would not fit in shared
    memory."""
    if len(gemms) != 1 or gemms[0] != len(consumers) - 1 or gemms[0] in sync_gemms:
        return None
    g = gemms[0]
    g_reads, g_writes = acc[g]
    tiles = {b for b in g_reads & loop_written if is_shared(b)}
    if not tiles:
        return None
    for i in range(g):
        reads, writes = acc[i]
        if (reads | writes) & g_writes or reads & tiles or {b for b in writes & g_reads if not is_shared(b)}:
            return None
    for t in tiles:
        writers = [i for i in range(g) if t in acc[i][1]]
        if len(writers) != 1 or not stores_whole(consumers[writers[0]], t):
            return None
        if ctx.root is not None and count_accesses(ctx.root, t) != count_accesses(loop, t):
            return None  # read or written outside the loop too: which copy would that be
    if ctx.target is not None:
        used = sum(buffer_bytes(ctx.multi.get(b, b)) or 0 for b in ctx.allocs if is_shared(b))
        extra = sum(buffer_bytes(t) or 0 for t in tiles)
        if used + extra > block_shared_memory_limit(compute_capability(ctx.target)[0]) - 1024:
            return None
    return tiles


def consumer_loop(ctx, ts, consumers, bufmap, tiles, waits_before, releases, release):
    """The consumers' loop (see the module docstring). `waits_before(i)`: full-barrier waits before statement i;
    `releases[i]`: the empty barriers of the load groups statement i reads last; `release(e, stage)` frees one."""
    k, g, s, lo, hi, base = ts.k, ts.g, ts.s, ts.lo, ts.hi, ts.base
    tmap = ctx.multi_buffer({t: 2 for t in tiles})
    stage = {**{b: s for b in bufmap}, **{t: tirx.floormod(g, 2) for t in tiles}}
    allmap = {**bufmap, **tmap}
    last = len(consumers) - 1
    body = [storage_sync()]
    for i, c in enumerate(consumers[:last]):
        body += waits_before(i)
        body.append(retarget(c, allmap, stage))
    body += waits_before(last)
    # the transform's stages are freed after the gemm is issued: they are read by plain loads, whose data an
    # arrive does not wait for, and the gemm's operands are the transform's results
    body += [tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, ASYNC_MMA_FENCED_DEFER,
                           retarget(consumers[last], allmap, stage)),
             intrin.wgmma_wait(1), *[release(e, s) for i in range(last) for e in releases[i]]]
    prev = tirx.floormod(g - 1, ts.stages)
    if releases[last]:
        body.append(tirx.IfThenElse(k > lo, seq([release(e, prev) for e in releases[last]]), None))
    final = tirx.floormod(base + hi - lo - 1, ts.stages)
    drain = [intrin.wgmma_wait(0), *[release(e, final) for e in releases[last]]]
    return seq([tirx.For(k, lo, hi - lo, tirx.ForKind.SERIAL, seq(body)), tirx.IfThenElse(hi > lo, seq(drain), None)])
