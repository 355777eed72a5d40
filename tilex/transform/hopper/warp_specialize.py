"""WarpSpecialize: split a kernel into a TMA producer warpgroup and its consumer warpgroups.

Consumes: per-thread TIR (after LowerTileOps) whose kernel statement list holds a ``tilex.ws_producer`` region
(the producer loop built by :mod:`tilex.transform.hopper.ws_loops`; its value is the number of consumer threads C)
and a ``tilex.ws_init`` region (mbarrier initialization).
Produces: the block grows by one warpgroup (C + 128 threads). After the allocations, thread 0 initializes the
barriers and the whole block synchronizes once; then threads >= C lower their register budget and one of them
runs the producer loop, while threads < C raise theirs and run every other statement of the kernel (prologue,
consumer loop, epilogue) inside a ``tilex.ws_consumer`` region, whose barriers `NamedBarriers`
(:mod:`tilex.transform.hopper.roles`) later turns into consumer-only named barriers (``__syncthreads`` would wait
for the producer). The register split follows from occupancy (`occupancy.register_budget`: blocks per SM from shared
memory and registers, the producer keeps 40 registers); a ``min_blocks_per_sm`` launch marker records the occupancy
it assumes.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import WS_CONSUMER, WS_INIT, WS_PRODUCER
from tilex.ir.shared_memory import block_footprint, buffer_bits, buffer_bytes
from tilex.ir.visit import BufferLoadNode, load_buffer, map_nodes, seq_items, storage_sync, walk
from tilex.op.base import TileOpError
from tilex.transform.hopper.occupancy import PRODUCER_REGS, register_budget
from tilex.transform.hopper.ws_decision import kernel_scalars, resolve_scalars
from tilex.transform.kernel_scope import kernel_info

__all__ = ["register_budget", "warp_specialize"]


def _shared_bytes(allocs):
    """The block's shared memory footprint (`tilex.ir.shared_memory.block_footprint`)."""
    def total(scope):
        return sum(buffer_bytes(a.buffer) for a in allocs if a.buffer.scope() == scope)

    return block_footprint(total("shared"), total("shared.dyn"))


def _local_words(allocs):
    return sum((buffer_bits(a.buffer) + 31) // 32 for a in allocs if a.buffer.scope() == "local")


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
    prod = tirx.SeqStmt([intrin.reg_dealloc(PRODUCER_REGS),
                         tirx.IfThenElse(t == consumers, _inline_scalars(launch.body, producer[0].body), None)])
    cons = tirx.AttrStmt(tirx.const(0, "int32"), WS_CONSUMER, consumers,
                         tirx.SeqStmt([intrin.reg_alloc(regs)] + rest))
    # the register split above assumes `blocks` resident blocks: the CUDA postprocessor turns this marker into
    # the kernel's __launch_bounds__ minimum
    inits = [intrin.min_blocks_per_sm(blocks)] + inits
    sync = storage_sync()
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
    body = resolve_scalars(body, kernel_scalars(kernel_body, seq_items(kernel_body)))
    written, read = set(), []
    walk(body, (tirx.BufferStore, lambda n: written.add(n.buffer)))
    walk(body, (BufferLoadNode, lambda n: read.append(load_buffer(n))))
    missing = sorted({b.name for b in read if b.scope() == "local" and b not in written})
    if missing:  # ws_decision keeps such loops on the cp.async pipeline: reaching this is a bug in tilex
        raise TileOpError(f"internal: the warp-specialized producer reads local variable(s) {missing}, which only "
                          f"the consumer warpgroups compute; pass_configs={{'tilex.disable_warp_specialized': True}} "
                          f"avoids it")
    return body
