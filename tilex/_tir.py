"""Small adapters over TVM 0.27's IR classes (names moved: BufferLoad is ir.TensorLoad, dtypes live on .ty)."""
from __future__ import annotations

import tvm
from tvm.ir.expr import TensorLoad as BufferLoadNode  # noqa: F401 - what tirx.BufferLoad(...) builds
from tvm.ir.expr import TensorRegion as BufferRegionNode  # noqa: F401 - what A[0:4, 0:8] evaluates to


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
    from tvm import tirx

    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


class _Captured:
    def __init__(self):
        self.error = None

    def wrap(self, fn, keep_node=True):
        """`fn` that records its first exception instead of raising it into tvm_ffi; after an error (or on it)
        it returns the node unchanged (maps) or None (walks, `keep_node=False`)."""
        # tvm_ffi looks at a callback's arity to decide what to pass: keep the wrapped function's
        import inspect

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
    import tvm_ffi

    cap = _Captured()
    tvm_ffi.structural_walk(root, _entries(entries, cap, keep_node=False), **kw)
    cap.reraise()


def map_nodes(root, entries, **kw):
    """tvm_ffi.structural_map, re-raising callback exceptions with their own type."""
    import tvm_ffi

    cap = _Captured()
    out = tvm_ffi.structural_map(root, _entries(entries, cap), **kw)
    cap.reraise()
    return out


def mutate(root, entries, **kw):
    """tvm_ffi.structural_mutate, re-raising callback exceptions with their own type."""
    import tvm_ffi

    cap = _Captured()
    out = tvm_ffi.structural_mutate(root, _entries(entries, cap), **kw)
    cap.reraise()
    return out
