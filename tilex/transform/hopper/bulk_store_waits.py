"""BulkStoreWaits (among TVM's passes, after NamedBarriers): TMA stores' shared-memory reads finish before barriers.

Consumes: per-thread TIR with TMA stores / reductions (issued by thread 0: op/copy.py's TMA store, op/atomic.py's
TMA reduction).
Produces: before every block / named / cluster barrier and at the end of the kernel, thread 0 waits until its bulk
stores have read their shared-memory tiles (``bulk_wait_read<0>``); at the barriers inside a loop annotated
``tilex.bulk_store_depth`` = d (StageEpilogue's blocks staged in two alternating tiles, one bulk group each), until
all but its latest d groups have (``bulk_wait_read<d>``): the block before, still being read, is in the other tile.
Right before such a loop thread 0 waits for all its groups, so that inside it every group is the loop's own (or
there are none: a stream-K block that does not own its tile skips the stores).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import BULK_STORE_DEPTH
from tilex.ir.visit import is_sync, map_nodes, walk


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.BulkStoreWaits")
def BulkStoreWaits(func, mod, ctx):  # noqa: N802
    """Kernels with TMA stores (issued by thread 0): before every block/named/cluster barrier and at the end of
    the kernel, thread 0 waits until its bulk stores have read their shared-memory tiles. A barrier ordering a
    later write of such a tile after the store therefore also orders it after the read, without the store
    itself waiting (in a persistent kernel the wait lands a whole mainloop later, when it costs nothing)."""
    found = []
    walk(func.body, (tvm.ir.Call, lambda c: found.append(c) if intrin.is_bulk_store(c) else None))
    if not found:
        return func
    thread = []
    walk(func.body, (tirx.AttrStmt, lambda a: thread.append(a.node.var) if a.attr_key == "thread_extent"
                     and a.node.thread_tag == "threadIdx.x" else None))
    if not thread:
        return func
    t = thread[0]

    def wait():
        return tirx.IfThenElse(t == 0, intrin.bulk_wait_read(0), None)

    def on_eval(ev):
        return tirx.SeqStmt([wait(), ev]) if is_sync(ev) or _is_barrier_call(ev) else ev

    body = map_nodes(func.body, (tirx.Evaluate, on_eval))

    def on_attr(a):
        if a.attr_key == "thread_extent" and a.node.thread_tag == "threadIdx.x":
            return tirx.AttrStmt(a.node, a.attr_key, a.value, tirx.SeqStmt([a.body, wait()]))
        return a

    body = map_nodes(body, (tirx.AttrStmt, on_attr))
    return func.with_body(map_nodes(body, (tirx.For, lambda loop: _shallower_waits(loop, t))))


def _shallower_waits(loop, thread):
    """`loop` with its barriers' waits for all groups relaxed to its ``tilex.bulk_store_depth`` latest ones, after a
    wait of thread `thread` == 0 for all of them."""
    depth = loop.annotations.get(BULK_STORE_DEPTH) if loop.annotations else None
    if depth is None:
        return loop
    every = intrin.name_of(intrin.bulk_wait_read(0))
    body = map_nodes(loop.body, (tirx.Evaluate, lambda ev: intrin.bulk_wait_read(int(depth))
                                 if intrin.name_of(ev) == every else ev))
    loop = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations)
    # the loop's first barrier (before its first block's writes) orders the other threads after this wait
    return tirx.SeqStmt([tirx.IfThenElse(thread == 0, intrin.bulk_wait_read(0), None), loop])


def _is_barrier_call(stmt):
    return any(intrin.is_call(stmt, name) for name in intrin.BARRIERS)
