"""Explicit software-pipeline schedules: ``T.Pipelined(n, order=[...], stage=[...])``.

`check_explicit` checks a schedule against the loop body's dependencies (TileOpError naming the statements and
the buffer) and works out its buffer versions; `rewrite` builds it on cp.async, never warp-specialized.

With D = max(stage), a prologue runs slots 0..D-1 and the loop runs slot k + D as its iteration k, each statement
on iteration slot - stage[i] (so every statement runs n times, no epilogue). A shared buffer allocated outside the
loop whose first access in the body writes it gets one version per stage its accessors span (iteration k uses
version k % V). Every global->shared copy becomes cp.async; adjacent copies are issued soonest-needed first, one
commit group per equally urgent run, and every slot commits the same number of groups, so a statement that reads
a copy's data from j slots back waits with a fixed ``cp_async_wait<N>``. A slot starts with that wait, a proxy
fence and a barrier where something depends on an earlier slot (the barrier also orders reads of a version before
its refill); dependencies inside a slot get their own wait/barrier; barriers between plain shared-memory accesses
are left to TVM's ThreadSync. Statements before the last stage are guarded by their iteration being < n unless
running past the end is harmless (they only write buffers nobody reads after the loop). A wgmma stays in flight
across slots only if nothing in the next slot before it rewrites what it reads.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import ASYNC_MMA_CP_ASYNC, ASYNC_MMA_SCOPE
from tilex.ir.visit import seq, storage_sync, substitute, walk
from tilex.op.base import TileOpError, is_global, is_shared
from tilex.op.copy import CopyOp
from tilex.transform.pipeline.analysis import (accesses, annotations_without_pipeline, describe, make_async,
                                               retarget, tile_op, used_outside)


def _nearest(diff, versions, first_before_second):
    """Slots from one access to the next one of the same buffer version: the least d >= 0 with d = diff
    (mod versions); d = 0 only where the first access comes first in the slot."""
    d = diff % versions
    return versions if d == 0 and not first_before_second else d


class ExplicitSchedule:
    """A checked explicit schedule of one loop (see the module docstring)."""

    def __init__(self, stmts, stage, order, versions, async_copies, acc, overrun):
        self.stmts, self.stage, self.order = stmts, stage, order
        self.overrun = overrun  # statements that may run for iterations >= n (need no guard)
        self.depth = max(stage)  # D: the prologue runs slots 0..D-1
        self.versions = versions  # buffer -> number of versions (>= 2)
        self.async_copies = async_copies  # indices of the global->shared copies (cp.async)
        self.acc = acc  # index -> (reads, writes)
        self.seq = sorted(range(len(stmts)), key=lambda i: order[i])
        self.pos = {i: p for p, i in enumerate(self.seq)}

    def buffer_versions(self):
        """{shared buffer: versions it needs}."""
        return dict(self.versions)

    def version_count(self, buf):
        return self.versions.get(buf, 1)


class _Req:
    """`dst` must wait for `src`'s instance `delta` slots back: its cp.async group has landed (`land`, wait count
    `n` at dst), its st.shared are visible to the async proxy (`fence`), or its reads are done (`free`)."""

    def __init__(self, kind, src, dst, delta, n=None):
        self.kind, self.src, self.dst, self.delta, self.n = kind, src, dst, delta, n


def check_explicit(ctx, loop, stmts, stage, order):
    """Versions and async copies of an explicit schedule, after checking that it keeps every dependency of
    the loop body (same iteration: the first access runs first; next iteration: an unversioned buffer's
    later access of iteration k runs before the earlier access of iteration k+1)."""
    m = len(stmts)
    for i, st in enumerate(stmts):
        if isinstance(st, (tirx.AllocBuffer, tirx.DeclBuffer, tirx.Bind)):
            raise TileOpError(f"T.Pipelined(order=, stage=): statement {i} of the loop body ({describe(st)}) "
                              f"declares a buffer or variable for the statements after it; declare it outside "
                              f"the loop")
    inner = set()
    walk(loop.body, (tirx.AllocBuffer, lambda n: inner.add(n.buffer)))
    outer = {b for b in ctx.allocs if b not in inner}  # multi-buffering replaces their allocation
    acc = [accesses(st) for st in stmts]
    depth = max(stage)
    async_copies = set()
    if depth >= 1:
        for i, st in enumerate(stmts):
            op = tile_op(st)
            if isinstance(op, CopyOp) and is_global(op.src.buffer) and is_shared(op.dst.buffer) \
                    and op.dst.buffer in outer:
                async_copies.add(i)

    def key(i):
        return stage[i], order[i]

    def verb(i, buf):
        reads, writes = acc[i]
        return "reads and writes" if buf in reads and buf in writes else "writes" if buf in writes else "reads"

    def name(i):
        return f"statement {i} ({describe(stmts[i])}, stage {stage[i]})"

    seen, versions = [], {}
    for i in range(m):
        seen += [b for b in sorted(acc[i][0] | acc[i][1], key=lambda b: b.name) if b not in seen]
    for buf in seen:
        users = [i for i in range(m) if buf in acc[i][0] or buf in acc[i][1]]
        if not any(buf in acc[i][1] for i in users):
            continue  # read only
        first = users[0]
        span = max(stage[i] for i in users) - min(stage[i] for i in users)
        # fresh in every iteration (written before any read) and alive only inside the loop: iterations may
        # use separate copies
        if span and is_shared(buf) and buf in outer and buf in acc[first][1] and buf not in acc[first][0]:
            versions[buf] = span + 1
        for n_a, a in enumerate(users):
            for b in users[n_a + 1:]:
                if buf not in acc[a][1] and buf not in acc[b][1]:
                    continue
                if stage[b] < stage[a]:
                    raise TileOpError(
                        f"T.Pipelined schedule: {name(b)} {verb(b, buf)} buffer '{buf.name}', which {name(a)} "
                        f"{verb(a, buf)} earlier in the loop body, but at the later stage {stage[a]}: the "
                        f"schedule would run statement {b} before statement {a} of the same iteration; give "
                        f"statement {b} a stage >= {stage[a]}")
                if key(b) < key(a):
                    raise TileOpError(
                        f"T.Pipelined schedule: {name(b)} {verb(b, buf)} buffer '{buf.name}' after {name(a)} "
                        f"{verb(a, buf)} it in the loop body, but order puts statement {b} first in their "
                        f"common stage (order {order[b]} < {order[a]})")
                if buf not in versions and not key(b) < (stage[a] + 1, order[a]):
                    raise TileOpError(
                        f"T.Pipelined schedule: buffer '{buf.name}' ({buf.scope()}) is used by {name(a)} and by "
                        f"{name(b)}; iteration k's statement {b} would run after iteration k+1's statement {a} "
                        f"{verb(a, buf)} it. Only a shared buffer allocated outside the loop and written before "
                        f"it is read in the body gets one copy per stage; keep the users of '{buf.name}' in one "
                        f"stage")
    # Statements that may also run for iterations past the end, unguarded: they write only buffers nobody reads
    # after the loop (a version of a multi-buffered one, or one used in a single stage), and read global memory
    # only through T.copy (which guards its tile). A guard around a statement whose loops access shared memory
    # would stop TVM's ThreadSync from placing barriers in those loops.
    outside = used_outside(ctx.root, loop)
    overrun = set()
    for i in range(m):
        if i in async_copies:
            continue  # guarded: a load past the end would only cost bandwidth
        ok = isinstance(tile_op(stmts[i]), CopyOp) or not any(is_global(b) for b in acc[i][0])
        for buf in acc[i][1]:
            users = [j for j in range(m) if buf in acc[j][0] or buf in acc[j][1]]
            single = len({stage[j] for j in users}) == 1
            ok = ok and (buf in versions or (single and buf in outer and buf not in outside))
        if ok:
            overrun.add(i)
    return ExplicitSchedule(stmts, stage, order, versions, async_copies, acc, overrun)



def _gemm_may_fly(x, g):
    """Whether wgmma `g` may stay in flight until its next slot's instance waits for it (wait_group 1): no
    other statement touches its accumulator, and none rewrites a version of an operand it may still read
    (the same slot after it, or the next slot before it)."""
    g_reads, g_writes = x.acc[g]
    for a, (reads, writes) in enumerate(x.acc):
        if a == g:
            continue
        if (reads | writes) & g_writes:
            return False
        for buf in writes & g_reads:
            if buf not in x.versions:
                return False
            d = _nearest(x.stage[a] - x.stage[g], x.versions[buf], x.pos[g] < x.pos[a])
            if d == 0 or (d == 1 and x.pos[a] < x.pos[g]):
                return False
    return True


def _requirements(x, group, commits_before, groups, async_gemms):
    """What each statement waits for (see _Req), from the nearest instance of each conflicting access."""
    reqs, m = [], len(x.stmts)
    for w in sorted(x.async_copies):
        for buf in x.acc[w][1]:
            v = x.version_count(buf)
            for a in range(m):
                if a in x.async_copies or (buf not in x.acc[a][0] and buf not in x.acc[a][1]):
                    continue  # (adjacent copies into one buffer write disjoint boxes)
                d = _nearest(x.stage[a] - x.stage[w], v, x.pos[w] < x.pos[a])
                reqs.append(_Req("land", w, a, d, groups * d + commits_before[a] - group[w] - 1))
                reqs.append(_Req("free", a, w, _nearest(x.stage[w] - x.stage[a], v, x.pos[a] < x.pos[w])))
    for g in sorted(async_gemms):
        for buf in x.acc[g][0]:
            v = x.version_count(buf)
            for a in range(m):
                if a != g and a not in x.async_copies and buf in x.acc[a][1]:
                    reqs.append(_Req("fence", a, g, _nearest(x.stage[g] - x.stage[a], v, x.pos[a] < x.pos[g])))
    return reqs


def _regroup_copies(x):
    """The slot order with each run of adjacent copies sorted by how many slots later their data is first
    needed (soonest first): cp.async waits are in commit order, so a copy needed later, committed after one
    needed sooner, can stay in flight. The copies of a run are independent, so this keeps the program."""
    urgency = {}
    for w in x.async_copies:
        ds = [_nearest(x.stage[a] - x.stage[w], x.version_count(buf), x.pos[w] < x.pos[a])
              for buf in x.acc[w][1] for a in range(len(x.stmts))
              if a not in x.async_copies and (buf in x.acc[a][0] or buf in x.acc[a][1])]
        urgency[w] = min(ds, default=len(x.stmts) + max(x.stage) + 1)
    out, p = [], 0
    while p < len(x.seq):
        q = p
        while q < len(x.seq) and x.seq[q] in x.async_copies:
            q += 1
        if q == p:
            out.append(x.seq[p])
            p += 1
        else:
            out += sorted(x.seq[p:q], key=lambda w: urgency[w])
            p = q
    return out, urgency


def rewrite(ctx, loop, x):
    """The loop `loop` rewritten for the checked explicit schedule `x` (module docstring)."""
    k, lo, n = loop.loop_var, loop.min, loop.extent
    depth, stage = x.depth, x.stage
    bufmap = ctx.multi_buffer(x.versions)
    version = {b: tirx.floormod(k, v) for b, v in x.versions.items()}
    order, urgency = _regroup_copies(x)
    x.seq, x.pos = order, {i: p for p, i in enumerate(order)}
    pos = x.pos
    # commit groups: adjacent copies needed equally soon share one; every slot commits `groups` of them (empty
    # ones where the copies are guarded off), so the wait counts are the same in every slot
    group, commits_before, ends_run, groups = {}, {}, set(), 0
    for p, i in enumerate(order):
        commits_before[i] = groups
        if i in x.async_copies:
            group[i] = groups
            nxt = order[p + 1] if p + 1 < len(order) else None
            if nxt not in x.async_copies or urgency[nxt] != urgency[i]:
                ends_run.add(i)
                groups += 1
    async_gemms = {i for i in range(len(order)) if ctx.is_wgmma_gemm(x.stmts[i]) and _gemm_may_fly(x, i)}
    reqs = _requirements(x, group, commits_before, groups, async_gemms)
    analyzer = tvm.sym.Analyzer()

    def emit(i, t):
        """Statement i in prologue slot t, or (t None) in the loop's slot k + depth; None where it has no
        iteration there."""
        if t is not None and t < stage[i]:
            return None
        stmt = retarget(x.stmts[i], bufmap, version) if bufmap else x.stmts[i]
        if i in x.async_copies:
            stmt = make_async(stmt)
        if i in async_gemms:
            stmt = tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, ASYNC_MMA_CP_ASYNC, stmt)
        lag = depth - stage[i] if t is None else t - stage[i]
        it = (k if t is None else lo) + lag
        stmt = substitute(stmt, {k: it})
        cond = it < lo + n
        if t is not None and analyzer.can_prove(tirx.Not(cond)):
            return None  # fewer iterations than prologue slots
        if (t is None and lag == 0) or i in x.overrun or analyzer.can_prove(cond):
            return stmt
        return tirx.IfThenElse(cond, stmt, None)

    def active(r, t):
        return t is None or (t >= stage[r.dst] and t - r.delta >= stage[r.src])

    def slot(t):
        out = []
        start = [r for r in reqs if r.delta >= 1 and active(r, t)]
        if start:
            lands = [groups * r.delta - group[r.src] - 1 for r in start if r.kind == "land"]
            if lands:
                out.append(intrin.cp_async_wait(min(lands)))
            if any(r.kind != "free" for r in start):
                out.append(intrin.fence_proxy_async())
            out.append(storage_sync())
        blocks = []  # barriers inside the slot: (position, commits before it, wait count or None, fenced)

        def covered(r, c):
            for b_pos, b_c, b_n, b_fence in blocks:
                if b_pos <= pos[r.src]:
                    continue
                if r.kind == "land" and (b_n is None or b_n + (c - b_c) > r.n):
                    continue
                if r.kind == "fence" and not b_fence:
                    continue
                return True
            return False

        for p, i in enumerate(order):
            c = commits_before[i]
            mid = [r for r in reqs if r.delta == 0 and r.dst == i and active(r, t)]
            if any(not covered(r, c) for r in mid):
                waits = [r.n for r in mid if r.kind == "land"]
                fenced = any(r.kind != "free" for r in mid)
                if waits:
                    out.append(intrin.cp_async_wait(min(waits)))
                if fenced:
                    out.append(intrin.fence_proxy_async())
                out.append(storage_sync())
                blocks.append((p, c, min(waits) if waits else None, fenced))
            stmt = emit(i, t)
            if stmt is not None:
                out.append(stmt)
            if i in ends_run:
                out.append(intrin.cp_async_commit())
        return out

    prologue = [s for t in range(depth) for s in slot(t)]
    ann = annotations_without_pipeline(loop)
    new_loop = tirx.For(k, lo, n, tirx.ForKind.SERIAL, seq(slot(None)), None, ann)
    tail = []
    if async_gemms:
        # as in the derived pipeline (cp_async.py): the last MMAs finish before shared memory is reused after the loop
        tail += [intrin.wgmma_wait(0), storage_sync()]
    if x.async_copies:
        tail.append(intrin.cp_async_wait(0))
    return seq(prologue + [new_loop] + tail)

