"""Tile regions: how tile operators name "this box of that buffer" inside TIR calls.

A region is carried as ``tilex.region(BufferLoad(buf, mins), access_mask, *extents)``: the load gives the buffer
and the starting corner, the extents the box size per dimension (1 for squeezed dims).
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.ir import Op

from tilex.ir.names import REGION_OP
from tilex.ir.visit import BufferLoadNode
from tilex.op.base import TileOpError

READ, WRITE, READ_WRITE = 1, 2, 3


def _const(x):
    if isinstance(x, int):
        return x
    return int(x.value) if isinstance(x, tirx.IntImm) else None


def _as_expr(x):
    return tirx.const(x, "int32") if isinstance(x, int) else x


@dataclass
class Region:
    """A box of a buffer: ``buffer[mins[d] : mins[d] + extents[d]]`` for each dimension d."""

    buffer: tirx.Buffer
    mins: list
    extents: list

    @property
    def ndim(self):
        return len(self.mins)

    @property
    def shape(self):
        """Extents with size-1 dimensions dropped (the tile's logical shape)."""
        return [e for e in self.extents if not _is_one(e)]

    def to_call(self, access=READ_WRITE):
        load = tirx.BufferLoad(self.buffer, [_as_expr(m) for m in self.mins])
        return tirx.call_intrin("handle", REGION_OP, load, access, *[_as_expr(e) for e in self.extents])

    @staticmethod
    def from_call(call):
        if not (isinstance(call, tvm.ir.Call) and call.op.same_as(Op.get(REGION_OP))):
            raise TypeError(f"expected a tilex.region call, got {call}")
        load = call.args[0]
        return Region(load.source, list(load.indices), list(call.args[2:]))

    def is_whole(self) -> bool:
        """Whether the region is its whole buffer (constant zero corner, extents equal to the shape)."""
        return all(_const(m) == 0 for m in self.mins) and \
            [_const(e) for e in self.extents] == [_const(d) for d in self.buffer.shape]

    @staticmethod
    def full(buffer):
        return Region(buffer, [tirx.const(0, "int32") for _ in buffer.shape], list(buffer.shape))

    def index(self, tile_indices):
        """Buffer indices of the tile element ``tile_indices`` (given over the non-unit dims)."""
        out, k = [], 0
        for m, e in zip(self.mins, self.extents):
            if _is_one(e):
                out.append(m)
            else:
                out.append(m + tile_indices[k])
                k += 1
        if k == 0 and len(tile_indices) == 1 and out:
            # a one-element tile (every extent 1) is indexed like a 1-d tile of shape [1] (see `tile_shape`)
            out[-1] = out[-1] + tile_indices[0]
            k = 1
        if k != len(tile_indices):
            raise TileOpError(f"{self}: a tile with {k} non-unit dimension(s) indexed with {len(tile_indices)} "
                              f"index(es) {list(tile_indices)}")
        return out

    def __repr__(self):
        rng = ", ".join(f"{m}:{m}+{e}" for m, e in zip(self.mins, self.extents))
        return f"{self.buffer.name}[{rng}]"


def _is_one(e):
    return isinstance(e, int) and e == 1 or isinstance(e, tirx.IntImm) and e.value == 1


def to_region(obj, like_shape=None):
    """Turn a frontend operand (buffer, slice, or start-index load) into a Region.

    A BufferLoad ``A[i, j]`` names the tile that starts there and has the shape ``like_shape`` (the other
    operand's tile shape), aligned to the trailing dimensions; leading extra dimensions get extent 1.
    """
    if isinstance(obj, Region):
        return obj
    if isinstance(obj, tvm.ir.expr.TensorRegion):
        return Region(obj.source, [r.min for r in obj.region], [r.extent for r in obj.region])
    if isinstance(obj, BufferLoadNode):
        nd = len(obj.indices)
        if like_shape is None:
            return Region(obj.source, list(obj.indices), [1] * nd)
        like = list(like_shape)
        if len(like) > nd:
            # drop the other side's leading unit dims if that makes it fit
            while len(like) > nd and _is_one(like[0]):
                like = like[1:]
            if len(like) > nd:
                raise ValueError(
                    f"cannot take a {len(like_shape)}-d tile of shape {list(like_shape)} "
                    f"starting at {obj.source.name}{list(obj.indices)} ({nd}-d buffer)")
        ext = [1] * (nd - len(like)) + like
        return Region(obj.source, list(obj.indices), ext)
    if tirx.is_buffer_var(obj):
        return Region.full(obj)
    raise TypeError(f"expected a buffer, a buffer slice or a buffer element, got {type(obj).__name__}: {obj}")


def tile_shape(obj):
    """Tile shape of an operand for start-index sugar (None for a bare element)."""
    if isinstance(obj, BufferLoadNode):
        return None
    r = to_region(obj)
    return r.shape or [1]
