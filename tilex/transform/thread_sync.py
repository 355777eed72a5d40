"""ThreadSync (among TVM's passes, before MergeSharedMemoryAllocations): block barriers for shared memory, with
each shared tile planned on its own.

Consumes: flat per-thread TIR whose ``shared.dyn`` tiles the merge will keep apart
(tilex.transform.shared_tiles.KeepTilesApart ran), so that no two of them share memory.
Produces: the same with a block barrier (``tvm_storage_sync``) before every statement that may read shared memory
another thread wrote, or overwrite memory another thread read, since the last barrier.

TVM's ThreadSync plans every ``shared.dyn`` access as one array, because TVM merges those buffers afterwards and may
overlap them. It would put a barrier between a read of one tile and a write of another: in a loop that reads packed
codes and writes the decoded tile, one per element. Here the tiles are planned under the static ``shared`` scope,
where TVM tells buffers apart, and get their scope back afterwards. A kernel with a ``shared.dyn`` buffer that is a
view of another (a DeclBuffer) keeps TVM's planning. A condition every thread evaluates alike (no thread index, no per-thread or shared value) may hold barriers
(TVM is told with ``tvm_thread_invariant``). A condition that reads shared memory (``if flag[0] == ...``),
which TVM's access planner cannot place, is computed into a variable just before its ``if``. A kernel with thread
regions (T.ws, branches on the thread index; `tilex.transform.thread_regions`) is planned region by region, the
barriers inside a region becoming named barriers over its threads. T.async_copy's ``tilex.async_write`` markers
(the tile a cp.async writes) are read here and dropped.
"""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.tirx import _ffi_api

from tilex.ir.names import ASYNC_WRITE_OP, KEEP_ALIVE_OP
from tilex.ir.visit import buffers_used, is_op_call, map_nodes, substitute, walk
from tilex.transform.thread_regions import has_regions, mark_thread_regions, sync_regions

_DYNAMIC = "shared.dyn"
_STATIC = "shared"


def _rescoped(buf, scope):
    t = buf.ty
    ty = _ffi_api.BufferType(scope, t.dtype, t.shape, t.strides, t.elem_offset, t.data_alignment, t.offset_factor,
                             t.layout, t.allocated_addr, t.span)
    return _ffi_api.BufferVar(buf.name, ty, buf.span)


def _dynamic_tiles(body):
    """The ``shared.dyn`` buffers `body` allocates, or None when one is declared over another's memory or, with
    two or more, when nothing keeps the merge from overlapping them."""
    allocated, declared, kept = [], [], []
    walk(body, [(tirx.AllocBuffer, lambda n: allocated.append(n.buffer)),
                (tirx.DeclBuffer, lambda n: declared.append(n.buffer)),
                (tvm.ir.Call, lambda n: kept.append(n) if is_op_call(n, KEEP_ALIVE_OP) else None)])
    tiles = [b for b in allocated if str(b.scope()) == _DYNAMIC]
    if any(str(b.scope()) == _DYNAMIC for b in declared) or (len(tiles) > 1 and not kept):
        return None
    return tiles


def _hoist_shared_conditions(body):
    """(body with each ``if`` whose condition loads shared memory as ``c = condition; if c``, {c: condition})."""
    hoisted = {}

    def on_if(node):
        if not any(str(b.scope()).startswith("shared") for b in buffers_used(node.condition)):
            return node
        c = tirx.Var("cond", "bool")
        hoisted[c] = node.condition
        return tirx.SeqStmt([tirx.Bind(c, node.condition), tirx.IfThenElse(c, node.then_case, node.else_case)])

    return map_nodes(body, (tirx.IfThenElse, on_if)), hoisted


def _restore_conditions(body, hoisted):
    """The hoisted conditions back in their ``if`` (TVM's shared-memory merge reads loads only in statements it
    knows), the barriers ThreadSync put before them staying."""
    if not hoisted:
        return body

    def on_bind(node):
        return tirx.Evaluate(tirx.const(0, "int32")) if any(node.var.same_as(c) for c in hoisted) else node

    return substitute(map_nodes(body, (tirx.Bind, on_bind)), hoisted)  # RemoveNoOp later drops the no-ops


_INVARIANT = "tirx.tvm_thread_invariant"


def _mark_invariant_conditions(body):
    """`body` with the condition of each ``if`` that every thread of the block evaluates alike (it reads no thread
    index and no per-thread or shared value, directly or through a let variable) wrapped in
    ``tvm_thread_invariant``: TVM's ThreadSync then places barriers inside it (all threads take the branch
    together), where it refuses to for other conditions -- a pipelined loop under ``if block_index_ok:`` of a
    sparse-attention kernel."""
    variant = set()

    def on_attr(node):
        if node.attr_key == "thread_extent" and node.node.thread_tag.startswith("threadIdx"):
            variant.add(node.node.var)

    walk(body, (tirx.AttrStmt, on_attr))

    uniform_vars = set()  # T.alloc_var scalars every thread writes with the same values

    def invariant(expr):
        if any(str(b.scope()) not in ("global", "") and b not in uniform_vars for b in buffers_used(expr)):
            return False
        found = []
        walk(expr, (tvm.ir.Var, lambda v: found.append(v) if v in variant else None))
        return not found

    def scalar_writes():
        """{T.alloc_var buffer: [(value, under a condition that is not invariant)]}"""
        writes = {}

        def visit(stmt, guarded):
            if isinstance(stmt, tirx.SeqStmt):
                for x in stmt.seq:
                    visit(x, guarded)
            elif isinstance(stmt, tirx.IfThenElse):
                g = guarded or not invariant(stmt.condition)
                visit(stmt.then_case, g)
                if stmt.else_case is not None:
                    visit(stmt.else_case, g)
            elif isinstance(stmt, (tirx.For, tirx.AttrStmt, tirx.While)):
                visit(stmt.body, guarded)
            elif isinstance(stmt, tirx.BufferStore):
                buf = stmt.buffer
                if str(buf.scope()) == "local" and [int(e) for e in buf.shape] == [1]:
                    writes.setdefault(buf, []).append((stmt.value, guarded))

        visit(body, False)
        return writes

    def on_bind(node):
        if not invariant(node.value):
            variant.add(node.var)

    def on_for(node):
        if not (invariant(node.min) and invariant(node.extent)):
            variant.add(node.loop_var)

    threads = set(variant)
    if not threads:
        return body
    while True:  # to a fixed point: uniform scalars make more loops and lets uniform, and those more scalars
        variant.clear()
        variant.update(threads)
        walk(body, [(tirx.Bind, on_bind), (tirx.For, on_for)], order="pre")
        found = {buf for buf, ws in scalar_writes().items() if all(not g and invariant(v) for v, g in ws)}
        if found <= uniform_vars:
            break
        uniform_vars.update(found)

    def on_if(node):
        cond = node.condition
        if is_op_call(cond, _INVARIANT) or not invariant(cond):
            return node
        return tirx.IfThenElse(tirx.call_intrin("bool", _INVARIANT, cond), node.then_case, node.else_case,
                               span=node.span)

    return map_nodes(body, (tirx.IfThenElse, on_if))


def _unmark_invariant_conditions(body):
    return map_nodes(body, (tirx.IfThenElse, lambda n: tirx.IfThenElse(n.condition.args[0], n.then_case,
                                                                        n.else_case, span=n.span)
                            if is_op_call(n.condition, _INVARIANT) else n))


def _sync(func, scopes):
    mod = tvm.IRModule({"main": func})
    for scope in scopes:
        mod = s_tir.transform.ThreadSync(scope)(mod)
    return mod["main"]


def _plan(func):
    """TVM's ThreadSync over `func`, each ``shared.dyn`` tile planned on its own where they are kept apart."""
    tiles = _dynamic_tiles(func.body)
    if not tiles:
        return _sync(func, [_STATIC, _DYNAMIC])
    static = {b: _rescoped(b, _STATIC) for b in tiles}
    synced = _sync(func.with_body(substitute(func.body, static)), [_STATIC])
    return synced.with_body(substitute(synced.body, {s: d for d, s in static.items()}))


def _plan_with_regions(func):
    """`_plan`, region by region in a kernel with thread regions (tilex.transform.thread_regions). A kernel
    without them whose plain planning needs a barrier inside a branch on the thread index (TVM refuses) is planned
    again with such branches as regions."""
    if has_regions(func.body):
        return sync_regions(func, _plan)
    try:
        return _plan(func)
    except Exception as e:  # noqa: BLE001 - only TVM's refusal to place a barrier inside a condition is retried
        if "inside condition" not in str(e):
            raise
        marked = mark_thread_regions(func, wanted=lambda stmt: True)
        if not has_regions(marked.body):
            raise
        return sync_regions(marked, _plan)


def _drop_async_writes(body):
    """T.async_copy's ``tilex.async_write`` markers, read by the planning, become no-ops (RemoveNoOp drops them)."""
    return map_nodes(body, (tirx.Evaluate, lambda n: tirx.Evaluate(tirx.const(0, "int32"))
                            if is_op_call(n.value, ASYNC_WRITE_OP) else n))


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.ThreadSync")
def ThreadSync(func, mod, ctx):  # noqa: N802
    body, hoisted = _hoist_shared_conditions(func.body)
    synced = _plan_with_regions(func.with_body(_mark_invariant_conditions(body)))
    body = _unmark_invariant_conditions(synced.body)
    return synced.with_body(_drop_async_writes(_restore_conditions(body, hoisted)))
