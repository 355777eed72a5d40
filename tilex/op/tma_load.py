"""`tilex.tma_load`: one stage of a global->shared tile copy done by the Tensor Memory Accelerator (sm90).

Created by the software-pipelining pass for warp-specialized loops (users keep writing ``T.copy``). The shared
tile must carry a wgmma operand layout (`tilex.layout.wgmma`): each swizzle plane of it is one TMA box (E columns
by all rows, E = one swizzle row), loaded with the matching hardware swizzle, so data lands exactly where the
layout says. Out-of-bounds parts of a box read as zero. The tensor map is encoded by the host code before launch
(`LowerContext.tensor_map`, `tilex.ir.intrin.encode_tensor_map`).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.hardware import MBARRIER_TX, TMA_LOAD, supports, unsupported_message
from tilex.layout import make_wgmma_operand_layout, wgmma_swizzle_bytes
from tilex.op.base import InferLevel, TileOp, TileOpError, is_global, is_shared
from tilex.op.region import READ, WRITE, Region
from tilex.op.registry import register_tile_op

def tma_load_call(src: Region, dst: Region, barrier):
    return tirx.call_intrin("handle", "tilex.tma_load", src.to_call(READ), dst.to_call(WRITE), barrier)


def tma_box(dst: Region):
    """(rows, cols, swizzle bytes, elements per plane) of the shared tile a tma_load fills."""
    rows, cols = (int(e) for e in dst.extents[-2:])
    bits = tvm.DataType(str(dst.buffer.dtype)).bits
    s = wgmma_swizzle_bytes(rows, cols, bits)
    if s == 0:
        raise TileOpError(f"tma_load: a ({rows}, {cols}) tile has no TMA/wgmma swizzle")
    return rows, cols, s, s * 8 // bits


def tma_eligible(src: Region, dst: Region):
    """Whether a global->shared tile copy can be a TMA load (static 2-d contiguous global tensor, 16-bit data,
    16-byte aligned rows, a box that fits the hardware limits)."""
    gb = src.buffer
    if not (is_global(gb) and is_shared(dst.buffer)) or len(gb.shape) != 2 or str(gb.dtype) != str(dst.buffer.dtype):
        return False
    if tvm.DataType(str(gb.dtype)).bits != 16 or any(not isinstance(s, tirx.IntImm) for s in gb.shape):
        return False
    if int(gb.shape[1]) * 2 % 16:
        return False
    if gb.strides is not None and len(gb.strides) > 0:
        return False
    try:
        rows, cols, s, e = tma_box(dst)
    except TileOpError:
        return False
    src_ext = [int(x) for x in src.extents if int(x) != 1]
    return rows <= 256 and e <= 256 and cols % e == 0 and src_ext == [rows, cols]


@register_tile_op("tilex.tma_load")
class TmaLoadOp(TileOp):
    def __init__(self, src: Region, dst: Region, barrier):
        self.src, self.dst, self.barrier = src, dst, barrier

    @classmethod
    def from_call(cls, call):
        return cls(Region.from_call(call.args[0]), Region.from_call(call.args[1]), call.args[2])

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def describe(self):
        return f"tma_load({self.src} -> {self.dst})"

    def _layout(self):
        rows, cols, _, _ = tma_box(self.dst)
        buf = self.dst.buffer
        want = make_wgmma_operand_layout(rows, cols, tvm.DataType(str(buf.dtype)).bits)
        return want.expand([int(s) for s in buf.shape[:-2]]) if len(buf.shape) > 2 else want

    def infer_layout(self, ctx, level):
        # a stage the consumers read only with generic loads (a T.copy into a register fragment, a T.Parallel)
        # has no gemm to pin its layout: the TMA box needs this one
        if level == InferLevel.STRICT and ctx.layout_map.get(self.dst.buffer) is None:
            return {self.dst.buffer: self._layout()}
        return {}

    def lower(self, ctx):
        for feature in (TMA_LOAD, MBARRIER_TX):
            if not supports(ctx.target, feature):
                raise TileOpError(unsupported_message(ctx.target, feature, self.describe()))
        rows, cols, swz, elems = tma_box(self.dst)
        buf = self.dst.buffer
        want = self._layout()
        have = ctx.layout_map.get(buf)
        if have is None or not have.is_equal(want):
            raise TileOpError(f"{self.describe()}: the shared tile '{buf.name}' must have the wgmma swizzle layout "
                              f"for a TMA load, it has {have}")
        g = self.src.buffer
        tmap = ctx.tensor_map(g, (elems, rows), swz)
        row0, col0 = self.src.mins[-2], self.src.mins[-1]
        bar = tirx.address_of(ctx.load(self.barrier.source, list(self.barrier.indices)))
        out = []
        for p in range(cols // elems):
            idx = list(self.dst.mins[:-2]) + [self.dst.mins[-2], self.dst.mins[-1] + p * elems]
            phys, off = ctx.physical_index(buf, idx)
            # written by the async proxy, ordered by the stage's mbarrier: not an access for TVM's ThreadSync
            dst_ptr = phys.access_ptr(0, offset=off[0], extent=1)
            out.append(intrin.tma_load_2d(dst_ptr, tirx.address_of(tmap), bar, col0 + p * elems, row0))
        return out[0] if len(out) == 1 else tirx.SeqStmt(out)

