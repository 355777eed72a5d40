"""HoistSharedAllocations (among TVM's passes, before ThreadSync and MergeSharedMemoryAllocations).

Consumes: flat per-thread TIR of one kernel, with ``shared.dyn`` allocations anywhere in its body (a cross-warp
reduction's workspace or an atomic's staging tile are allocated where the operator runs).
Produces: the same kernel with every ``shared.dyn`` allocation at the start of the kernel body, inside its launch
scopes, in their original order.

Why: TVM's MergeSharedMemoryAllocations lets two buffers share memory only when one is allocated after the other's
last use. With every allocation first in the kernel, none is, so distinct shared buffers never alias. ThreadSync
can then run before the merge and treat distinct buffers as independent. After the merge it would see one array
and put a barrier between every read of one tile and write of another, as in a decode loop that reads packed
codes and writes the decoded tile.
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir.visit import map_nodes

_LAUNCH = "thread_extent"


def _is_dynamic_shared(stmt) -> bool:
    return isinstance(stmt, tirx.AllocBuffer) and str(stmt.buffer.scope()) == "shared.dyn"


def _kernel_body_path(body):
    """The launch AttrStmts from `body` down to the kernel body, or None when `body` holds no single kernel."""
    node, path = body, []
    while True:
        if isinstance(node, tirx.SeqStmt):
            launches = [s for s in node.seq if isinstance(s, tirx.AttrStmt) and s.attr_key == _LAUNCH]
            if len(launches) != 1 or path:
                return path or None
            path.append(node)
            node = launches[0]
        elif isinstance(node, tirx.AttrStmt) and node.attr_key == _LAUNCH:
            path.append(node)
            node = node.body
        else:
            return path or None


def _rebuild(path, inner):
    """`path` (outermost first) with the innermost launch's body replaced by `inner`."""
    for node in reversed(path):
        if isinstance(node, tirx.SeqStmt):
            inner = tirx.SeqStmt([inner if isinstance(s, tirx.AttrStmt) and s.attr_key == _LAUNCH else s
                                  for s in node.seq])
        else:
            inner = tirx.AttrStmt(node.node, node.attr_key, node.value, inner)
    return inner


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.HoistSharedAllocations")
def HoistSharedAllocations(func, mod, ctx):  # noqa: N802
    path = _kernel_body_path(func.body)
    if path is None or not isinstance(path[-1], tirx.AttrStmt):
        return func
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

    kernel = path[-1].body
    stripped = map_nodes(kernel, (tirx.SeqStmt, on_seq), order="post")
    if not hoisted:
        return func
    items = list(stripped.seq) if isinstance(stripped, tirx.SeqStmt) else [stripped]
    return func.with_body(_rebuild(path, tirx.SeqStmt(hoisted + items)))
