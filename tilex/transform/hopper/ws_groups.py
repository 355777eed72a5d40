"""The warp-specialized form of a derived pipeline whose consumers compute between their MMAs (attention).

Consumes: a ``T.Pipelined`` loop whose :class:`~tilex.transform.pipeline.schedule.DerivedPlan` passed
:func:`tilex.transform.hopper.ws_decision.warp_specializable` but is not a GEMM main loop (:mod:`.ws_loops`): the
body reads a gemm's accumulator (attention's softmax reads S = Q Kᵀ), or loads a tile after computing (V).
Produces, in the loop's place, what WarpSpecialize splits (``tilex.ws_init`` / ``tilex.ws_producer`` regions and the
consumer loop; one block per tile, no persistent grid):

* one *full* / *empty* mbarrier pair per load group (:func:`load_groups`: the copies first read by the same
  statement). The producer, per iteration and group, waits for the stage to be empty, arms *full* with the
  group's bytes and issues its TMA loads; the consumers wait on a group's *full* barrier just before its first
  reader and free the stage (one arrival per warp) after its last reader: a gemm (once its wait returned), or, for
  a stage that plain loads read (a T.Parallel decode), at the end of the iteration: an mbarrier arrive does not wait
  for the data of loads still in flight, so freeing the stage right after them let the next TMA load overwrite
  bytes not yet read (measured: single wrong packed weights in an int4 GEMM).
* gemms whose shared operands are TMA stages or tiles written before the loop run without a block barrier
  (``ASYNC_MMA_WS_SYNC``): a fence and one barrier before the loop order those tiles.
* unless ``tilex.disable_mma_overlap``, the last gemm of the body (P V) overlaps the next iteration's softmax
  when nothing from it until the next iteration's first gemm (S = Q Kᵀ) touches its tiles: iteration k issues
  S(k), then P(k-1) V(k-1), waits for S(k) alone (``wgmma_wait<1>``), and waits for P V (and frees its stage)
  just before the first statement that touches its tiles (the cast of P, the rescale of O); the last one is
  issued after the loop.
* otherwise (attention's backward: no gemm's wait can cross into the next iteration), unless
  ``tilex.disable_mma_overlap``, every wgmma is only issued, and completed just before the first statement that
  needs it (:func:`in_flight_iteration`): dV's MMA runs during dS, dK's during dQ's staging.
* opt in (``tilex.warpgroup_turns``): with two consumer warpgroups that own disjoint rows, each issues its block
  of MMAs (S(k) and P(k-1) V(k-1)) only in its turn and passes the turn right after issuing (named barriers
  ``TURNS``), so one warpgroup's softmax runs while the other's MMAs do (FlashAttention-3's ping-pong).
"""
from __future__ import annotations

from tvm import tirx

from tilex import config
from tilex.ir import intrin
from tilex.ir.names import ASYNC_MMA_FENCED_DEFER, ASYNC_MMA_SCOPE, ASYNC_MMA_WS_DEFER, ASYNC_MMA_WS_SYNC
from tilex.ir.visit import seq, storage_sync, substitute
from tilex.op import gemm_wgmma
from tilex.op.base import is_shared
from tilex.transform.hopper.tma_stages import TmaStages, ptr
from tilex.transform.hopper.ws_transform_overlap import consumer_loop, overlap_tiles
from tilex.transform.pipeline.analysis import accesses, retarget, tile_op

#: Named barrier ids of the two consumer warpgroups' turns (0 is __syncthreads, 1 the consumers' block barrier).
TURNS = (2, 3)


def load_groups(plan):
    """The producer copies grouped by the consumer statement that first reads them: [(first reader index, last
    reader index, [(stmt, CopyOp)])], in the order the consumers need them."""
    acc = [accesses(c) for c in plan.consumers]
    n = len(plan.consumers)
    groups = {}
    for stmt, op in plan.producers:
        readers = [i for i, (r, w) in enumerate(acc) if op.dst.buffer in r or op.dst.buffer in w]
        first, last = (readers[0], readers[-1]) if readers else (n - 1, n - 1)
        if first in groups:
            groups[first][1] = max(groups[first][1], last)
            groups[first][2].append((stmt, op))
        else:
            groups[first] = [first, last, [(stmt, op)]]
    return [tuple(groups[f]) for f in sorted(groups)]


def _deferred_gemm(acc, gemms, sync_gemms, n):
    """Index of the last gemm when its wait can move past the next iteration's first gemm, else None."""
    if len(gemms) < 2 or gemms[0] not in sync_gemms or gemms[-1] not in sync_gemms:
        return None
    first, last = gemms[0], gemms[-1]
    touched = acc[last][0] | acc[last][1]
    window = list(range(last + 1, n)) + list(range(0, first + 1))
    if any((acc[j][0] | acc[j][1]) & touched for j in window):
        return None
    return last


def _rows_split(ctx, consumers, gemms):
    """Whether every gemm gives each warpgroup rows of its own (nothing in the loop crosses warpgroups)."""
    for i in gemms:
        p = gemm_wgmma.plan(tile_op(consumers[i]), ctx.threads, ctx.target)
        if p is None or p.wg_n != 1:
            return False
    return True


def _must_complete(gemm, stmt, fenced, shared_touch):
    """Whether the in-flight gemm with accesses `gemm` completes before a statement with accesses `stmt`: the
    statement touches its accumulator, overwrites an operand or reads a register operand (the PTX ISA leaves any
    access to a wgmma's registers before its wait undefined); or the gemm reads tiles written in the loop
    (`fenced`) and the statement touches shared memory, where ThreadSync may put a barrier that lets another
    warpgroup overwrite them."""
    (gr, gw), (sr, sw) = gemm, stmt
    return bool(gw & (sr | sw) or gr & sw or {b for b in gr & sr if not is_shared(b)} or (fenced and shared_touch))


def in_flight_iteration(consumers, acc, gemms, sync_gemms, releases, waits_before, release):
    """One iteration's consumer statements with every wgmma only issued and completed (``wgmma_wait<n>``, n the
    gemms issued after it) just before the first later statement that depends on it (:func:`_must_complete`), so
    independent MMAs overlap the element-wise work and each other (attention's backward: dV += P^T dO during
    dS, dK += dS^T Q during dQ's store). Stages are freed once their last reader completed; everything completes
    by the end of the iteration.

    `consumers`: the statements, retargeted to the current stage; `acc`: their (reads, writes); `releases[i]`:
    the (empty barrier, tiles) of the load groups whose last reader is statement i; `waits_before(i)`: the
    full-barrier waits before statement i; `release(e)`: the statements freeing the current stage of `e`."""
    body, pending, held, late = [], [], [], []

    def complete(upto):
        body.append(intrin.wgmma_wait(len(pending) - upto - 1))
        done = set(pending[:upto + 1])
        del pending[:upto + 1]
        for j, e in list(held):
            if j in done:
                body.append(release(e))
                held.remove((j, e))

    for i, c in enumerate(consumers):
        body += waits_before(i)
        is_gemm = i in gemms
        shared_touch = not (is_gemm and i in sync_gemms) and any(is_shared(b) for b in acc[i][0] | acc[i][1])
        need = [p for p, j in enumerate(pending)
                if _must_complete(acc[j], acc[i], j not in sync_gemms, shared_touch)]
        if need:
            complete(max(need))
        if is_gemm:
            mode = ASYNC_MMA_WS_DEFER if i in sync_gemms else ASYNC_MMA_FENCED_DEFER
            body.append(tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, mode, c))
            pending.append(i)
        else:
            body.append(c)
        for e, bufs in releases[i]:
            readers = [j for j in pending if acc[j][0] & bufs]  # in flight, reading the stage
            if readers:
                held.append((readers[-1], e))
            elif not is_gemm:
                # read by plain loads (ld.shared): an arrive does not wait for their data, so a TMA refill could
                # overwrite the stage before it is read; free it once the iteration has used every value
                late.append(e)
            else:
                body.append(release(e))
    if pending:
        complete(len(pending) - 1)
    return body + [release(e) for e in late]


def rewrite(ctx, loop, plan):
    """Producer warpgroup (TMA, one barrier pair per load group) / consumer warpgroups for `loop`."""
    stages, consumers = plan.stages, plan.consumers
    bufmap = ctx.multi_buffer({b: stages for b in plan.produced})
    groups = load_groups(plan)
    ts = TmaStages(loop, stages, len(groups))
    k, g, s, lo, hi, base, barriers = ts.k, ts.g, ts.s, ts.lo, ts.hi, ts.base, ts.barriers
    t = ctx.thread_var
    producer = ts.producer([copies for _, _, copies in groups], bufmap)

    n = len(consumers)
    acc = [accesses(c) for c in consumers]
    gemms = [i for i, c in enumerate(consumers) if ctx.is_wgmma_gemm(c)]
    shared_written = {b for _, w in acc for b in w if is_shared(b)}
    # its shared operands are TMA stages (mbarriers order them) or tiles written before the loop (the fence and
    # barrier before the loop order them): no barrier around the MMAs
    sync_gemms = {i for i in gemms if not acc[i][0] & (shared_written - plan.produced)}
    last = None if config.get("disable_mma_overlap", False) else _deferred_gemm(acc, gemms, sync_gemms, n)
    lane0 = tirx.floormod(t, 32) == 0
    trips = hi - lo

    def waits_before(i):
        # the full barriers of the load groups statement i reads first
        return [ts.wait_full(full) for (f, _, _), (full, _) in zip(groups, barriers) if f == i]

    def release(empty, stage):
        # every lane of the warp has finished reading before lane 0 frees the stage
        return seq([intrin.syncwarp(), tirx.IfThenElse(lane0, intrin.mbar_arrive(ptr(empty, stage)), None)])

    def issue_only(stmt):
        return tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, ASYNC_MMA_WS_DEFER, stmt)

    wg = tirx.floordiv(t, 128)
    # opt in: the two consumer warpgroups issue their blocks of MMAs in turns (named barriers TURNS)
    turns = (last is not None and config.get("warpgroup_turns", False) and ctx.threads == 256
             and not shared_written - plan.produced and _rows_split(ctx, consumers, gemms))

    def turn(stmts):
        """`stmts` (a block of MMA issues) inside warpgroup wg's turn; the turn passes right after issuing."""
        if not turns:
            return list(stmts)
        return [intrin.named_barrier_wait(TURNS[0] + wg, 256), *stmts, intrin.named_barrier_arrive(TURNS[1] - wg, 256)]

    last_groups = [e for (_, lst, _), (_, e) in zip(groups, barriers) if lst == last]
    if last is not None:
        first = gemms[0]
        touched = acc[last][0] | acc[last][1]
        # the previous iteration's last gemm completes before the first statement that touches its tiles
        done_at = next((j for j in range(first + 1, last) if (acc[j][0] | acc[j][1]) & touched), last)
        prev = tirx.floormod(g - 1, stages)
        previous_last = issue_only(retarget(substitute(consumers[last], {k: k - 1}), bufmap, prev))

    def iteration(peeled):
        """The consumers' statements for iteration k; `peeled`: the first one, which has no previous P V."""
        body, late = [], []
        for i, c in enumerate(consumers):
            body += waits_before(i)
            if last is not None and i == done_at and not peeled:
                body += [intrin.wgmma_wait(0)] + [release(e, prev) for e in last_groups]
            if i == last:
                continue  # issued by the next iteration, right after its first gemm
            c = retarget(c, bufmap, s)
            if last is not None and i == first and not peeled:
                # S(k) = Q K(k)^T first, then O += P(k-1) V(k-1): waiting for all but the newest group completes
                # S(k) while P V runs on during the softmax
                body += [*turn([issue_only(c), previous_last]), intrin.wgmma_wait(1)]
            elif last is not None and i == first:
                body += [*turn([issue_only(c)]), intrin.wgmma_wait(0)]
            elif i in sync_gemms:
                body.append(tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, ASYNC_MMA_WS_SYNC, c))
            else:
                body.append(c)
            freed = [release(e, s) for (_, lst, _), (_, e) in zip(groups, barriers) if lst == i]
            if i in gemms:
                body += freed
            else:
                late += freed  # read by plain loads: see in_flight_iteration
        return seq(body + late)

    tiles = None
    if last is None and not config.get("disable_mma_overlap", False):
        tiles = overlap_tiles(ctx, loop, consumers, acc, gemms, sync_gemms, shared_written - plan.produced)
    if tiles:
        consumer = consumer_loop(ctx, ts, consumers, bufmap, tiles, waits_before,
                                 {i: [e for (_, lst, _), (_, e) in zip(groups, barriers) if lst == i]
                                  for i in range(n)}, release)
    elif last is None and not config.get("disable_mma_overlap", False):
        consumer = tirx.For(k, lo, trips, tirx.ForKind.SERIAL, seq(in_flight_iteration(
            [retarget(c, bufmap, s) for c in consumers], acc, gemms, sync_gemms,
            {i: [(e, {op.dst.buffer for _, op in copies}) for (_, lst, copies), (_, e) in zip(groups, barriers)
                 if lst == i] for i in range(n)},
            waits_before,
            lambda e: release(e, s))))
    elif last is None:
        consumer = tirx.For(k, lo, trips, tirx.ForKind.SERIAL, iteration(False))
    else:
        # the first iteration is peeled (no P V before it), so every wgmma of the loop body is issued and waited
        # for unconditionally: ptxas serializes all of them when it cannot follow an MMA across a branch
        final = tirx.floormod(base + trips - 1, stages)
        drain = [issue_only(retarget(substitute(consumers[last], {k: hi - 1}), bufmap, final))]
        if turns:
            # warpgroup 0 takes the first turn; warpgroup 1's last pass would be left over on the barrier
            drain = [intrin.named_barrier_wait(TURNS[0] + wg, 256), *drain,
                     tirx.IfThenElse(wg == 0, intrin.named_barrier_arrive(TURNS[1], 256), None)]
        drain.append(intrin.wgmma_wait(0))
        first_turn = [tirx.IfThenElse(wg == 1, intrin.named_barrier_arrive(TURNS[0], 256), None)] if turns else []
        consumer = tirx.IfThenElse(trips > 0, seq([
            *first_turn, substitute(iteration(True), {k: lo}),
            tirx.For(k, lo + 1, trips - 1, tirx.ForKind.SERIAL, iteration(False)),
            *drain, *[release(e, final) for e in last_groups]]), None)
    # tiles the consumers stored before the loop (attention's Q) reach the async proxy before any wgmma reads them
    consumer = seq([intrin.fence_proxy_async(), storage_sync(), consumer])
    # one block per tile: the loops run over the loop's own bounds, stage counter from 0. (No ws_pipeline_*
    # attributes, so PersistentTiles leaves the kernel alone: persistent grids and clusters are built and measured
    # for GEMM main loops only.)
    bounds = {base: tirx.const(0, "int32"), lo: loop.min, hi: loop.min + loop.extent}
    return ts.assemble(ctx, substitute(producer, bounds), substitute(consumer, bounds))
