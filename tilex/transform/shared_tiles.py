"""Shared tiles that never share memory, so that barriers can be planned tile by tile (tilex.transform.thread_sync).

KeepTilesApart (among TVM's passes, before ThreadSync and MergeSharedMemoryAllocations)
  Consumes: flat per-thread TIR of one kernel, with ``shared.dyn`` allocations anywhere in its body (a cross-warp
  reduction's workspace or an atomic's staging tile are allocated where the operator runs).
  Produces: every ``shared.dyn`` allocation at the start of the kernel body (inside its launch scopes, in their
  original order), followed by a ``tilex.keep_alive`` statement touching all of them; another one ends the body.

  A shared tile nothing reads, writes or points to (``T.alloc_shared`` under a branch of the program's Python that
  was not taken, as a bias tile without a bias) is dropped first: it takes no memory.

  A kernel whose tiles do not fit one block side by side (sm_90: 227 KB) is first given to
  tilex.transform.shared_reuse.plan_reuse: tiles whose lifetimes do not overlap share bytes, with a reuse barrier
  before each tile that takes over another's; the placement rides in the ``tilex.shared_placement`` attribute to
  PlaceSharedTiles (after ThreadSync, which still plans the tiles apart). When even that does not fit, the pass
  raises the shared-memory error naming the largest tiles and what tilex added to the program's own.

ScopeBindsForMerge (right before MergeSharedMemoryAllocations)
  Consumes: a kernel whose statements may bind a variable to a value that reads a buffer allocated in the same
  sequence (``T.make_tensor(A_ptrs[i], ...)`` with ``i`` a ``T.alloc_var``: the address read into a let).
  Produces: each such binding and the statements after it wrapped in an ``extern_scope`` attribute. TVM's merge
  walks statements keeping a stack of scopes, refusing a load made at the level of its buffer's allocation ("Load
  memory in places other than store"): stores, evaluations, loops and branches open a level, a binding does not;
  the attribute opens one.

DropKeepAlive (right after MergeSharedMemoryAllocations)
  Removes the ``tilex.keep_alive`` statements, the scopes ScopeBindsForMerge added (their statements stay, in
  order) and a ``tilex.shared_placement`` attribute still there.

Why: MergeSharedMemoryAllocations lets two buffers share memory when the statements touching one all come after
those touching the other (at the level of their allocation). Touched first and last in the kernel, no tile has
such a neighbour, so distinct tiles never alias and ThreadSync may treat them as independent. Before, ThreadSync ran
after the merge, saw one array, and put a barrier between every read of one tile and write of another (in a
decode loop: one per element).
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx import op as tirx_op

from tilex.ir.hardware import block_shared_memory_limit, compute_capability
from tilex.ir.names import KEEP_ALIVE_OP, SHARED_PLACEMENT_ATTR
from tilex.ir.shared_memory import block_footprint, buffer_bytes, shared_usage, shortfall_message
from tilex.ir.visit import BufferLoadNode, is_op_call, map_nodes, seq, seq_items, walk
from tilex.transform.kernel_scope import outer_launch_chain
from tilex.transform.shared_reuse import plan_reuse


def _is_dynamic_shared(stmt) -> bool:
    return isinstance(stmt, tirx.AllocBuffer) and str(stmt.buffer.scope()) == "shared.dyn"


def _keep_alive(buffers):
    # an access pointer with no read or write bits: the merge counts it as a touch, ThreadSync as no access
    ptrs = [tirx_op.tvm_access_ptr(tirx_op.type_annotation(str(b.dtype)), b.data, 0, 1, 0) for b in buffers]
    return tirx.Evaluate(tirx.call_intrin("void", KEEP_ALIVE_OP, *ptrs))


def _is_shared(stmt) -> bool:
    return isinstance(stmt, tirx.AllocBuffer) and str(stmt.buffer.scope()).startswith("shared")


def drop_unused_tiles(body):
    """`body` without the allocations of its shared tiles that nothing else references (no load, store, access
    pointer, view or call names them)."""
    tiles = set()
    walk(body, (tirx.AllocBuffer, lambda n: tiles.add(n.buffer) if _is_shared(n) else None))
    if not tiles:
        return body
    rest = map_nodes(body, (tirx.AllocBuffer, lambda n: tirx.Evaluate(0) if n.buffer in tiles else n))
    used = set()
    walk(rest, (tvm.ir.Var, lambda v: used.add(v) if v in tiles else None))
    unused = tiles - used
    if not unused:
        return body
    return map_nodes(body, (tirx.AllocBuffer, lambda n: tirx.Evaluate(0) if n.buffer in unused else n))


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.KeepTilesApart")
def KeepTilesApart(func, mod, ctx):  # noqa: N802
    body = drop_unused_tiles(func.body)
    if not body.same_as(func.body):
        func = func.with_body(body)
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
    reuse = _reuse_or_report(func, chain)
    stripped = map_nodes(reuse.body if reuse else kernel.body, (tirx.SeqStmt, on_seq), order="post")
    if len(hoisted) < 2:
        return func  # nothing the merge could overlap
    touch = _keep_alive([a.buffer for a in hoisted])
    body = tirx.SeqStmt(hoisted + [touch] + seq_items(stripped) + [touch])

    def on_attr(node):
        return tirx.AttrStmt(node.node, node.attr_key, node.value, body) if node.same_as(kernel) else node

    func = func.with_body(map_nodes(func.body, (tirx.AttrStmt, on_attr)))
    return reuse.annotate(func) if reuse else func


def _reuse_or_report(func, chain):
    """plan_reuse's placement for a kernel compiled for CUDA whose tiles do not fit side by side, None otherwise;
    raises the shared-memory error when sharing bytes does not make them fit either."""
    target = tvm.target.Target.current(allow_none=True)
    if target is None or target.kind.name != "cuda":
        return None
    arch = compute_capability(target)[0]
    limit = block_shared_memory_limit(arch)
    usage, _ = shared_usage(func.body)
    kernel = chain[-1]
    blocks = [a.node.var for a in chain if a.node.thread_tag.startswith("blockIdx")]
    scalars = [p for p in func.params if not tirx.is_buffer_var(p)]
    reuse = plan_reuse(kernel.body, limit, usage["static"], blocks + scalars)
    if reuse is None or reuse.fits:
        return reuse
    tiles = []

    def on_alloc(node):
        if str(node.buffer.scope()).startswith("shared"):
            tiles.append((node.buffer.name, buffer_bytes(node.buffer) or 0))

    walk(kernel.body, (tirx.AllocBuffer, on_alloc))
    total = block_footprint(usage["static"], usage["dynamic"])
    shared = block_footprint(usage["static"], reuse.size) if reuse.offsets else None
    raise ValueError(shortfall_message(total, limit, arch, tiles, shared, reuse.why_not))


#: TVM's attribute key whose statement its merge's access finder treats as a scope of its own
_EXTERN_SCOPE = "extern_scope"
#: the attribute node that marks the scopes ScopeBindsForMerge adds
_BIND_SCOPE = "tilex.bind_scope"


def _is_bind_scope(node) -> bool:
    return (isinstance(node, tirx.AttrStmt) and node.attr_key == _EXTERN_SCOPE
            and isinstance(node.node, tvm.ir.StringImm) and str(node.node.value) == _BIND_SCOPE)


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.ScopeBindsForMerge")
def ScopeBindsForMerge(func, mod, ctx):  # noqa: N802
    allocated = set()
    walk(func.body, (tirx.AllocBuffer, lambda n: allocated.add(n.buffer)))
    if not allocated:
        return func

    def reads_allocated(expr) -> bool:
        found = []
        walk(expr, (BufferLoadNode, lambda n: found.append(n) if n.source in allocated else None))
        return bool(found)

    def on_seq(node):
        items = list(node.seq)
        changed = False
        for i in range(len(items) - 1, -1, -1):  # from the last: an earlier binding's scope holds the later ones
            if isinstance(items[i], tirx.Bind) and reads_allocated(items[i].value):
                scope = tirx.AttrStmt(tvm.ir.StringImm(_BIND_SCOPE), _EXTERN_SCOPE, tirx.const(0, "int32"),
                                      seq(items[i:]))
                items = items[:i] + [scope]
                changed = True
        return seq(items) if changed else node

    body = map_nodes(func.body, (tirx.SeqStmt, on_seq), order="post")
    return func if body.same_as(func.body) else func.with_body(body)


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.DropKeepAlive")
def DropKeepAlive(func, mod, ctx):  # noqa: N802
    def on_eval(node):
        return tirx.Evaluate(0) if is_op_call(node.value, KEEP_ALIVE_OP) else node

    def on_attr(node):
        return node.body if _is_bind_scope(node) else node

    func = func.with_body(map_nodes(func.body, [(tirx.Evaluate, on_eval), (tirx.AttrStmt, on_attr)]))
    if func.attrs is not None and SHARED_PLACEMENT_ATTR in func.attrs:  # left by a program of several kernels
        func = func.without_attr(SHARED_PLACEMENT_ATTR)
    return func
