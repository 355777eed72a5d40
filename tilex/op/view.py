"""`T.view` / `T.reshape` of a fragment or of a shared tile, as a relation between two layouts.

A fragment's view keeps every thread's bits, so its Fragment follows from the viewed fragment's
(`tilex.layout.reinterpret`) and the other way round. A view of another element type rescales the last dimension
(elements split or merged); a view of the same element type with another shape (`T.reshape`: dimensions split or
merged, row-major order kept) puts each element in the thread and register it had. Whichever of the two an
operator lays out first (a T.gemm pinning the view as its operand, a copy choosing the base's), layout inference
derives the other here; a T.view whose merged elements are not consecutive registers of one thread is a
TileOpError naming both buffers. Nothing is lowered: both are the same per-thread registers
(`transform.lower_tile_ops` declares the view over the base's local array).

A shared tile's view is the same bytes of shared memory seen with another shape and element type: view element
``y`` is the bytes at row-major position ``y`` of the view, which sit where the base's layout (a swizzle, or none)
puts the base elements holding those bytes (`reinterpret_layout`). A tile without a layout and its view are both
row-major; a laid-out one (a T.gemm operand's swizzle, T.annotate_layout) gives its view the derived layout, and
a laid-out view its base. Merging base elements into one wider view element needs them next to each other in
the layout (always so in a swizzle's 16-byte chunks); otherwise the view is a TileOpError. The view is declared
over the base's shared memory (`physical_view`), so barriers and shared-memory planning see one tile.
"""
from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import tirx

from tilex.ir.visit import row_major_offset
from tilex.layout import Layout, LayoutError
from tilex.layout.reinterpret import merge_elements, reshape_fragment, split_elements
from tilex.op.base import InferLevel, TileOp, TileOpError
from tilex.op.partition import unflatten


def _bits(buf):
    t = tvm.DataType(str(buf.dtype))
    return t.bits * t.lanes


class _ViewRelation(TileOp):
    """`view` declared over `base`'s storage: each one's layout follows from the other's (`view_layout` /
    `base_layout`, given by the subclass); nothing is lowered."""

    def __init__(self, base, view):
        self.base, self.view = base, view

    def buffers(self):
        return [self.base, self.view]

    def _api(self) -> str:
        raise NotImplementedError

    def describe(self):
        return (f"{self._api()}({self.base.name} {_shape(self.base)} {self.base.dtype} as {self.view.name} "
                f"{_shape(self.view)} {self.view.dtype})")

    def view_layout(self, base_layout):
        raise NotImplementedError

    def base_layout(self, view_layout):
        raise NotImplementedError

    def infer_layout(self, ctx, level):
        if level == InferLevel.FREE:
            return {}
        base, view = ctx.layout_map.get(self.base), ctx.layout_map.get(self.view)
        try:
            if base is not None:
                return {self.view: self.view_layout(base)}  # also checks a view laid out already
            if view is not None:
                return {self.base: self.base_layout(view)}
        except LayoutError as e:
            raise TileOpError(f"{self.describe()}: {e}") from None
        return {}

    def lower(self, ctx):  # pragma: no cover - a relation, never an Evaluate in the program
        raise TileOpError(f"{self.describe()} has nothing to lower")


class FragmentView(_ViewRelation):
    """`view` (a DeclBuffer over `base`'s registers) as another element type of the same bits per thread."""

    op_name = "tilex.fragment_view"

    def _api(self):
        return "T.reshape" if self._reshape() else "T.view"

    def _reshape(self):
        """Whether this is a reshape (same element type, another shape) rather than a view as another type."""
        return _bits(self.view) == _bits(self.base) and [int(d) for d in self.view.shape] != [
            int(d) for d in self.base.shape]

    def view_layout(self, base_layout):
        """The view's Fragment for the base's."""
        if self._reshape():
            return reshape_fragment(base_layout, self.view.shape)
        vb, bb = _bits(self.view), _bits(self.base)
        return merge_elements(base_layout, vb // bb) if vb >= bb else split_elements(base_layout, bb // vb)

    def base_layout(self, view_layout):
        """The base's Fragment for the view's."""
        if self._reshape():
            return reshape_fragment(view_layout, self.base.shape)
        vb, bb = _bits(self.view), _bits(self.base)
        return split_elements(view_layout, vb // bb) if vb >= bb else merge_elements(view_layout, bb // vb)


def _shape(buf):
    return [int(d) for d in buf.shape]


def _offsets(layout, shape):
    """The physical offset of every element of `shape` under `layout`, in row-major element order."""
    grid = [g.reshape(-1) for g in np.indices(shape, dtype=np.int64)]
    outs = layout.map_numpy(*grid)
    flat = np.zeros(grid[0].shape, dtype=np.int64)
    for o, e in zip(outs, layout.output_shape):
        flat = flat * int(e) + np.asarray(o, dtype=np.int64)
    return flat.reshape(-1)


def reinterpret_layout(layout, shape, bits, to_shape, to_bits):
    """The layout of the same bytes seen as `to_shape` elements of `to_bits` bits, given `layout` of `shape`
    elements of `bits` bits (None: row-major, which stays row-major). Element ``y`` of the new shape is the bytes
    at row-major position ``y``; its offset (1-d, in new elements) is where `layout` puts those bytes. Raises
    LayoutError when the new elements are wider and `layout` does not keep the old elements that make one up
    next to each other, aligned."""
    if layout is None:
        return None
    if bits % to_bits and to_bits % bits:
        raise LayoutError(f"{bits}-bit elements cannot be seen as {to_bits}-bit ones element by element")
    size = -(-math.prod(layout.output_shape) * bits // to_bits)
    if to_bits >= bits:
        r = to_bits // bits
        if r > 1:
            offs = _offsets(layout, shape).reshape(-1, r)
            if not (np.all(offs - offs[:, :1] == np.arange(r)) and np.all(offs[:, 0] % r == 0)):
                raise LayoutError(f"the layout {layout} does not keep each {r} consecutive {bits}-bit elements "
                                  f"together (aligned), so they cannot be read as one {to_bits}-bit element")

        def forward(*y):
            first = unflatten(row_major_offset(list(y), to_shape) * r, shape)
            return [tirx.floordiv(layout.offset(first), r)] if r > 1 else [layout.offset(first)]
    else:
        s = bits // to_bits

        def forward(*y):
            flat = row_major_offset(list(y), to_shape)
            return [layout.offset(unflatten(tirx.floordiv(flat, s), shape)) * s + tirx.floormod(flat, s)]

    return Layout(to_shape, forward, output_shape=[size])


class SharedView(_ViewRelation):
    """`view` (a DeclBuffer over `base`'s shared memory) as another shape and element type of the same bytes."""

    op_name = "tilex.shared_view"

    def _api(self):
        return "T.view" if str(self.view.dtype) != str(self.base.dtype) else "T.reshape"

    def view_layout(self, base_layout):
        """The view's layout for the base's (None: both row-major)."""
        return reinterpret_layout(base_layout, _shape(self.base), _bits(self.base), _shape(self.view),
                                  _bits(self.view))

    def base_layout(self, view_layout):
        """The base's layout for the view's."""
        return reinterpret_layout(view_layout, _shape(self.view), _bits(self.view), _shape(self.base),
                                  _bits(self.base))

    def physical_view(self, base_physical):
        """The view's physical buffer: 1-d, over the same shared memory (the same data) as the base's."""
        size = int(base_physical.shape[0]) * _bits(self.base) // _bits(self.view)
        return tirx.decl_buffer((max(size, 1),), str(self.view.dtype), self.view.name, data=base_physical.data,
                                scope=base_physical.scope())
