"""User-written layouts: ``T.Layout``, ``T.Fragment``, ``T.make_swizzled_layout`` build ``tilex.layout`` objects from
Python functions of the index placeholders; ``T.annotate_layout({buffer: layout})`` pins them before layout
inference (a ``tilex.annotate_layout`` call in the body, read by ``tilex.transform.layout_inference``).
"""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from tilex.layout import Fragment as _Fragment
from tilex.layout import Layout as _Layout
from tilex.layout import LayoutError
from tilex.layout import make_swizzled_layout as _make_swizzled_layout
from tilex.layout.codec import encode_call

__all__ = ["Layout", "Fragment", "make_swizzled_layout", "annotate_layout"]


def _shape(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s.value) if isinstance(s, tirx.IntImm) else int(s) for s in shape)


def Layout(shape, forward_fn):  # noqa: N802 - TileLang's spelling
    """``T.Layout((m, n), lambda i, j: [j, i])``: a logical index -> physical index map.

    ``forward_fn`` takes one index variable per dimension and returns a PrimExpr or a list of PrimExprs.
    Returns a ``tilex.layout.Layout``.
    """
    if not callable(forward_fn):
        raise TypeError(f"T.Layout: forward_fn must be callable, got {forward_fn!r}")
    return _Layout(_shape(shape), forward_fn)


def Fragment(shape, forward_fn=None, forward_thread_fn=None, forward_index_fn=None, replicate=1):  # noqa: N802
    """``T.Fragment(shape, ...)``: a register-tile layout, logical index -> (thread, local index).

    Give either
      * ``forward_fn(*idx) -> (thread, index)`` (``index`` a PrimExpr or a list of them), or
      * ``forward_thread_fn(*idx) -> thread`` and ``forward_index_fn(*idx) -> index``.
    With ``replicate > 1`` every element lives in ``replicate`` threads, and the thread function
    (``forward_fn`` or ``forward_thread_fn``) takes one more argument, the replica ``rep`` in ``[0, replicate)``;
    the local index must not depend on it. Returns a ``tilex.layout.Fragment``.
    """
    shape = _shape(shape)
    replicate = int(replicate)
    if replicate < 1:
        raise LayoutError(f"T.Fragment: replicate must be >= 1, got {replicate}")
    vars_ = _Fragment.placeholders(len(shape))
    rep = _Fragment.rep_var
    extra = (rep,) if replicate > 1 else ()
    if forward_fn is not None:
        if forward_thread_fn is not None or forward_index_fn is not None:
            raise ValueError("T.Fragment: give forward_fn or forward_thread_fn/forward_index_fn, not both")
        out = forward_fn(*vars_, *extra)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise LayoutError(f"T.Fragment: forward_fn must return (thread, index), got {out!r}")
        thread, index = out
    else:
        if forward_thread_fn is None or forward_index_fn is None:
            raise ValueError("T.Fragment needs forward_fn, or both forward_thread_fn and forward_index_fn")
        thread = forward_thread_fn(*vars_, *extra)
        index = forward_index_fn(*vars_)
    if isinstance(index, tuple):
        index = list(index)
    if replicate > 1 and _uses(index, rep):
        raise LayoutError("T.Fragment: the local index must not depend on the replica variable")
    return _Fragment(shape, thread, index, replicate=replicate)


def _uses(exprs, var):
    """Whether any expression in `exprs` (a PrimExpr, int, or list of them) mentions `var`."""
    found = []
    for e in exprs if isinstance(exprs, list) else [exprs]:
        if isinstance(e, tvm.ir.expr.Expr):
            tvm_ffi.structural_walk(e, (tvm.ir.Var, lambda v: found.append(v) if v.same_as(var) else None))
    return bool(found)


def make_swizzled_layout(buffer):
    """The bank-conflict-free gemm layout of a shared buffer (``tilex.layout.make_swizzled_layout`` on its last
    two dims; leading dims, e.g. pipeline stages, are kept as they are). Falls back to row-major where the
    swizzle does not apply (see ``tilex.layout.swizzle``)."""
    shape = _shape(buffer.shape)
    if len(shape) < 2:
        raise LayoutError(f"T.make_swizzled_layout: buffer '{buffer.name}' must have at least 2 dims, got {shape}")
    bits = tvm.DataType(str(buffer.dtype)).bits
    lay = _make_swizzled_layout(shape[-2], shape[-1], bits)
    return lay.expand(shape[:-2]) if len(shape) > 2 else lay


def annotate_layout(layout_map):
    """Pin layouts: each entry takes part in inference at the strictest level (before gemm's own choices).

    A value is a ``T.Layout`` / ``T.Fragment``, or (for a non-fragment buffer) a function of the indices, which
    becomes ``T.Layout(buffer.shape, fn)``."""
    if not isinstance(layout_map, dict):
        raise TypeError(f"T.annotate_layout: expected a dict {{buffer: layout}}, got {layout_map!r}")
    for buf, lay in layout_map.items():
        if not tirx.is_buffer_var(buf):
            raise TypeError(f"T.annotate_layout: keys must be buffers, got {buf!r}")
        if callable(lay) and not isinstance(lay, (_Layout, _Fragment)) and buf.scope() != "local.fragment":
            lay = Layout(buf.shape, lay)  # as in TileLang: a function of the indices is a T.Layout over the buffer
        if not isinstance(lay, (_Layout, _Fragment)):
            raise TypeError(f"T.annotate_layout: the layout of '{buf.name}' must be a T.Layout or T.Fragment, "
                            f"got {type(lay).__name__}")
        shape = [int(s) for s in buf.shape]
        if len(lay.input_shape) != len(shape) or any(a < b for a, b in zip(lay.input_shape, shape)):
            raise ValueError(f"T.annotate_layout: layout over {list(lay.input_shape)} does not cover buffer "
                             f"'{buf.name}' of shape {shape}")
        if isinstance(lay, _Fragment) != (buf.scope() == "local.fragment"):
            raise ValueError(f"T.annotate_layout: '{buf.name}' in scope {buf.scope()} needs a "
                             f"{'T.Fragment' if buf.scope() == 'local.fragment' else 'T.Layout'}")
        _ir.evaluate(encode_call(buf, lay))
