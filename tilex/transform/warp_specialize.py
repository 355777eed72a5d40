"""WarpSpecialize: split a kernel into a TMA producer warpgroup and its consumer warpgroups.

Consumes: per-thread TIR (after LowerTileOps) whose kernel statement list holds a ``tilex.ws_producer`` region
(the producer loop built by InjectSoftwarePipeline; its value is the number of consumer threads C) and a
``tilex.ws_init`` region (mbarrier initialization).
Produces: the block grows by one warpgroup (C + 128 threads). After the allocations, thread 0 initializes the
barriers and the whole block synchronizes once; then threads >= C lower their register budget and one of them
runs the producer loop, while threads < C raise theirs and run every other statement of the kernel (prologue,
consumer loop, epilogue) inside a ``tilex.ws_consumer`` region, whose barriers `NamedBarriers` later turns into
consumer-only named barriers (``__syncthreads`` would wait for the producer).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex._tir import map_nodes
from tilex.transform.inject_pipeline import WS_INIT, WS_PRODUCER
from tilex.transform.kernel_scope import kernel_info

WS_CONSUMER = "tilex.ws_consumer"
PRODUCER_REGS, CONSUMER_REGS = 40, 232


def _ext(name, *args):
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


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
    items = list(launch.body.seq) if isinstance(launch.body, tirx.SeqStmt) else [launch.body]
    producer = [s for s in items if isinstance(s, tirx.AttrStmt) and s.attr_key == WS_PRODUCER]
    if not producer:
        return launch
    if len(producer) > 1:
        raise ValueError("warp specialization supports one pipelined loop per kernel")
    inits = [s.body for s in items if isinstance(s, tirx.AttrStmt) and s.attr_key == WS_INIT]
    allocs = [s for s in items if isinstance(s, tirx.AllocBuffer)]
    rest = [s for s in items if not isinstance(s, tirx.AllocBuffer)
            and not (isinstance(s, tirx.AttrStmt) and s.attr_key in (WS_PRODUCER, WS_INIT))]
    regs = CONSUMER_REGS if consumers >= 256 else 240
    prod = tirx.SeqStmt([_ext(f"tilex::reg_dealloc<{PRODUCER_REGS}>"),
                         tirx.IfThenElse(t == consumers, producer[0].body, None)])
    cons = tirx.AttrStmt(tirx.const(0, "int32"), WS_CONSUMER, consumers,
                         tirx.SeqStmt([_ext(f"tilex::reg_alloc<{regs}>")] + rest))
    sync = tirx.Evaluate(tirx.call_intrin("void", "tirx.tvm_storage_sync", "shared"))
    body = tirx.SeqStmt(allocs + inits + [sync, tirx.IfThenElse(t >= consumers, prod, cons)])
    total = consumers + 128
    iv = launch.node
    new_iv = tirx.IterVar(tvm.ir.Range(0, total), iv.var, iv.iter_type, iv.thread_tag)
    found["done"] = True
    return tirx.AttrStmt(new_iv, "thread_extent", tirx.const(total, "int32"), body)


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.NamedBarriers")
def NamedBarriers(func, mod, ctx):  # noqa: N802
    """Inside ``tilex.ws_consumer`` regions, block barriers become named barriers over the consumer threads."""

    def on_attr(node):
        if node.attr_key != WS_CONSUMER:
            return node
        n = int(node.value.value)

        def on_eval(ev):
            v = ev.value
            if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == "tirx.tvm_storage_sync":
                return _ext("tilex::named_barrier_sync", n)
            return ev

        return map_nodes(node.body, (tirx.Evaluate, on_eval))

    return func.with_body(map_nodes(func.body, (tirx.AttrStmt, on_attr), order="post"))
