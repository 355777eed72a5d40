"""WarpSpecialize: split a kernel into a TMA producer warpgroup and its consumer warpgroups.

Consumes: per-thread TIR (after LowerTileOps) whose kernel statement list holds a ``tilex.ws_producer`` region
(the producer loop built by InjectSoftwarePipeline; its value is the number of consumer threads C) and a
``tilex.ws_init`` region (mbarrier initialization).
Produces: the block grows by one warpgroup (C + 128 threads). After the allocations, thread 0 initializes the
barriers and the whole block synchronizes once; then threads >= C lower their register budget and one of them
runs the producer loop, while threads < C raise theirs and run every other statement of the kernel (prologue,
consumer loop, epilogue) inside a ``tilex.ws_consumer`` region, whose barriers `NamedBarriers` later turns into
consumer-only named barriers (``__syncthreads`` would wait for the producer). The register split follows from
occupancy (`register_budget`: blocks per SM from shared memory, the producer keeps 40 registers).

Also here, run among TVM's passes: `UnfoldRoles` (before ThreadSync: the role split as two statements in
sequence, so ThreadSync may place the consumers' barriers) and `NamedBarriers` (after it: fold back, named
barriers in the consumer region).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex._tir import BufferLoadNode, load_buffer, map_nodes, seq_items, walk
from tilex.engine.shared_memory import buffer_bits, buffer_bytes
from tilex.transform.inject_pipeline import WS_INIT, WS_PRODUCER
from tilex.transform.kernel_scope import kernel_info

WS_CONSUMER = "tilex.ws_consumer"
PRODUCER_REGS = 40
REGS_PER_SM, SMEM_PER_SM = 65536, 232448  # sm90: register file and shared memory a multiprocessor offers
SMEM_RESERVED_PER_BLOCK = 1024  # the driver keeps 1 KB of shared memory per resident block


def _shared_bytes(allocs):
    return sum(buffer_bytes(a.buffer) for a in allocs if a.buffer.scope() in ("shared", "shared.dyn"))


def _local_words(allocs):
    return sum((buffer_bits(a.buffer) + 31) // 32 for a in allocs if a.buffer.scope() == "local")


def register_budget(consumers, smem_bytes, local_words=0):
    """(blocks per multiprocessor, registers per thread at entry, consumer registers after ``setmaxnreg``).

    Two blocks share a multiprocessor when shared memory allows and the entry register cap still holds the
    per-thread locals (accumulators) with room to spare: ptxas compiles the whole kernel under that cap, the
    ``setmaxnreg`` raise only lets the consumers keep more values live. The producer warpgroup drops to
    PRODUCER_REGS and the consumers take what it frees (a multiple of 8, at most 240)."""
    total = consumers + 128

    def plan(blocks):
        entry = min(255, REGS_PER_SM // (blocks * total)) // 8 * 8
        return blocks, entry, min(240, (entry * total - PRODUCER_REGS * 128) // consumers // 8 * 8)

    if SMEM_PER_SM // max(1, smem_bytes + SMEM_RESERVED_PER_BLOCK) >= 2:
        two = plan(2)
        if two[1] >= local_words + 48:
            return two
    return plan(1)


def _ext(name, *args):
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


def extern_name(node):
    """The function name of a ``call_extern`` (a Call, or an Evaluate of one), else None."""
    call = node.value if isinstance(node, tirx.Evaluate) else node
    if isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name == "tirx.call_extern":
        return str(call.args[0].value)
    return None


def warp_specialize(func):
    info = kernel_info(func)
    if info is None:
        return func
    t, consumers = info.thread_var, info.threads
    found = {}

    def on_attr(node):
        if node.attr_key == "thread_extent" and node.node.thread_tag == "threadIdx.x":
            return _split(node, found, t, consumers)
        return node

    body = map_nodes(func.body, (tirx.AttrStmt, on_attr), order="pre")
    return func.with_body(body) if found.get("done") else func


def _split(launch, found, t, consumers):
    items = seq_items(launch.body)
    producer = [s for s in items if isinstance(s, tirx.AttrStmt) and s.attr_key == WS_PRODUCER]
    if not producer:
        return launch
    if len(producer) > 1:
        raise ValueError("warp specialization supports one pipelined loop per kernel")
    inits = [s.body for s in items if isinstance(s, tirx.AttrStmt) and s.attr_key == WS_INIT]
    allocs = [s for s in items if isinstance(s, tirx.AllocBuffer)]
    rest = [s for s in items if not isinstance(s, tirx.AllocBuffer)
            and not (isinstance(s, tirx.AttrStmt) and s.attr_key in (WS_PRODUCER, WS_INIT))]
    blocks, _, regs = register_budget(consumers, _shared_bytes(allocs), _local_words(allocs))
    prod = tirx.SeqStmt([_ext(f"tilex::reg_dealloc<{PRODUCER_REGS}>"),
                         tirx.IfThenElse(t == consumers, _inline_scalars(launch.body, producer[0].body), None)])
    cons = tirx.AttrStmt(tirx.const(0, "int32"), WS_CONSUMER, consumers,
                         tirx.SeqStmt([_ext(f"tilex::reg_alloc<{regs}>")] + rest))
    # the register split above assumes `blocks` resident blocks: the CUDA postprocessor turns this marker into
    # the kernel's __launch_bounds__ minimum
    inits = [_ext(f"tilex::min_blocks_per_sm<{blocks}>")] + inits
    sync = tirx.Evaluate(tirx.call_intrin("void", "tirx.tvm_storage_sync", "shared"))
    body = tirx.SeqStmt(allocs + inits + [sync, tirx.IfThenElse(t >= consumers, prod, cons)])
    total = consumers + 128
    iv = launch.node
    new_iv = tirx.IterVar(tvm.ir.Range(0, total), iv.var, iv.iter_type, iv.thread_tag)
    found["done"] = True
    return tirx.AttrStmt(new_iv, "thread_extent", tirx.const(total, "int32"), body)


def _inline_scalars(kernel_body, body):
    """`body` with the kernel's scalars substituted: ``bx = b1`` before the pipelined loop (the frontend makes it a
    one-element local, stored once) stays with the consumers, so the producer gets the value itself. Later passes
    then also see the producer's loads in terms of the block indices (what a load depends on decides whether a
    cluster multicasts it)."""
    stores = {}
    walk(kernel_body, (tirx.BufferStore, lambda n: stores.__setitem__(n.buffer, stores.get(n.buffer, 0) + 1)))
    scalars = {}

    def resolve(expr):
        return map_nodes(expr, (BufferLoadNode, lambda n: scalars.get(load_buffer(n), n)))

    for s in seq_items(kernel_body):
        if (isinstance(s, tirx.BufferStore) and s.buffer.scope() == "local" and stores[s.buffer] == 1
                and all(hasattr(d, "value") and int(d.value) == 1 for d in s.buffer.shape)):
            scalars[s.buffer] = resolve(s.value)
    body = resolve(body) if scalars else body
    _check_producer_locals(body)
    return body


def _check_producer_locals(body):
    """The producer runs none of the consumers' statements: a local it reads must be written in its own loop."""
    written, read = set(), []
    walk(body, (tirx.BufferStore, lambda n: written.add(n.buffer)))
    walk(body, (BufferLoadNode, lambda n: read.append(load_buffer(n))))
    missing = sorted({b.name for b in read if b.scope() == "local" and b not in written})
    if missing:
        raise ProducerNeedsConsumerState(
            f"warp specialization: the producer's copies read local variable(s) {missing}, which only the consumer "
            "warpgroups compute (only scalars bound once before the pipelined loop are passed on)")


class ProducerNeedsConsumerState(ValueError):
    """The producer loop would read values only the consumers compute; the kernel is built without warp
    specialization instead (`tilex.engine.pipeline.run_tile_passes`)."""


WS_PRODUCER_SIDE = "tilex.ws_producer_side"  # node: the role-split condition; body: the producer's statements


def _is_role_split(stmt):
    return (isinstance(stmt, tirx.IfThenElse) and isinstance(stmt.else_case, tirx.AttrStmt)
            and stmt.else_case.attr_key == WS_CONSUMER)


def _is_sync(stmt):
    v = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == "tirx.tvm_storage_sync"


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.UnfoldRoles")
def UnfoldRoles(func, mod, ctx):  # noqa: N802
    """Before TVM's ThreadSync: the role split ``if t >= C: producer else: consumer`` becomes the two branches in
    sequence (the producer's in a ``tilex.ws_producer_side`` attribute that keeps the condition). ThreadSync can
    then place the barriers the consumers' shared-memory accesses need (it refuses to insert any inside a
    condition); NamedBarriers folds the split back."""

    def on_if(node):
        if not _is_role_split(node):
            return node
        return tirx.SeqStmt([tirx.AttrStmt(node.condition, WS_PRODUCER_SIDE, 0, node.then_case), node.else_case])

    return func.with_body(map_nodes(func.body, (tirx.IfThenElse, on_if)))


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.NamedBarriers")
def NamedBarriers(func, mod, ctx):  # noqa: N802
    """Folds UnfoldRoles' sequence back into ``if t >= C: producer else: consumer``; inside the consumer region
    block barriers become named barriers over the consumer threads. A barrier ThreadSync placed in the producer
    or between the roles could never be met by all threads: that is reported instead of emitted."""

    def on_attr(node):
        if node.attr_key != WS_CONSUMER:
            return node
        n = int(node.value.value)

        def on_eval(ev):
            if _is_sync(ev):
                return _ext("tilex::named_barrier_sync", n)
            return ev

        return tirx.AttrStmt(node.node, node.attr_key, node.value, map_nodes(node.body, (tirx.Evaluate, on_eval)))

    def fold(seq):
        items = list(seq.seq)
        out, i = [], 0
        while i < len(items):
            s = items[i]
            if isinstance(s, tirx.AttrStmt) and s.attr_key == WS_PRODUCER_SIDE:
                j = i + 1
                while j < len(items) and _is_sync(items[j]):
                    j += 1  # a barrier between the roles: each side is one set of threads, nothing to order
                cons = items[j] if j < len(items) else None
                if not (isinstance(cons, tirx.AttrStmt) and cons.attr_key == WS_CONSUMER):
                    raise ValueError("warp specialization: the consumer region does not follow the producer's")
                bad = []
                walk(s.body, (tirx.Evaluate, lambda e: bad.append(e) if _is_sync(e) else None))
                if bad:
                    raise ValueError("warp specialization: the producer warpgroup would need a block barrier "
                                     "(its statements share memory with generic accesses); use "
                                     "pass_configs={'tilex.disable_warp_specialized': True}")
                out.append(tirx.IfThenElse(s.node, s.body, on_attr(cons)))
                i = j + 1
                continue
            out.append(s)
            i += 1
        return tirx.SeqStmt(out) if len(out) > 1 else out[0]

    def on_seq(seq):
        if any(isinstance(s, tirx.AttrStmt) and s.attr_key == WS_PRODUCER_SIDE for s in seq.seq):
            return fold(seq)
        return seq

    body = map_nodes(func.body, (tirx.SeqStmt, on_seq), order="post")
    # consumer regions not unfolded (kernels built without UnfoldRoles)
    body = map_nodes(body, (tirx.IfThenElse, lambda n: tirx.IfThenElse(n.condition, n.then_case, on_attr(n.else_case))
                            if _is_role_split(n) and not _converted(n.else_case) else n))
    return func.with_body(body)


def _converted(consumer):
    found = []
    walk(consumer.body, (tirx.Evaluate, lambda e: found.append(e) if _is_sync(e) else None))
    return not found


BARRIER_EXTERNS = ("tilex::named_barrier_sync", "tilex::cluster_sync")


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.BulkStoreWaits")
def BulkStoreWaits(func, mod, ctx):  # noqa: N802
    """Kernels with TMA stores (issued by thread 0): before every block/named/cluster barrier and at the end of
    the kernel, thread 0 waits until its bulk stores have read their shared-memory tiles. A barrier ordering a
    later write of such a tile after the store therefore also orders it after the read, without the store
    itself waiting (in a persistent kernel the wait lands a whole mainloop later, when it costs nothing)."""
    found = []
    walk(func.body, (tvm.ir.Call, lambda c: found.append(c) if extern_name(c) == "tilex::tma_store_2d" else None))
    if not found:
        return func
    thread = []
    walk(func.body, (tirx.AttrStmt, lambda a: thread.append(a.node.var) if a.attr_key == "thread_extent"
                     and a.node.thread_tag == "threadIdx.x" else None))
    if not thread:
        return func
    t = thread[0]

    def wait():
        return tirx.IfThenElse(t == 0, _ext("tilex::bulk_wait_read<0>"), None)

    def on_eval(ev):
        return tirx.SeqStmt([wait(), ev]) if _is_sync(ev) or extern_name(ev) in BARRIER_EXTERNS else ev

    body = map_nodes(func.body, (tirx.Evaluate, on_eval))

    def on_attr(a):
        if a.attr_key == "thread_extent" and a.node.thread_tag == "threadIdx.x":
            return tirx.AttrStmt(a.node, a.attr_key, a.value, tirx.SeqStmt([a.body, wait()]))
        return a

    return func.with_body(map_nodes(body, (tirx.AttrStmt, on_attr)))
