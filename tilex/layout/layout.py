"""``Layout``: an n-d logical index -> m-d physical index map written as TVM int32 PrimExprs.

A layout is stored as ``forward_index`` expressions over the cached placeholder vars
``Layout.placeholders(n)`` (``_i0 .. _i{n-1}``), together with the logical ``input_shape``.
``output_shape`` is derived: per output, (max value over the input domain) + 1.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np
import tvm

from ._expr import (
    LayoutError,
    as_expr_list,
    compile_numpy,
    exprs_equal,
    extents_of,
    invert_affine,
    make_analyzer,
    placeholders,
    row_major_offset,
    is_fn,
    PrimExpr,
    substitute,
)

__all__ = ["Layout", "LayoutError"]


def norm_shape(shape) -> tuple:
    """A shape as a tuple of positive ints (an int is a 1-d shape)."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    out = tuple(int(s) for s in shape)
    if any(s <= 0 for s in out):
        raise LayoutError(f"layout shape must be positive, got {out}")
    return out


class Layout:
    """Maps a logical index (n-d) to a physical index (m-d).

    ``Layout(shape, forward)``: ``forward`` is a callable taking n ``tirx.Var`` and returning a PrimExpr
    or a list of PrimExprs, or a (list of) PrimExpr(s) already written over ``Layout.placeholders(n)``.

    Keyword-only extras: ``output_shape`` overrides the derived output shape (it must contain every
    image point); ``inverse`` is a zero-argument callable returning the exact inverse ``Layout``
    (used for non-affine layouts such as xor swizzles, where ``detect_iter_map`` cannot help).
    """

    placeholders = staticmethod(placeholders)

    def __init__(self, shape, forward, *, output_shape: Optional[Sequence[int]] = None,
                 inverse: Optional[Callable[[], "Layout"]] = None):
        self.input_shape = norm_shape(shape)
        self.vars = placeholders(len(self.input_shape))
        exprs = forward(*self.vars) if is_fn(forward) else forward
        exprs = as_expr_list(exprs)
        if len(exprs) == 0:
            raise LayoutError("a layout needs at least one output expression")
        ana = make_analyzer(self.vars, self.input_shape)
        self.forward_index = tuple(ana.simplify(e) for e in exprs)
        if output_shape is not None:
            # Trusted (not re-derived): used for exact shapes the analyzer cannot bound, e.g. xor swizzles.
            output_shape = norm_shape(output_shape)
            if len(output_shape) != len(self.forward_index):
                raise LayoutError(f"output_shape {output_shape} has {len(output_shape)} dims, "
                                  f"but the layout has {len(self.forward_index)} outputs")
            self.output_shape = output_shape
        else:
            self.output_shape = extents_of(self.forward_index, self.vars, self.input_shape, "layout output")
        self._inverse_factory = inverse
        self._inverse_cache = None
        self._np_fn = None
        self._offset_expr = None

    # ------------------------------------------------------------------ basics
    @property
    def ndim(self) -> int:
        return len(self.input_shape)

    @property
    def size(self) -> int:
        return math.prod(self.input_shape)

    def _check_indices(self, indices):
        indices = as_expr_list(indices)
        if len(indices) != self.ndim:
            raise LayoutError(f"layout expects {self.ndim} indices, got {len(indices)}")
        return indices

    def map(self, indices, analyzer=None) -> list:
        """Physical index (list of PrimExpr) of the logical ``indices`` (ints or PrimExprs); simplified."""
        indices = self._check_indices(indices)
        vmap = dict(zip(self.vars, indices))
        ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
        return [ana.simplify(substitute(e, vmap)) for e in self.forward_index]

    def offset(self, indices, analyzer=None) -> PrimExpr:
        """Row-major linearization of ``map(indices)`` over ``output_shape``."""
        ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
        if self._offset_expr is None:
            # linearize over the placeholders first: (x // c) * c + x % c folds back to x there, which it may no
            # longer do once indices are substituted and the two halves are simplified apart
            bound = tvm.sym.Analyzer()
            for v, e in zip(self.vars, self.input_shape):
                bound.bind(v, tvm.ir.Range(0, e))
            self._offset_expr = bound.simplify(row_major_offset(list(self.forward_index), self.output_shape))
        indices = self._check_indices(indices)
        return ana.simplify(substitute(self._offset_expr, dict(zip(self.vars, indices))))

    def map_numpy(self, *index_arrays) -> list:
        """Evaluate the forward map on integer numpy arrays (broadcasting); returns one int64 array per output."""
        if self._np_fn is None:
            self._np_fn = compile_numpy(self.forward_index, self.vars)
        return self._np_fn(*index_arrays)

    # ------------------------------------------------------------------ algebra
    def inverse(self) -> "Layout":
        """Inverse layout (bijective layouts only): ``input_shape`` of the result is ``self.output_shape``."""
        if self._inverse_cache is not None:
            return self._inverse_cache
        if self._inverse_factory is not None:
            inv = self._inverse_factory()
        else:
            if math.prod(self.output_shape) != self.size:
                raise LayoutError(
                    f"layout {self} is not bijective: input size {self.size} != output size "
                    f"{math.prod(self.output_shape)}")
            out_vars = placeholders(len(self.output_shape))
            exprs = invert_affine(self.forward_index, self.vars, self.input_shape, out_vars, f"layout {self}")
            inv = Layout(self.output_shape, exprs, output_shape=self.input_shape,
                         inverse=lambda: self)
        self._inverse_cache = inv
        return inv

    def compose(self, other: "Layout") -> "Layout":
        """``x -> other.map(self.map(x))``; requires ``self.output_shape == other.input_shape``."""
        if tuple(self.output_shape) != tuple(other.input_shape):
            raise LayoutError(f"cannot compose: output shape {self.output_shape} != input shape {other.input_shape}")
        vmap = dict(zip(other.vars, self.forward_index))
        exprs = [substitute(e, vmap) for e in other.forward_index]
        inverse = None
        if self._inverse_factory is not None or other._inverse_factory is not None:
            inverse = lambda: other.inverse().compose(self.inverse())  # noqa: E731
        return Layout(self.input_shape, exprs, inverse=inverse)

    def expand(self, leading_shape) -> "Layout":
        """Prepend identity dims: ``(s, *x) -> (s, *self.map(x))`` (e.g. pipeline stages)."""
        leading = norm_shape(leading_shape)
        k = len(leading)
        if k == 0:
            return self
        new_vars = placeholders(k + self.ndim)
        vmap = dict(zip(self.vars, new_vars[k:]))
        exprs = list(new_vars[:k]) + [substitute(e, vmap) for e in self.forward_index]
        inverse = None
        if self._inverse_factory is not None:
            inverse = lambda: self.inverse().expand(leading)  # noqa: E731
        return Layout(leading + self.input_shape, exprs, output_shape=leading + self.output_shape,
                      inverse=inverse)

    def is_equal(self, other) -> bool:
        """Same shapes and provably equal forward expressions on the input domain."""
        if not isinstance(other, Layout):
            return False
        if self.input_shape != other.input_shape or self.output_shape != other.output_shape:
            return False
        return exprs_equal(self.forward_index, other.forward_index, self.vars, self.input_shape)

    #: the largest domain :meth:`same_offsets` enumerates
    MAX_ENUMERATED = 1 << 22

    def same_offsets(self, other) -> bool:
        """Whether `other` puts every element at the same row-major offset of its output (the same bytes of a
        flattened shared-memory tile), whatever the output shapes: ``(64, 64) -> (64, 64)`` and ``(64, 64) ->
        (4096,)`` forms of one swizzle. Checked on every input point (static shapes up to MAX_ENUMERATED points)."""
        if not isinstance(other, Layout) or self.input_shape != other.input_shape:
            return False
        if self.size > self.MAX_ENUMERATED or not all(isinstance(e, int) for e in self.input_shape):
            return False
        grids = np.meshgrid(*[np.arange(e, dtype=np.int64) for e in self.input_shape], indexing="ij")

        def offsets(lay):
            out = [np.broadcast_to(np.asarray(o, dtype=np.int64), grids[0].shape) for o in lay.map_numpy(*grids)]
            flat = np.zeros(grids[0].shape, dtype=np.int64)
            for o, e in zip(out, lay.output_shape):
                flat = flat * int(e) + o
            return flat

        return bool(np.array_equal(offsets(self), offsets(other)))

    def __repr__(self) -> str:
        args = ", ".join(v.name for v in self.vars)
        outs = ", ".join(str(e) for e in self.forward_index)
        return f"Layout({self.input_shape} -> {self.output_shape}: ({args}) -> ({outs}))"
