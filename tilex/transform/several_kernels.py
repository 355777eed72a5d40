"""Programs with several ``T.Kernel`` blocks in one ``T.prim_func``: tilex's tile passes, one kernel at a time.

The tile passes see one launch scope per function (one thread index, one block size, one set of tiles). A program
whose body holds several kernels one after the other (TileLang's split-KV decoders: a pass writing partial results
into ``T.alloc_global`` workspaces, then a combine kernel reading them) is lowered kernel by kernel:

Consumes: a PrimFunc whose top-level statements are host statements (``T.alloc_global`` allocations, bindings)
and launch scopes.
Produces: the same PrimFunc with each launch scope replaced by what the passes made of it, when they ran on a
function of the same parameters whose body is that launch scope after the host statements written before it
(so every buffer and variable it uses is declared); the host statements stay as written, and the host code the
passes wrote for a kernel (its TMA tensor maps) comes right before it, after the allocations of the workspaces
the tensor maps describe. The function attributes the passes added are merged: maps joined, arrays concatenated,
differing notes (strings) joined with ``"; "``; one they removed for every kernel is removed. A program with a
single kernel and no ``T.alloc_global`` is handed to the passes whole.

Among TVM's passes, :func:`per_kernel` does the same for the passes that plan one kernel's shared memory and
barriers (KeepTilesApart, ThreadSync, MergeSharedMemoryAllocations, ...): each kernel gets its own shared-memory
plan and size check. TVM then splits the host function into one device function per launch (``<name>_kernel``,
``<name>_kernel_1``, ...) launched in program order on the call's stream.
"""
from __future__ import annotations

from typing import Callable

import tvm
import tvm_ffi
from tvm import tirx

from tilex.ir.visit import seq, walk

__all__ = ["run_per_kernel", "per_kernel", "kernel_count", "top_level_statements", "has_launch",
           "is_global_allocation", "GLOBAL_SCOPE"]

#: the storage scope of a ``T.alloc_global`` buffer
GLOBAL_SCOPE = "global"


def has_launch(stmt) -> bool:
    """Whether `stmt` holds a launch scope (a ``thread_extent`` attribute)."""
    found = []
    walk(stmt, (tirx.AttrStmt, lambda n: found.append(n) if n.attr_key == "thread_extent" else None))
    return bool(found)


def is_global_allocation(stmt) -> bool:
    """Whether `stmt` allocates a buffer in global memory (``T.alloc_global``: a host statement)."""
    return isinstance(stmt, tirx.AllocBuffer) and stmt.buffer.scope() == GLOBAL_SCOPE


def top_level_statements(body) -> list:
    """The statements of a function body in order, nested SeqStmts flattened."""
    if isinstance(body, tirx.SeqStmt):
        out = []
        for s in body.seq:
            out.extend(top_level_statements(s))
        return out
    return [body]


def kernel_count(func: tirx.PrimFunc) -> int:
    """How many of `func`'s top-level statements hold a launch scope."""
    return sum(1 for s in top_level_statements(func.body) if has_launch(s))


def run_per_kernel(func: tirx.PrimFunc, run: Callable[[tirx.PrimFunc], tirx.PrimFunc]) -> tirx.PrimFunc:
    """`run` (passes: PrimFunc -> PrimFunc) applied to each kernel of `func` (module docstring)."""
    items = top_level_statements(func.body)
    kernels = [i for i, s in enumerate(items) if has_launch(s)]
    if len(kernels) <= 1 and not any(is_global_allocation(s) for s in items):
        return run(func)
    out, results = [], []
    for i, item in enumerate(items):
        if i not in kernels:
            out.append(item)
            continue
        before = [s for j, s in enumerate(items[:i]) if j not in kernels]
        lowered = run(func.with_body(seq(before + [item])))
        launched, added = [], []
        for s in top_level_statements(lowered.body):
            if has_launch(s):
                launched.append(s)
            elif not any(s.same_as(b) or tvm_ffi.structural_equal(s, b) for b in before):
                added.append(s)  # host code the passes wrote for this kernel (tensor maps)
        if len(launched) != 1:
            raise RuntimeError(f"tilex: lowering kernel {kernels.index(i) + 1} of '{_name(func)}' gave "
                               f"{len(launched)} launch scopes instead of one")
        out.extend(added + launched)
        results.append(lowered)
    merged = func.with_body(seq(out))
    for key in _dropped_attrs(func, results):
        merged = merged.without_attr(key)
    for key, value in _merged_attrs(func, results).items():
        merged = merged.with_attr(key, value)
    return merged


def per_kernel(inner: tvm.transform.Pass) -> tvm.transform.Pass:
    """`inner` (a pass of TVM's pipeline, named as it is) run on each kernel of a function with several kernels
    (:func:`run_per_kernel`); a module whose functions have one kernel each goes to `inner` whole."""
    info = inner.info

    @tvm.transform.module_pass(opt_level=info.opt_level, name=str(info.name))
    def _per_kernel(mod, _ctx):
        funcs = [(gv, f) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
        if all(kernel_count(f) <= 1 for _, f in funcs):
            return inner(mod)
        out = mod.clone()
        for gv, f in funcs:
            def run(part, gv=gv):
                return inner(tvm.IRModule({gv: part}))[gv]

            out.update_func(gv, run_per_kernel(f, run))
        return out

    return _per_kernel


def _name(func) -> str:
    attrs = func.attrs
    return str(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs else "main"


def _merged_attrs(func, results) -> dict:
    """The attributes the passes added or changed, over all kernels."""
    base = dict(func.attrs.items()) if func.attrs is not None else {}
    merged: dict = {}
    for res in results:
        if res.attrs is None:
            continue
        for key, value in res.attrs.items():
            if key in base and tvm_ffi.structural_equal(base[key], value):
                continue
            merged[key] = value if key not in merged else _join(merged[key], value)
    return merged


def _dropped_attrs(func, results) -> list:
    """The attributes of `func` that the passes removed for every kernel."""
    if func.attrs is None:
        return []
    return [key for key in func.attrs.keys()
            if all(res.attrs is None or key not in res.attrs for res in results)]


def _join(a, b):
    """Two kernels' values of one attribute as one."""
    if tvm_ffi.structural_equal(a, b):
        return a
    if isinstance(a, tvm_ffi.Map) and isinstance(b, tvm_ffi.Map):
        joined = dict(a.items())
        joined.update(b.items())
        return joined
    if isinstance(a, tvm_ffi.Array) and isinstance(b, tvm_ffi.Array):
        return list(a) + list(b)
    if isinstance(a, str) and isinstance(b, str):
        return f"{a}; {b}"
    return a
