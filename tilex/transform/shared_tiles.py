"""Shared tiles that never share memory, so that barriers can be planned tile by tile (tilex.transform.thread_sync).

KeepTilesApart (among TVM's passes, before ThreadSync and MergeSharedMemoryAllocations)
  Consumes: flat per-thread TIR of one kernel, with ``shared.dyn`` allocations anywhere in its body (a cross-warp
  reduction's workspace or an atomic's staging tile are allocated where the operator runs).
  Produces: every ``shared.dyn`` allocation at the start of the kernel body (inside its launch scopes, in their
  original order), followed by a ``tilex.keep_alive`` statement touching all of them; another one ends the body.

DropKeepAlive (right after MergeSharedMemoryAllocations)
  Removes the ``tilex.keep_alive`` statements.

Why: MergeSharedMemoryAllocations lets two buffers share memory when the statements touching one all come after
those touching the other (at the level of their allocation). Touched first and last in the kernel, no tile has
such a neighbour, so distinct tiles never alias and ThreadSync may treat them as independent. Before, ThreadSync ran
after the merge, saw one array, and put a barrier between every read of one tile and write of another (in a
decode loop: one per element).
"""
from __future__ import annotations

from tvm import tirx
from tvm.tirx import op as tirx_op

from tilex.ir.names import KEEP_ALIVE_OP
from tilex.ir.visit import is_op_call, map_nodes, seq_items, walk
from tilex.transform.kernel_scope import outer_launch_chain


def _is_dynamic_shared(stmt) -> bool:
    return isinstance(stmt, tirx.AllocBuffer) and str(stmt.buffer.scope()) == "shared.dyn"


def _keep_alive(buffers):
    # an access pointer with no read or write bits: the merge counts it as a touch, ThreadSync as no access
    ptrs = [tirx_op.tvm_access_ptr(tirx_op.type_annotation(str(b.dtype)), b.data, 0, 1, 0) for b in buffers]
    return tirx.Evaluate(tirx.call_intrin("void", KEEP_ALIVE_OP, *ptrs))


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.KeepTilesApart")
def KeepTilesApart(func, mod, ctx):  # noqa: N802
    chain = outer_launch_chain(func.body)
    launches = []
    walk(func.body, (tirx.AttrStmt, lambda n: launches.append(n) if n.attr_key == "thread_extent" else None))
    if chain is None or len(launches) != len(chain):
        return func  # not one kernel
    hoisted, seen = [], set()

    def on_seq(node):
        keep = []
        for s in node.seq:
            if _is_dynamic_shared(s):
                if s.buffer not in seen:
                    seen.add(s.buffer)
                    hoisted.append(s)
            else:
                keep.append(s)
        if len(keep) == len(node.seq):
            return node
        return tirx.SeqStmt(keep) if len(keep) > 1 else (keep[0] if keep else tirx.Evaluate(0))

    kernel = chain[-1]
    stripped = map_nodes(kernel.body, (tirx.SeqStmt, on_seq), order="post")
    if len(hoisted) < 2:
        return func  # nothing the merge could overlap
    touch = _keep_alive([a.buffer for a in hoisted])
    body = tirx.SeqStmt(hoisted + [touch] + seq_items(stripped) + [touch])

    def on_attr(node):
        return tirx.AttrStmt(node.node, node.attr_key, node.value, body) if node.same_as(kernel) else node

    return func.with_body(map_nodes(func.body, (tirx.AttrStmt, on_attr)))


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.DropKeepAlive")
def DropKeepAlive(func, mod, ctx):  # noqa: N802
    def on_eval(node):
        return tirx.Evaluate(0) if is_op_call(node.value, KEEP_ALIVE_OP) else node

    return func.with_body(map_nodes(func.body, (tirx.Evaluate, on_eval)))
