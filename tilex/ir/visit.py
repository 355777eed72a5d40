"""Tree walks and small helpers over TVM 0.27's IR (BufferLoad is ir.TensorLoad there, dtypes live on .ty).

The walks re-raise a Python exception from a callback with its own type (tvm_ffi would wrap it), so user
errors (LayoutConflictError, TileOpError, ...) reach the user as they were raised.
"""
from __future__ import annotations

import inspect

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir.expr import TensorLoad as BufferLoadNode  # noqa: F401 - what tirx.BufferLoad(...) builds
from tvm.ir.expr import TensorRegion as BufferRegionNode  # noqa: F401 - what A[0:4, 0:8] evaluates to

STORAGE_SYNC = "tirx.tvm_storage_sync"


def dtype_of(expr) -> str:
    """The dtype string of a PrimExpr or Buffer."""
    if hasattr(expr, "ty") and hasattr(expr.ty, "dtype"):
        return str(expr.ty.dtype)
    return str(expr.dtype)


def load_buffer(load):
    """The buffer a BufferLoad reads."""
    return load.source


def lanes(expr) -> int:
    return tvm.DataType(dtype_of(expr)).lanes


def bits(dtype) -> int:
    return tvm.DataType(str(dtype)).bits


def seq_items(stmt) -> list:
    """The statements of a SeqStmt, or [stmt] for any other statement (one level, not recursive)."""
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def seq(stmts):
    """One statement from a list (``None`` entries dropped): the single one, or a SeqStmt."""
    stmts = [s for s in stmts if s is not None]
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def storage_sync(scope="shared"):
    """A block-wide barrier statement (``__syncthreads()``), as TVM's ThreadSync writes it."""
    return tirx.Evaluate(tirx.call_intrin("void", STORAGE_SYNC, scope))


def is_sync(stmt) -> bool:
    """Whether `stmt` is a block-wide barrier written by :func:`storage_sync` or TVM's ThreadSync."""
    v = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == STORAGE_SYNC


def is_op_call(node, name) -> bool:
    """Whether `node` is a Call of the TVM op `name` (e.g. ``tilex.region``)."""
    return isinstance(node, tvm.ir.Call) and isinstance(node.op, tvm.ir.Op) and node.op.name == name


def buffers_written(stmt) -> set:
    """Buffers `stmt` may write: stored to, or whose address a call takes (an atomic, an async copy)."""
    out = set()

    def on_call(n):
        name = n.op.name if isinstance(n.op, tvm.ir.Op) else None
        if name == "tirx.address_of" and isinstance(n.args[0], BufferLoadNode):
            out.add(n.args[0].source)
        elif name == "tirx.tvm_access_ptr":
            walk(n.args[1], (tvm.ir.Var, out.add))  # the buffer behind its data pointer

    walk(stmt, [(tirx.BufferStore, lambda n: out.add(n.buffer)), (tvm.ir.Call, on_call)])
    return out


def count_accesses(stmt, buf) -> int:
    """How many loads and stores of `stmt` name `buf` (a tile-op region names its buffer with one load)."""
    hits = []
    walk(stmt, [(BufferLoadNode, lambda n: hits.append(n) if n.source.same_as(buf) else None),
                (tirx.BufferStore, lambda n: hits.append(n) if n.buffer.same_as(buf) else None)])
    return len(hits)


def buffers_used(stmt) -> set:
    """Buffers `stmt` loads from or stores to."""
    used = set()
    walk(stmt, [(BufferLoadNode, lambda n: used.add(n.source)), (tirx.BufferStore, lambda n: used.add(n.buffer))])
    return used


def substitute(node, mapping):
    """Replace Vars in an expression or statement (mapping: Var -> PrimExpr)."""
    if not mapping:
        return node

    def f(v):
        return mapping.get(v, v)

    return map_nodes(node, (tvm.ir.Var, f))


def free_vars(expr) -> set:
    """The vars `expr` uses."""
    out = set()
    walk(expr, (tvm.ir.Var, lambda v: out.add(v)))  # walk reads the callback's signature: no builtin
    return out


def row_major_offset(indices, shape):
    """The row-major linear offset of `indices` in an array of `shape`."""
    off = tirx.const(0, "int32")
    for i, s in zip(indices, shape):
        off = off * s + i
    return off


class _Captured:
    def __init__(self):
        self.error = None

    def wrap(self, fn, keep_node=True):
        """`fn` that records its first exception instead of raising it into tvm_ffi; after an error (or on it)
        it returns the node unchanged (maps) or None (walks, `keep_node=False`)."""
        # tvm_ffi looks at a callback's arity to decide what to pass: keep the wrapped function's
        nargs = len(inspect.signature(fn).parameters)

        def call(args):
            fallback = args[0] if keep_node else None
            if self.error is not None:
                return fallback
            try:
                return fn(*args)
            except Exception as e:  # noqa: BLE001 - re-raised with its own type after the traversal
                self.error = e
                return fallback

        if nargs == 1:
            return lambda a: call((a,))
        if nargs == 2:
            return lambda a, b: call((a, b))
        return lambda a, b, c: call((a, b, c))

    def reraise(self):
        if self.error is not None:
            raise self.error


def _entries(entries, cap, keep_node=True):
    if isinstance(entries, tuple):
        entries = [entries]
    return [(t, cap.wrap(f, keep_node)) for t, f in entries]


def walk(root, entries, **kw):
    """tvm_ffi.structural_walk that lets Python exceptions from callbacks through with their own type."""
    cap = _Captured()
    tvm_ffi.structural_walk(root, _entries(entries, cap, keep_node=False), **kw)
    cap.reraise()


def map_nodes(root, entries, **kw):
    """tvm_ffi.structural_map, re-raising callback exceptions with their own type."""
    cap = _Captured()
    out = tvm_ffi.structural_map(root, _entries(entries, cap), **kw)
    cap.reraise()
    return out


def mutate(root, entries, **kw):
    """tvm_ffi.structural_mutate, re-raising callback exceptions with their own type."""
    cap = _Captured()
    out = tvm_ffi.structural_mutate(root, _entries(entries, cap), **kw)
    cap.reraise()
    return out
