"""InitBarriers (tile level, first of the tile passes): the mbarriers a program allocates itself
(``T.alloc_barrier``) are initialized once, when the block starts.

Consumes: a tile program whose kernel body holds ``tilex.barrier_init(BufferLoad(bars, [0]), count_0, ...)``
markers, each right after the allocation of its barrier array (tilex.language.expert writes them).
Produces: each group of markers (consecutive in the kernel body, with only allocations and declarations between
them) replaced, where its last marker was, by: thread 0 gives every barrier of the group its arrival count and
fences the initialization (``fence.mbarrier_init``, ``fence.proxy.async``: the TMA unit and the other threads see
it), then the block synchronizes once. A marker anywhere but directly in the kernel body is a ValueError.
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import BARRIER_INIT_OP
from tilex.ir.visit import is_op_call, seq_items, storage_sync, walk
from tilex.transform.kernel_scope import outer_launch_chain, with_launch_items


def _is_marker(stmt) -> bool:
    return isinstance(stmt, tirx.Evaluate) and is_op_call(stmt.value, BARRIER_INIT_OP)


def _inits(marker):
    """mbarrier initializations of one marker's barrier array."""
    load = marker.value.args[0]
    bars = load.source
    return [intrin.mbar_init(tirx.address_of(tirx.BufferLoad(bars, [tirx.const(i, "int32")])), count)
            for i, count in enumerate(marker.value.args[1:])]


def init_barriers(func):
    markers = []
    walk(func.body, (tirx.Evaluate, lambda n: markers.append(n) if _is_marker(n) else None))
    if not markers:
        return func
    chain = outer_launch_chain(func.body)
    items = seq_items(chain[-1].body) if chain is not None else []
    if sum(1 for s in items if _is_marker(s)) != len(markers):
        raise ValueError("T.alloc_barrier must be written directly in the T.Kernel body (not inside a loop, a "
                         "condition or a T.ws region): its barriers are initialized once, when the block starts")
    threads = [a.node.var for a in chain if a.node.thread_tag.startswith("threadIdx")]
    first = None
    for t in threads:
        first = t == 0 if first is None else tirx.And(first, t == 0)
    if first is None:
        first = tirx.const(True, "bool")

    out, group = [], []

    def close():
        if group:
            inits = [s for m in group for s in _inits(m)] + [intrin.mbar_init_fence()]
            out.extend([tirx.IfThenElse(first, tirx.SeqStmt(inits), None), storage_sync()])
            group.clear()

    for s in items:
        if _is_marker(s):
            group.append(s)
        elif isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)):
            out.append(s)
        else:
            close()
            out.append(s)
    close()
    return with_launch_items(func, chain, out)
