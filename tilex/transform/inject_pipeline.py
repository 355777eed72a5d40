"""InjectSoftwarePipeline: multi-buffer the shared tiles fed by a ``T.Pipelined`` loop and overlap their loads.

Consumes: tile-level IR (before layout inference). In a loop annotated ``tilex.num_stages = S`` (S >= 2), the
top-level ``T.copy`` statements from global to a shared buffer allocated outside the loop are producers; every other
statement is a consumer.
Produces: each produced buffer ``X (shape)`` becomes ``X (S, shape)``; a prologue issues the copies of the first S-1
iterations; iteration k waits until at most S-2 cp.async groups are in flight (so stage k % S has landed), synchronizes the block
once, issues the copy of iteration k+S-1 into stage (k+S-1) % S (the stage everyone finished reading in iteration
k-1) as one commit group, and runs the consumers on stage k % S. Producer copies are marked asynchronous
(cp.async); copies that cannot be (sub-4-byte vectors) stay synchronous, which the same schedule keeps correct.
Loops whose shape does not fit this plan are left serial (still correct, not overlapped).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex._tir import BufferLoadNode, map_nodes, mutate, walk
from tilex.language.loop import NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE
from tilex.op.base import is_global, is_shared
from tilex.op.copy import CopyOp
from tilex.op.partition import substitute
from tilex.op.region import REGION_OP, Region
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
    """Point every access/region of the buffers in `bufmap` at stage `stage` of their multi-buffered version."""

    def on_load(n):
        new = bufmap.get(n.source)
        if new is None:
            return n
        return tirx.BufferLoad(new, [stage, *n.indices])

    def on_store(n):
        new = bufmap.get(n.buffer)
        if new is None:
            return n
        return tirx.BufferStore(new, n.value, [stage, *n.indices])

    def on_call(n):
        if isinstance(n.op, tvm.ir.Op) and n.op.name == REGION_OP:
            load = n.args[0]
            new = bufmap.get(load.source)
            if new is not None:
                r = Region(new, [stage, *load.indices], [1, *n.args[2:]])
                return r.to_call(int(n.args[1].value))
        return n

    # regions first (they contain loads of the old buffer that must not be rewritten on their own)
    stmt = map_nodes(stmt, (tvm.ir.Call, on_call), order="pre")
    return map_nodes(stmt, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store)], order="post")


def _make_async(stmt):
    call = stmt.value
    return tirx.Evaluate(tirx.call_intrin("handle", "tilex.copy", call.args[0], call.args[1], 1))


class _Pipeliner:
    def __init__(self, allocs, threads=None, target=None, thread_var=None, top_level=()):
        self.allocs = allocs  # buffers allocated in enclosing scopes -> their (replaceable) AllocBuffer
        self.multi = {}  # old shared buffer -> multi-buffered buffer
        self.threads, self.target, self.thread_var = threads, target, thread_var
        self.top_level = set(top_level)  # loops directly in the kernel's statement list

    def _async_consumer(self, consumers):
        """Whether a consumer is a T.gemm that will run on wgmma (asynchronously, see gemm_wgmma.py)."""
        from tilex.op import gemm_wgmma
        from tilex.op.gemm import GemmOp

        if self.threads is None:
            return False
        for c in consumers:
            op = parse_tile_op(c.value) if isinstance(c, tirx.Evaluate) and isinstance(c.value, tvm.ir.Call) else None
            if isinstance(op, GemmOp) and gemm_wgmma.plan(op, self.threads, self.target) is not None:
                return True
        return False

    def plan(self, loop):
        stages = int(loop.annotations[NUM_STAGES])
        body = loop.body
        stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
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
        bufmap = self._multi_buffer(produced, stages)
        full = tirx.decl_buffer((stages,), "uint64", "tma_full", scope="shared")
        empty = tirx.decl_buffer((stages,), "uint64", "tma_empty", scope="shared")
        t = self.thread_var
        # position in the kernel's stream of pipeline iterations: k - min + base, where the base var (bound by
        # the PersistentTiles pass: 0, or tiles done so far times the trip count) carries the stage and the
        # barrier phases from one output tile to the next in a persistent kernel
        base = tirx.Var("ws_base", "int32")
        g = k - loop.min + base
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

        producer = tirx.For(k, loop.min, n, tirx.ForKind.SERIAL, _seq([
            tirx.IfThenElse(g >= stages, ext("tilex::mbar_wait", ptr(empty, s), tirx.floormod(it + 1, 2)),
                            None),
            ext("tilex::mbar_arrive_expect_tx", ptr(full, s), nbytes),
            *loads]))
        warps = self.threads // 32
        compute = tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_MMA_SCOPE, 2,
                                _retarget(_seq(consumers), bufmap, s))
        release = tirx.IfThenElse(
            tirx.And(g > 0, tirx.floormod(t, 32) == 0),
            ext("tilex::mbar_arrive", ptr(empty, tirx.floormod(g - 1, stages))), None)
        consumer = tirx.For(k, loop.min, n, tirx.ForKind.SERIAL, _seq([
            ext("tilex::mbar_wait", ptr(full, s), tirx.floormod(it, 2)), compute, release]))
        i = tirx.Var("bar_i", "int32")
        init = _seq([tirx.IfThenElse(t == 0, _seq([
            tirx.For(i, 0, stages, tirx.ForKind.UNROLLED, _seq([ext("tilex::mbar_init", ptr(full, i), 1),
                                                                 ext("tilex::mbar_init", ptr(empty, i), warps)])),
            ext("tilex::mbar_init_fence")]), None)])
        # (the barrier after the consumers' final wgmma wait, below, plays the same role as in `rewrite`)
        producer = tirx.AttrStmt(base, WS_PIPELINE_BASE, n, producer)
        consumer = tirx.AttrStmt(base, WS_PIPELINE_BASE, n, consumer)
        return _seq([tirx.AllocBuffer(full), tirx.AllocBuffer(empty),
                     tirx.AttrStmt(tirx.const(0, "int32"), WS_INIT, 0, init),
                     tirx.AttrStmt(tirx.const(0, "int32"), WS_PRODUCER, self.threads, producer),
                     consumer, _extern("tilex::wgmma_wait<0>"), _sync()])

    def _multi_buffer(self, produced, stages):
        bufmap = {}
        for b in produced:
            if b not in self.multi:
                self.multi[b] = tirx.decl_buffer((stages, *b.shape), b.dtype, b.name, scope=b.scope())
            bufmap[b] = self.multi[b]
        return bufmap

    def rewrite(self, loop, plan):
        stages, producers, consumers, produced = plan
        if self._ws_ok(loop, producers, consumers):
            return self.rewrite_ws(loop, plan)
        k = loop.loop_var
        n = loop.extent
        bufmap = self._multi_buffer(produced, stages)
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
                   info.thread_var if info is not None else None, _top_level_loops(func.body))
    outside_use = {}

    def on_for(node, m):
        body = m.mutate(node.body)
        if not body.same_as(node.body):
            node = tirx.For(node.loop_var, node.min, node.extent, node.kind, body, node.thread_binding,
                            node.annotations)
        if NUM_STAGES not in node.annotations:
            return node
        plan = p.plan(node)
        if plan is None:
            return _strip(node)
        outside_use[node] = plan[3]
        return p.rewrite(node, plan)

    body = mutate(func.body, (tirx.For, on_for))
    if not p.multi:
        return func.with_body(body) if not body.same_as(func.body) else func
    # a multi-buffered buffer must not be used anywhere else in its old form
    leftover = _buffers_used(body) & set(p.multi)
    if leftover:
        # used outside its pipelined loop: keep the original program (serial, correct)
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
    items = list(node.seq) if isinstance(node, tirx.SeqStmt) else [node]
    return [s for s in items if isinstance(s, tirx.For)]


def _strip_all(node, m):
    body = m.mutate(node.body)
    node = tirx.For(node.loop_var, node.min, node.extent, node.kind, body, node.thread_binding, node.annotations)
    return _strip(node) if NUM_STAGES in node.annotations else node


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.InjectSoftwarePipeline")
def InjectSoftwarePipeline(func, mod, pass_ctx):  # noqa: N802
    return inject_pipeline(func)
