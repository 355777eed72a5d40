"""InjectSoftwarePipeline: software-pipeline ``T.Pipelined`` loops (multi-buffered shared tiles, overlapped loads).

Consumes: tile-level IR (before layout inference). A loop annotated ``tilex.num_stages = S`` may carry an explicit
schedule, ``tilex.pipeline_stage`` / ``tilex.pipeline_order``: for each top-level statement i of the loop body the
stage it runs in (statement i of iteration k runs in slot k + stage[i]) and its position in the steady-state body.
Produces: tile-level IR in which each such loop is rewritten as below (its pipeline annotations dropped).

Derived schedule (no explicit one, or stage = [0 for the leading global->shared copies, S-1 for the rest] in program
order): the copies into shared buffers allocated outside the loop are producers, every other statement a consumer.
Each produced buffer ``X (shape)`` becomes ``X (S, shape)``; a prologue issues the copies of the first S-1
iterations; iteration k waits until at most S-2 cp.async groups are in flight (so stage k % S has landed),
synchronizes the block once, issues the copy of iteration k+S-1 into stage (k+S-1) % S (the stage everyone finished
reading in iteration k-1) as one commit group, and runs the consumers on stage k % S (an asynchronous wgmma runs
before that refill and stays in flight until the next iteration's). Producer copies are marked asynchronous
(cp.async); copies that cannot be (sub-4-byte vectors) stay synchronous, which the same schedule keeps correct. On
sm90 with TMA-able copies feeding a wgmma, the loop is instead split into a producer loop (TMA, mbarriers) and a
consumer loop for WarpSpecialize.

Explicit schedule (anything else; never warp-specialized): with D = max(stage), a prologue runs slots 0..D-1 and the
loop runs slot k + D as its iteration k, each statement on iteration slot - stage[i] (so every statement runs n
times, no epilogue). A shared buffer allocated outside the loop whose first access in the body writes it gets one
version per stage its accessors span (iteration k uses version k % V). Every global->shared copy becomes cp.async;
adjacent copies are issued soonest-needed first, one commit group per equally urgent run, and every slot commits
the same number of groups, so a statement that reads a copy's data from j slots back waits with a fixed
``cp_async_wait<N>``. A slot starts with that wait, a proxy fence and a barrier where something depends on an
earlier slot (the barrier also orders reads of a version before its refill); dependencies inside a slot get their
own wait/barrier; barriers between plain shared-memory accesses are left to TVM's ThreadSync. Statements before the
last stage are guarded by their iteration being < n unless running past the end is harmless (they only write
buffers nobody reads after the loop). A wgmma stays in flight across slots only if nothing in the next slot before
it rewrites what it reads. The schedule is checked against the body's dependencies (TileOpError naming the
statements and the buffer).

Loops whose shape does not fit a derived plan are left serial (still correct, not overlapped).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex._tir import BufferLoadNode, map_nodes, mutate, seq_items, walk
from tilex.language.loop import NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE
from tilex.op.base import TileOpError, is_global, is_shared
from tilex.op.copy import CopyOp
from tilex.op.partition import substitute
from tilex.op.region import READ, REGION_OP, WRITE, Region
from tilex.op.registry import parse_tile_op


def _sync():
    return tirx.Evaluate(tirx.call_intrin("void", "tirx.tvm_storage_sync", "shared"))


def _extern(name):
    return tirx.Evaluate(tirx.call_extern("void", name))


def _seq(stmts):
    stmts = [s for s in stmts if s is not None]
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _buffers_used(stmt):
    used = set()
    walk(stmt, [(BufferLoadNode, lambda n: used.add(n.source)),
                                   (tirx.BufferStore, lambda n: used.add(n.buffer))])
    return used


def _written_shared(stmt):
    """Shared buffers a statement writes (tile-op destinations and plain stores)."""
    out = set()

    def on_eval(node):
        op = parse_tile_op(node.value) if isinstance(node.value, tvm.ir.Call) else None
        if op is None:
            return
        if isinstance(op, CopyOp):
            out.add(op.dst.buffer)
        else:
            out.update(b for b in op.buffers()[-1:])  # gemm/fill/... write their last operand

    walk(stmt, [(tirx.Evaluate, on_eval), (tirx.BufferStore, lambda n: out.add(n.buffer))])
    return {b for b in out if is_shared(b)}


def _retarget(stmt, bufmap, stage):
    """Point every access/region of the buffers in `bufmap` at stage `stage` of their multi-buffered version
    (`stage`: one index for all, or a dict buffer -> index)."""

    def at(buf):
        return stage[buf] if isinstance(stage, dict) else stage

    def on_load(n):
        new = bufmap.get(n.source)
        if new is None:
            return n
        return tirx.BufferLoad(new, [at(n.source), *n.indices])

    def on_store(n):
        new = bufmap.get(n.buffer)
        if new is None:
            return n
        return tirx.BufferStore(new, n.value, [at(n.buffer), *n.indices])

    def on_call(n):
        if isinstance(n.op, tvm.ir.Op) and n.op.name == REGION_OP:
            load = n.args[0]
            new = bufmap.get(load.source)
            if new is not None:
                r = Region(new, [at(load.source), *load.indices], [1, *n.args[2:]])
                return r.to_call(int(n.args[1].value))
        return n

    # regions first (they contain loads of the old buffer that must not be rewritten on their own)
    stmt = map_nodes(stmt, (tvm.ir.Call, on_call), order="pre")
    return map_nodes(stmt, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store)], order="post")


def _make_async(stmt):
    call = stmt.value
    return tirx.Evaluate(tirx.call_intrin("handle", "tilex.copy", call.args[0], call.args[1], 1))


def _tile_op(stmt):
    if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call):
        return parse_tile_op(stmt.value)
    return None


def _accesses(stmt):
    """(buffers read, buffers written) by a statement: tile-op regions by their access mask, plain loads and
    stores otherwise (a region's own BufferLoad only names its buffer, it is not a read)."""
    import tvm_ffi

    reads, writes = set(), set()

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and c.op.name == REGION_OP:
            load, mask = c.args[0], int(c.args[1].value)
            if mask & READ:
                reads.add(load.source)
            if mask & WRITE:
                writes.add(load.source)
            for i in load.indices:
                walk(i, (BufferLoadNode, lambda n: reads.add(n.source)))
            return tvm_ffi.WalkResult.SKIP
        return None

    walk(stmt, [(tvm.ir.Call, on_call), (BufferLoadNode, lambda n: reads.add(n.source)),
                (tirx.BufferStore, lambda n: writes.add(n.buffer))], order="pre")
    return reads, writes


def _describe(stmt):
    op = _tile_op(stmt)
    if op is not None:
        return op.describe()
    if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL:
        written = sorted({b.name for b in _accesses(stmt)[1]})
        return f"T.Parallel loop writing {', '.join(written) or 'nothing'}"
    text = " ".join(str(stmt).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _nearest(diff, versions, first_before_second):
    """Slots from one access to the next one of the same buffer version: the least d >= 0 with d = diff
    (mod versions); d = 0 only where the first access comes first in the slot."""
    d = diff % versions
    return versions if d == 0 and not first_before_second else d


class _Explicit:
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

    def version_count(self, buf):
        return self.versions.get(buf, 1)


class _Req:
    """`dst` must wait for `src`'s instance `delta` slots back: its cp.async group has landed (`land`, wait count
    `n` at dst), its st.shared are visible to the async proxy (`fence`), or its reads are done (`free`)."""

    def __init__(self, kind, src, dst, delta, n=None):
        self.kind, self.src, self.dst, self.delta, self.n = kind, src, dst, delta, n


class _Pipeliner:
    def __init__(self, allocs, threads=None, target=None, thread_var=None, top_level=(), root=None):
        self.root = root  # the kernel body as written
        self.allocs = allocs  # buffers allocated in enclosing scopes -> their (replaceable) AllocBuffer
        self.multi = {}  # old shared buffer -> multi-buffered buffer
        self.depth = {}  # shared buffer -> most versions any pipelined loop of the kernel wants (sizes `multi`)
        self.threads, self.target, self.thread_var = threads, target, thread_var
        self.top_level = set(top_level)  # loops directly in the kernel's statement list

    def _wgmma_gemm(self, stmt):
        """Whether `stmt` is a T.gemm that will run on wgmma (asynchronously, see gemm_wgmma.py)."""
        from tilex.op import gemm_wgmma
        from tilex.op.gemm import GemmOp

        op = _tile_op(stmt)
        return (self.threads is not None and isinstance(op, GemmOp)
                and gemm_wgmma.plan(op, self.threads, self.target) is not None)

    def _async_consumer(self, consumers):
        """Whether the consumers may leave a wgmma in flight: one is a T.gemm on wgmma and no other consumer
        touches its accumulator or writes its operands (that access would race the MMA still running)."""
        gemms = [i for i, c in enumerate(consumers) if self._wgmma_gemm(c)]
        if not gemms:
            return False
        acc = [_accesses(c) for c in consumers]
        for g in gemms:
            g_reads, g_writes = acc[g]
            for i, (reads, writes) in enumerate(acc):
                if i != g and ((reads | writes) & g_writes or writes & g_reads):
                    return False
        return True

    def plan(self, loop, stages=None):
        if stages is None:
            stages = int(loop.annotations[NUM_STAGES])
        stmts = seq_items(loop.body)
        producers, consumers = [], []
        for s in stmts:
            op = parse_tile_op(s.value) if isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call) else None
            if isinstance(op, CopyOp) and is_global(op.src.buffer) and is_shared(op.dst.buffer) \
                    and op.dst.buffer in self.allocs and not consumers:
                producers.append((s, op))
            else:
                consumers.append(s)
        if stages < 2 or not producers or not consumers:
            return None
        produced = {op.dst.buffer for _, op in producers}
        if any(_written_shared(c) & produced for c in consumers):
            return None  # consumers write a produced buffer: multi-buffering would change the program
        return stages, producers, consumers, produced

    def _derived_stages(self, stmts, stages):
        """The stage vector of the derived schedule: the leading global->shared copies 0, the rest S-1."""
        out, consumers = [], False
        for st in stmts:
            op = _tile_op(st)
            if isinstance(op, CopyOp) and is_global(op.src.buffer) and is_shared(op.dst.buffer) \
                    and op.dst.buffer in self.allocs and not consumers:
                out.append(0)
            else:
                consumers = True
                out.append(max(stages - 1, 0))
        return out

    def schedule(self, loop):
        """('derived', plan), ('explicit', _Explicit) or None (left serial) for a ``T.Pipelined`` loop."""
        ann = loop.annotations
        if PIPELINE_STAGE not in ann and PIPELINE_ORDER not in ann:
            plan = self.plan(loop)
            return ("derived", plan) if plan is not None else None
        stmts = _body_stmts(loop)
        m = len(stmts)
        stage = [int(v) for v in ann[PIPELINE_STAGE]] if PIPELINE_STAGE in ann else None
        order = [int(v) for v in ann[PIPELINE_ORDER]] if PIPELINE_ORDER in ann else None
        for name, vals in (("stage", stage), ("order", order)):
            if vals is not None and len(vals) != m:
                listing = "; ".join(f"{i}: {_describe(st)}" for i, st in enumerate(stmts))
                raise TileOpError(f"T.Pipelined({name}={vals}) has {len(vals)} entries, but the loop body has {m} "
                                  f"top-level statements ({listing})")
        if stage is None:
            stage = self._derived_stages(stmts, int(ann[NUM_STAGES]))
        if order is None:
            order = list(range(m))
        if sorted(order) != list(range(m)) or any(v < 0 for v in stage):
            raise TileOpError(f"T.Pipelined(order={order}, stage={stage}): order must be a permutation of 0..{m - 1} "
                              f"and stages must be >= 0")
        depth = max(stage)
        if depth >= 1 and order == list(range(m)) and stage == self._derived_stages(stmts, depth + 1):
            plan = self.plan(loop, depth + 1)
            if plan is not None:
                return "derived", plan  # the schedule tilex would derive itself: built (and warp-specialized) alike
        return "explicit", self._check_explicit(loop, stmts, stage, order)

    def _check_explicit(self, loop, stmts, stage, order):
        """Versions and async copies of an explicit schedule, after checking that it keeps every dependency of
        the loop body (same iteration: the first access runs first; next iteration: an unversioned buffer's
        later access of iteration k runs before the earlier access of iteration k+1)."""
        m = len(stmts)
        for i, st in enumerate(stmts):
            if isinstance(st, (tirx.AllocBuffer, tirx.DeclBuffer, tirx.Bind)):
                raise TileOpError(f"T.Pipelined(order=, stage=): statement {i} of the loop body ({_describe(st)}) "
                                  f"declares a buffer or variable for the statements after it; declare it outside "
                                  f"the loop")
        inner = set()
        walk(loop.body, (tirx.AllocBuffer, lambda n: inner.add(n.buffer)))
        outer = {b for b in self.allocs if b not in inner}  # multi-buffering replaces their allocation
        acc = [_accesses(st) for st in stmts]
        depth = max(stage)
        async_copies = set()
        if depth >= 1:
            for i, st in enumerate(stmts):
                op = _tile_op(st)
                if isinstance(op, CopyOp) and is_global(op.src.buffer) and is_shared(op.dst.buffer) \
                        and op.dst.buffer in outer:
                    async_copies.add(i)

        def key(i):
            return stage[i], order[i]

        def verb(i, buf):
            reads, writes = acc[i]
            return "reads and writes" if buf in reads and buf in writes else "writes" if buf in writes else "reads"

        def name(i):
            return f"statement {i} ({_describe(stmts[i])}, stage {stage[i]})"

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
        outside = self._used_outside(loop)
        overrun = set()
        for i in range(m):
            if i in async_copies:
                continue  # guarded: a load past the end would only cost bandwidth
            ok = isinstance(_tile_op(stmts[i]), CopyOp) or not any(is_global(b) for b in acc[i][0])
            for buf in acc[i][1]:
                users = [j for j in range(m) if buf in acc[j][0] or buf in acc[j][1]]
                single = len({stage[j] for j in users}) == 1
                ok = ok and (buf in versions or (single and buf in outer and buf not in outside))
            if ok:
                overrun.add(i)
        return _Explicit(stmts, stage, order, versions, async_copies, acc, overrun)

    def _used_outside(self, loop):
        """Buffers the kernel uses outside `loop` (before or after it)."""
        import tvm_ffi

        used = set()

        def on_for(node):
            return tvm_ffi.WalkResult.SKIP if node.loop_var.same_as(loop.loop_var) else None

        walk(self.root, [(tirx.For, on_for), (BufferLoadNode, lambda n: used.add(n.source)),
                         (tirx.BufferStore, lambda n: used.add(n.buffer))], order="pre")
        return used

    def _gemm_may_fly(self, x, g):
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

    def _requirements(self, x, group, commits_before, groups, async_gemms):
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

    @staticmethod
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
        seq, p = [], 0
        while p < len(x.seq):
            q = p
            while q < len(x.seq) and x.seq[q] in x.async_copies:
                q += 1
            if q == p:
                seq.append(x.seq[p])
                p += 1
            else:
                seq += sorted(x.seq[p:q], key=lambda w: urgency[w])
                p = q
        return seq, urgency

    def rewrite_explicit(self, loop, x):
        k, lo, n = loop.loop_var, loop.min, loop.extent
        depth, stage = x.depth, x.stage
        bufmap = self._multi_buffer(x.versions)
        version = {b: tirx.floormod(k, v) for b, v in x.versions.items()}
        seq, urgency = self._regroup_copies(x)
        x.seq, x.pos = seq, {i: p for p, i in enumerate(seq)}
        pos = x.pos
        # commit groups: adjacent copies needed equally soon share one; every slot commits `groups` of them (empty
        # ones where the copies are guarded off), so the wait counts are the same in every slot
        group, commits_before, ends_run, groups = {}, {}, set(), 0
        for p, i in enumerate(seq):
            commits_before[i] = groups
            if i in x.async_copies:
                group[i] = groups
                nxt = seq[p + 1] if p + 1 < len(seq) else None
                if nxt not in x.async_copies or urgency[nxt] != urgency[i]:
                    ends_run.add(i)
                    groups += 1
        async_gemms = {i for i in range(len(seq)) if self._wgmma_gemm(x.stmts[i]) and self._gemm_may_fly(x, i)}
        reqs = self._requirements(x, group, commits_before, groups, async_gemms)
        analyzer = tvm.sym.Analyzer()

        def emit(i, t):
            """Statement i in prologue slot t, or (t None) in the loop's slot k + depth; None where it has no
            iteration there."""
            if t is not None and t < stage[i]:
                return None
            stmt = _retarget(x.stmts[i], bufmap, version) if bufmap else x.stmts[i]
            if i in x.async_copies:
                stmt = _make_async(stmt)
            if i in async_gemms:
                stmt = tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, 1, stmt)
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
                    out.append(_extern(f"tilex::cp_async_wait<{min(lands)}>"))
                if any(r.kind != "free" for r in start):
                    out.append(_extern("tilex::fence_proxy_async"))
                out.append(_sync())
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

            for p, i in enumerate(seq):
                c = commits_before[i]
                mid = [r for r in reqs if r.delta == 0 and r.dst == i and active(r, t)]
                if any(not covered(r, c) for r in mid):
                    waits = [r.n for r in mid if r.kind == "land"]
                    fenced = any(r.kind != "free" for r in mid)
                    if waits:
                        out.append(_extern(f"tilex::cp_async_wait<{min(waits)}>"))
                    if fenced:
                        out.append(_extern("tilex::fence_proxy_async"))
                    out.append(_sync())
                    blocks.append((p, c, min(waits) if waits else None, fenced))
                stmt = emit(i, t)
                if stmt is not None:
                    out.append(stmt)
                if i in ends_run:
                    out.append(_extern("tilex::cp_async_commit"))
            return out

        prologue = [s for t in range(depth) for s in slot(t)]
        ann = {key: v for key, v in loop.annotations.items()
               if key not in (NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE)}
        new_loop = tirx.For(k, lo, n, tirx.ForKind.SERIAL, _seq(slot(None)), None, ann)
        tail = []
        if async_gemms:
            # as in `rewrite`: the last MMAs finish before shared memory is reused after the loop
            tail += [_extern("tilex::wgmma_wait<0>"), _sync()]
        if x.async_copies:
            tail.append(_extern("tilex::cp_async_wait<0>"))
        return _seq(prologue + [new_loop] + tail)

    def _ws_ok(self, loop, producers, consumers):
        """Warp specialization applies to a top-level pipelined loop that feeds wgmma from TMA-able copies."""
        from tilex import config
        from tilex.op.tma_load import tma_eligible

        if config.get("disable_warp_specialized", False) or config.get("disable_tma", False):
            return False
        if self.threads is None or loop not in self.top_level or not self._async_consumer(consumers):
            return False
        if self.threads % 128 or self.threads + 128 > 1024:
            return False
        return all(tma_eligible(op.src, op.dst) for _, op in producers)

    def rewrite_ws(self, loop, plan):
        """Producer warpgroup (TMA + mbarriers) / consumer warpgroups (wgmma) version of `rewrite`."""
        from tilex.op.tma_load import tma_box, tma_load_call

        stages, producers, consumers, produced = plan
        k, n = loop.loop_var, loop.extent
        bufmap = self._multi_buffer({b: stages for b in produced})
        full = tirx.decl_buffer((stages,), "uint64", "tma_full", scope="shared")
        empty = tirx.decl_buffer((stages,), "uint64", "tma_empty", scope="shared")
        t = self.thread_var
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
            rows, cols, _, _ = tma_box(op.dst)
            nbytes += rows * cols * tvm.DataType(str(op.dst.buffer.dtype)).bits // 8
            dst = Region(bufmap[op.dst.buffer], [s, *op.dst.mins], [1, *op.dst.extents])
            loads.append(tirx.Evaluate(tma_load_call(op.src, dst, tirx.BufferLoad(full, [s]))))

        def ptr(buf, i):
            return tirx.address_of(tirx.BufferLoad(buf, [i]))

        def ext(name, *args):
            return tirx.Evaluate(tirx.call_extern("void", name, *args))

        producer = tirx.For(k, lo, hi - lo, tirx.ForKind.SERIAL, _seq([
            tirx.IfThenElse(g >= stages, ext("tilex::mbar_wait", ptr(empty, s), tirx.floormod(it + 1, 2)),
                            None),
            ext("tilex::mbar_arrive_expect_tx", ptr(full, s), nbytes),
            *loads]))
        warps = self.threads // 32
        compute = tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, 2,
                                _retarget(_seq(consumers), bufmap, s))
        lane0 = tirx.floormod(t, 32) == 0
        release = tirx.IfThenElse(
            tirx.And(k - lo > 0, lane0),
            ext("tilex::mbar_arrive", ptr(empty, tirx.floormod(g - 1, stages))), None)
        consumer = tirx.For(k, lo, hi - lo, tirx.ForKind.SERIAL, _seq([
            ext("tilex::mbar_wait", ptr(full, s), tirx.floormod(it, 2)), compute, release]))
        # the last stage is released as soon as its MMAs have completed, not by the next tile's first iteration:
        # in a persistent kernel the producer can then fill all S stages while the consumers run the epilogue
        last = base + hi - lo - 1
        trips = tvm.sym.Analyzer().simplify(n)
        cond = lane0 if isinstance(trips, tirx.IntImm) and trips.value > 0 else tirx.And(hi - lo > 0, lane0)
        drain = _seq([_extern("tilex::wgmma_wait<0>"), tirx.IfThenElse(
            cond, ext("tilex::mbar_arrive", ptr(empty, tirx.floormod(last, stages))), None)])
        consumer = _seq([consumer, drain])
        i = tirx.Var("bar_i", "int32")
        init = _seq([tirx.IfThenElse(t == 0, _seq([
            tirx.For(i, 0, stages, tirx.ForKind.UNROLLED, _seq([ext("tilex::mbar_init", ptr(full, i), 1),
                                                                 ext("tilex::mbar_init", ptr(empty, i), warps)])),
            ext("tilex::mbar_init_fence")]), None)])
        # (the barrier after the consumers' final wgmma wait, below, plays the same role as in `rewrite`)
        producer = _segment_attrs(base, lo, hi, loop, producer)
        consumer = _segment_attrs(base, lo, hi, loop, consumer)
        return _seq([tirx.AllocBuffer(full), tirx.AllocBuffer(empty),
                     tirx.AttrStmt(tirx.const(0, "int32"), WS_INIT, 0, init),
                     tirx.AttrStmt(tirx.const(0, "int32"), WS_PRODUCER, self.threads, producer),
                     consumer, _sync()])

    def _multi_buffer(self, versions):
        """{buffer: its multi-buffered form} for {buffer: versions wanted}. The form holds the most versions any
        loop wants (`depth`), so loops that share a buffer may index it modulo their own count."""
        bufmap = {}
        for b, v in versions.items():
            if b not in self.multi:
                n = max(v, self.depth.get(b, v))
                self.multi[b] = tirx.decl_buffer((n, *b.shape), b.dtype, b.name, scope=b.scope())
            if int(self.multi[b].shape[0]) < v:
                raise TileOpError(f"T.Pipelined: shared buffer '{b.name}' is multi-buffered by nested pipelined loops "
                                  f"with different depths")
            bufmap[b] = self.multi[b]
        return bufmap

    @staticmethod
    def versions_of(sched):
        kind, plan = sched
        if kind == "derived":
            return {b: plan[0] for b in plan[3]}
        return dict(plan.versions)

    def rewrite(self, loop, plan):
        stages, producers, consumers, produced = plan
        if self._ws_ok(loop, producers, consumers):
            return self.rewrite_ws(loop, plan)
        k = loop.loop_var
        n = loop.extent
        bufmap = self._multi_buffer({b: stages for b in produced})
        analyzer = tvm.sym.Analyzer()

        def issue(it):
            # written for iteration k, then moved to iteration `it` (stage index included)
            body = _seq([_make_async(_retarget(s, bufmap, tirx.floormod(k, stages))) for s, _ in producers])
            return substitute(body, {k: it})

        commit = _extern("tilex::cp_async_commit")
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
        compute = _retarget(_seq(consumers), bufmap, tirx.floormod(k, stages))
        landed = [_extern(f"tilex::cp_async_wait<{stages - 2}>"), _extern("tilex::fence_proxy_async"), _sync()]
        if self._async_consumer(consumers):
            # wgmma runs asynchronously: iteration k issues its MMAs, then waits only for those of k - 1
            # (wgmma_wait<1>), which frees stage (k - 1) % S == (k + S - 1) % S for the refill issued after it
            compute = tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, 1, compute)
            step = landed + [compute] + refill
            # a barrier after the last MMAs: shared memory written after the loop (an epilogue tile) may reuse the
            # bytes of stages that another warpgroup's MMAs are still reading until its own wait
            tail = [_extern("tilex::wgmma_wait<0>"), _sync()]
        else:
            # one barrier per iteration: after it every thread (a) sees stage k % S and (b) has finished computing
            # iteration k - 1, so stage (k - 1) % S == (k + S - 1) % S may be refilled before computing k
            step = landed + refill + [compute]
            tail = []
        ann = {key: v for key, v in loop.annotations.items()
               if key not in (NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE)}
        new_loop = tirx.For(k, loop.min, n, tirx.ForKind.SERIAL, _seq(step), None, ann)
        return _seq(prologue + [new_loop] + tail + [_extern("tilex::cp_async_wait<0>")])


ASYNC_MMA_SCOPE = "tilex.async_mma"  # value 1: cp.async pipeline, 2: warp-specialized consumer
WS_INIT = "tilex.ws_init"  # barrier initialization, hoisted before the role split
WS_PRODUCER = "tilex.ws_producer"  # the producer loop; value = number of consumer threads
WS_PIPELINE_BASE = "tilex.ws_pipeline_base"  # node: the base var of the stage/phase counter; value: trip count
WS_PIPELINE_LO = "tilex.ws_pipeline_lo"  # node: the var of the loop's first iteration; value: the loop's min
WS_PIPELINE_HI = "tilex.ws_pipeline_hi"  # node: the var of the loop's end; value: min + extent


def _segment_attrs(base, lo, hi, loop, body):
    """`body` under the attributes binding its stage-counter base and its iteration range [lo, hi)."""
    body = tirx.AttrStmt(hi, WS_PIPELINE_HI, loop.min + loop.extent, body)
    body = tirx.AttrStmt(lo, WS_PIPELINE_LO, loop.min, body)
    return tirx.AttrStmt(base, WS_PIPELINE_BASE, loop.extent, body)


def _body_stmts(loop):
    return seq_items(loop.body)


def _strip(loop):
    ann = {key: v for key, v in loop.annotations.items() if key not in (NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE)}
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding, ann)


def inject_pipeline(func, target=None):
    from tilex.transform.kernel_scope import kernel_info

    info = kernel_info(func)
    allocs = {}
    def on_alloc(n):
        allocs[n.buffer] = n

    walk(func.body, (tirx.AllocBuffer, on_alloc))
    p = _Pipeliner(allocs, info.threads if info is not None else None, target,
                   info.thread_var if info is not None else None, _top_level_loops(func.body), func.body)
    explicit = []

    def size(node):
        # every loop's schedule first: a buffer two loops multi-buffer is allocated with the larger count
        if NUM_STAGES in node.annotations:
            sched = p.schedule(node)
            for b, v in (p.versions_of(sched) if sched is not None else {}).items():
                p.depth[b] = max(v, p.depth.get(b, 0))

    walk(func.body, (tirx.For, size))

    def on_for(node, m):
        body = m.mutate(node.body)
        if not body.same_as(node.body):
            node = tirx.For(node.loop_var, node.min, node.extent, node.kind, body, node.thread_binding,
                            node.annotations)
        if NUM_STAGES not in node.annotations:
            return node
        sched = p.schedule(node)
        if sched is None:
            return _strip(node)
        kind, plan = sched
        if kind == "explicit":
            explicit.append(node)
            return p.rewrite_explicit(node, plan)
        return p.rewrite(node, plan)

    body = mutate(func.body, (tirx.For, on_for))
    if not p.multi:
        return func.with_body(body) if not body.same_as(func.body) else func
    # a multi-buffered buffer must not be used anywhere else in its old form
    leftover = _buffers_used(body) & set(p.multi)
    if leftover:
        # used outside its pipelined loop: keep the original program (serial, correct)
        if explicit:
            import warnings

            warnings.warn(f"T.Pipelined: shared buffer(s) {', '.join(sorted(b.name for b in leftover))} are used "
                          f"outside their pipelined loop and cannot be multi-buffered; the loops run unpipelined",
                          stacklevel=2)
        body = mutate(func.body, (tirx.For, lambda n, m: _strip_all(n, m)))
        return func.with_body(body)
    body = map_nodes(body, (tirx.AllocBuffer, lambda n: tirx.AllocBuffer(p.multi[n.buffer])
                                         if n.buffer in p.multi else n))
    return func.with_body(body)


def _top_level_loops(body):
    """For loops that are direct children of the innermost launch scope's statement list."""
    node = body
    while isinstance(node, tirx.AttrStmt):
        node = node.body
    return [s for s in seq_items(node) if isinstance(s, tirx.For)]


def _strip_all(node, m):
    body = m.mutate(node.body)
    node = tirx.For(node.loop_var, node.min, node.extent, node.kind, body, node.thread_binding, node.annotations)
    return _strip(node) if NUM_STAGES in node.annotations else node


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.InjectSoftwarePipeline")
def InjectSoftwarePipeline(func, mod, pass_ctx):  # noqa: N802
    return inject_pipeline(func)
