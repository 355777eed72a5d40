"""`T.view` / `T.reshape` of a fragment, as a relation between two layouts: the view keeps every thread's bits, so its
Fragment follows from the viewed fragment's (`tilex.layout.reinterpret`) and the other way round. A view of another
element type rescales the last dimension (elements split or merged); a view of the same element type with another
shape (`T.reshape`: dimensions split or merged, row-major order kept) puts each element in the thread and register
it had. Whichever of the two an
operator lays out first (a T.gemm pinning the view as its operand, a copy choosing the base's), layout inference
derives the other here; a T.view whose merged elements are not consecutive registers of one thread is a
TileOpError naming both buffers. Nothing is lowered: both are the same per-thread registers
(`transform.lower_tile_ops` declares the view over the base's local array)."""
from __future__ import annotations

import tvm

from tilex.layout import LayoutError
from tilex.layout.reinterpret import merge_elements, reshape_fragment, split_elements
from tilex.op.base import InferLevel, TileOp, TileOpError


def _bits(buf):
    t = tvm.DataType(str(buf.dtype))
    return t.bits * t.lanes


class FragmentView(TileOp):
    """`view` (a DeclBuffer over `base`'s registers) as another element type of the same bits per thread."""

    op_name = "tilex.fragment_view"

    def __init__(self, base, view):
        self.base, self.view = base, view

    def buffers(self):
        return [self.base, self.view]

    def describe(self):
        api = "T.reshape" if self._reshape() else "T.view"
        return (f"{api}({self.base.name} {list(self.base.shape)} {self.base.dtype} as {self.view.name} "
                f"{list(self.view.shape)} {self.view.dtype})")

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
