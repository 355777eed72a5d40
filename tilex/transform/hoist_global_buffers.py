"""HoistGlobalBuffers: ``T.alloc_global`` workspaces are allocated by the host side of the compiled function.

Consumes: a tile program whose ``T.alloc_global`` buffers (``AllocBuffer`` of scope ``"global"``) are written
before its ``T.Kernel`` blocks or inside one (in the kernel body, a loop, a condition).
Produces: the same program with every such allocation out of the launch scopes: one written inside a kernel is
moved to just before the top-level statement (the ``T.Kernel`` block) that holds it; one written before the
kernels stays where it is. A program without one inside a kernel is returned unchanged.

TVM's host code then allocates each buffer once per call of the compiled function, before the first launch that
uses it, and releases it after the last one (SplitHostDevice passes its pointer to the kernels; LowerTVMBuiltin
writes ``TVMBackendAllocWorkspace`` / ``TVMBackendFreeWorkspace`` on the function's device). So every kernel of
the program (several ``T.Kernel`` blocks in one ``T.prim_func``: a split-KV pass and its combine) sees the same
buffer within one call, as in TileLang. Its contents are not initialized.

The shape of a hoisted buffer is evaluated on the host: it may use the program's parameters and symbolic sizes,
never a block or thread index or a value computed in the kernel (ValueError).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.visit import free_vars, map_nodes, seq, walk
from tilex.transform.several_kernels import has_launch, is_global_allocation, top_level_statements

__all__ = ["hoist_global_buffers"]


def _nested_allocations(stmt) -> list:
    """The global AllocBuffers inside the launch scopes of `stmt`, in program order."""
    found = []
    walk(stmt, (tirx.AllocBuffer, lambda n: found.append(n) if is_global_allocation(n) else None), order="pre")
    return found


def _host_vars(func, before) -> set:
    """The variables the host side has bound before a statement: parameters, the shapes and strides of the
    buffer parameters, and what the top-level statements `before` define."""
    known = set(func.params)
    for p in func.params:
        if tirx.is_buffer_var(p):
            for e in list(p.shape) + list(p.strides or []) + [p.elem_offset]:
                known |= free_vars(e)
            known.add(p.data)
    for stmt in before:
        if isinstance(stmt, tirx.Bind):
            known.add(stmt.var)
        elif isinstance(stmt, (tirx.AllocBuffer, tirx.DeclBuffer)):
            known.add(stmt.buffer)
            known.add(stmt.buffer.data)
    return known


def _check_host_shape(alloc, known):
    buf = alloc.buffer
    missing = set()
    for e in buf.shape:
        missing |= {v for v in free_vars(e) if v not in known}
    if missing:
        names = ", ".join(sorted(v.name for v in missing))
        raise ValueError(f"T.alloc_global: the shape {list(buf.shape)} of '{buf.name}' uses {names}, which the host "
                         f"does not know before the launch (a block or thread index, or a value computed in the "
                         f"kernel); a global workspace is allocated by the host for the whole call, so its shape "
                         f"may only use the program's parameters and sizes")


def hoist_global_buffers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with its ``T.alloc_global`` allocations out of the launch scopes (module docstring)."""
    flat = top_level_statements(func.body)
    out, moved, before = [], [], []
    for stmt in flat:
        nested = _nested_allocations(stmt) if has_launch(stmt) else []
        if nested:
            known = _host_vars(func, before)
            for alloc in nested:
                _check_host_shape(alloc, known)
            stmt = map_nodes(stmt, (tirx.SeqStmt, lambda n: _without(n, nested)), order="post")
            stmt = _drop_lone(stmt, nested)
            out.extend(nested)
            moved.extend(nested)
            before.extend(nested)
        out.append(stmt)
        before.append(stmt)
    if not moved:
        return func
    return func.with_body(seq(out))


def _is_one_of(stmt, allocs) -> bool:
    return any(stmt.same_as(a) for a in allocs)


def _without(node, allocs):
    """A SeqStmt without the statements in `allocs` (a no-op Evaluate when nothing is left)."""
    kept = [s for s in node.seq if not _is_one_of(s, allocs)]
    if len(kept) == len(node.seq):
        return node
    if not kept:
        return tirx.Evaluate(tvm.tirx.const(0, "int32"))
    return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)


def _drop_lone(stmt, allocs):
    """An allocation that is the whole body of a statement (not inside a SeqStmt) becomes a no-op."""
    def on_stmt(n):
        return tirx.Evaluate(tvm.tirx.const(0, "int32")) if _is_one_of(n, allocs) else n

    return map_nodes(stmt, (tirx.AllocBuffer, on_stmt), order="post")
