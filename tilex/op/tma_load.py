"""`tilex.tma_load`: one stage of a global->shared tile copy done by the Tensor Memory Accelerator (sm90).

Created by the software-pipelining pass for warp-specialized loops (users keep writing ``T.copy``). The shared
tile must carry a wgmma operand layout (`tilex.layout.wgmma`): each swizzle plane of it is one TMA box (E columns
by all rows, E = one swizzle row; for a global tensor of rank 3..5 the box is 1 in the dimensions other than the
tile's rows and columns, `tma_box_dims`), loaded with the matching hardware swizzle, so data lands exactly where the
layout says. A *vector* (a copy whose only non-unit extent is the last one, of 2- or 4-byte data: attention
backward's ``lse[b, h, i * bm:(i + 1) * bm]``) is one unswizzled box of (length, 1, ..., 1) into a row-major
shared buffer (:func:`tma_vector`). Out-of-bounds parts of a box read as zero. The tensor map is encoded by the
host code before launch (`LowerContext.tensor_map`, `tilex.ir.intrin.encode_tensor_map`).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.hardware import MBARRIER_TX, TMA_LOAD, supports, unsupported_message
from tilex.layout import Layout, make_wgmma_operand_layout, wgmma_swizzle_bytes
from tilex.op.base import InferLevel, TileOp, TileOpError, is_global, is_shared
from tilex.op.region import READ, WRITE, Region
from tilex.op.registry import register_tile_op

def tma_load_call(src: Region, dst: Region, barrier):
    return tirx.call_intrin("handle", "tilex.tma_load", src.to_call(READ), dst.to_call(WRITE), barrier)


#: Most elements of a vector TMA load (one box; TMA's box extents are at most 256).
MAX_VECTOR = 256


def _is_vector(region: Region) -> bool:
    """Whether every extent of `region` but the last is (statically) 1."""
    return all(isinstance(e, (int, tirx.IntImm)) and int(e) == 1 for e in region.extents[:-1])


def tma_box(dst: Region):
    """(rows, cols, swizzle bytes, elements per plane) of the shared tile a tma_load fills; a vector (extents 1
    but the last, :func:`tma_vector`) is (1, length, 0, length): one unswizzled plane.

    The shared buffer's layout is the wgmma layout of its two trailing dimensions (:func:`shared_layout`), so a
    tile that is only part of them (a column slice ``KV_s[:, 64:128]``) is loaded with the buffer's swizzle, one box
    per plane it covers: it must cover whole planes (its columns start and extend in multiples of one swizzle row)
    from a row that is a multiple of 8."""
    bits = tvm.DataType(str(dst.buffer.dtype)).bits
    if _is_vector(dst):
        n = int(dst.extents[-1])
        return 1, n, 0, n
    rows, cols = (int(e) for e in dst.extents[-2:])
    s = wgmma_swizzle_bytes(rows, cols, bits)
    if s == 0:
        raise TileOpError(f"tma_load: a ({rows}, {cols}) tile has no TMA/wgmma swizzle")
    b_rows, b_cols = (int(e) for e in dst.buffer.shape[-2:])
    if [b_rows, b_cols] != [rows, cols]:
        s = wgmma_swizzle_bytes(b_rows, b_cols, bits)
        e = s * 8 // bits
        r0, c0 = dst.mins[-2], dst.mins[-1]
        if s == 0 or rows % 8 or cols % e or not _multiple(r0, 8) or not _multiple(c0, e):
            raise TileOpError(f"tma_load: {dst} is not whole swizzle planes of '{dst.buffer.name}' ({b_rows} x "
                              f"{b_cols}): rows from a multiple of 8, columns in multiples of {e or '?'}")
    return rows, cols, s, s * 8 // bits


def _multiple(expr, n) -> bool:
    """Whether `expr` (an int or a PrimExpr) is provably a multiple of `n`."""
    if isinstance(expr, int):
        return expr % n == 0
    return bool(tvm.sym.Analyzer().can_prove(tirx.floormod(expr, n) == 0))


def shared_layout(dst: Region):
    """The layout a tma_load needs on the shared buffer of `dst`: row-major for a vector, else the wgmma layout of
    the buffer's two trailing dimensions (repeated over the leading ones)."""
    buf = dst.buffer
    if _is_vector(dst):  # row-major: one unswizzled box
        return Layout([int(s) for s in buf.shape], lambda *ix: list(ix))
    rows, cols = (int(s) for s in buf.shape[-2:])
    want = make_wgmma_operand_layout(rows, cols, tvm.DataType(str(buf.dtype)).bits)
    return want.expand([int(s) for s in buf.shape[:-2]]) if len(buf.shape) > 2 else want


def tma_bytes(dst: Region) -> int:
    """Bytes one tma_load into `dst` delivers (what its stage's full barrier expects)."""
    rows, cols, _, _ = tma_box(dst)
    return rows * cols * tvm.DataType(str(dst.buffer.dtype)).bits // 8


def static_strides(gb) -> bool:
    """Whether the global tensor `gb` is contiguous with every dimension but the outermost static: its strides are
    then constants, and the outermost extent (a `T.symbolic` size, say) only bounds the tensor map, which the host
    encodes from the call's shape."""
    return all(isinstance(s, tirx.IntImm) for s in gb.shape[1:]) and not (gb.strides is not None
                                                                          and len(gb.strides) > 0)


def symbolic_strides_aligned(gb, bytes_per) -> bool:
    """Whether the contiguous global tensor `gb`, whose extents may be symbolic, provably has byte strides (dims
    0 .. rank-2) that are multiples of 16 for every value of its sizes (the host encodes its tensor map per call
    from the call's shape)."""
    if gb.strides is not None and len(gb.strides) > 0:
        return False
    analyzer = tvm.sym.Analyzer()
    stride = tirx.const(bytes_per, "int64")
    for d in reversed(list(gb.shape[1:])):
        stride = stride * tirx.Cast("int64", d)
        if not analyzer.can_prove(tirx.floormod(stride, 16) == 0):
            return False
    return True


def _global_ok(gb, bytes_per) -> bool:
    """A contiguous global tensor with static strides (`static_strides`) that are multiples of 16 bytes (dims
    0 .. rank-2)."""
    if not static_strides(gb):
        return False
    stride = bytes_per
    for d in reversed([int(s) for s in gb.shape[1:]]):
        stride *= d
        if stride % 16:
            return False
    return True


def tma_vector(src: Region, dst: Region) -> bool:
    """Whether the global->shared copy `src` -> `dst` is a vector TMA load: 2- or 4-byte data (the same dtype on
    both sides), a static contiguous global tensor of rank 1..5 with 16-byte aligned strides, a copy region whose
    extents are 1 except the last, of at most :data:`MAX_VECTOR` elements and a multiple of 16 bytes, into a
    shared region with extent 1 in every dimension but the last. The shared buffer is row-major (no swizzle)."""
    gb, sb = src.buffer, dst.buffer
    rank = len(gb.shape)
    if not (is_global(gb) and is_shared(sb)) or not 1 <= rank <= 5 or str(gb.dtype) != str(sb.dtype):
        return False
    bits = tvm.DataType(str(gb.dtype)).bits
    if bits not in (16, 32) or not all(isinstance(e, (int, tirx.IntImm)) for e in [*src.extents, *dst.extents]):
        return False
    if not (_is_vector(src) and _is_vector(dst)):
        return False
    n = int(src.extents[-1])
    if n != int(dst.extents[-1]) or not 0 < n <= MAX_VECTOR or n * bits // 8 % 16:
        return False
    return _global_ok(gb, bits // 8)


def tma_rows_dim(src: Region):
    """The dimension of the global tensor that holds the rows of the tile `src` copies: the last dimension but one
    for a 2-d tensor; for a higher-rank one the single dimension besides the last whose extent is not 1 (None when
    there is no such single dimension)."""
    ext = [int(x) for x in src.extents]
    if len(ext) == 2:
        return 0
    others = [d for d, e in enumerate(ext[:-1]) if e != 1]
    return others[0] if len(others) == 1 else None


def tma_eligible(src: Region, dst: Region, symbolic_sizes=False):
    """Whether a global->shared copy can be a TMA load: a 2-d tile (:func:`tma_tile_eligible`) or a vector
    (:func:`tma_vector`). With `symbolic_sizes` (an explicit T.tma_copy) any dimension of a tile's global tensor may
    be symbolic where its strides stay provably 16-byte aligned."""
    return tma_tile_eligible(src, dst, symbolic_sizes) or tma_vector(src, dst)


def tma_tile_eligible(src: Region, dst: Region, symbolic_sizes=False):
    """Whether a global->shared tile copy can be a TMA load of a swizzled 2-d tile: a static, contiguous global
    tensor of rank 2..5 with 8- or 16-bit data (or 32-bit integer words) and 16-byte aligned rows (every byte stride a multiple of 16), a box that
    fits the hardware limits, and a copy region whose extents are 1 except in the last dimension (the tile's
    columns) and in one other dimension (the tile's rows; for a 2-d tensor, the first)."""
    gb = src.buffer
    rank = len(gb.shape)
    if _is_vector(dst):
        return False
    if not (is_global(gb) and is_shared(dst.buffer)) or not 2 <= rank <= 5 or str(gb.dtype) != str(dst.buffer.dtype):
        return False
    bits = tvm.DataType(str(gb.dtype)).bits
    # 32-bit tiles: integer words only (packed low-bit codes, T.dequantize); float32 tiles keep their cp.async path
    words = bits == 32 and str(gb.dtype) in ("int32", "uint32")
    if not (bits in (8, 16) or words):
        return False
    if symbolic_sizes and not static_strides(gb):
        if not symbolic_strides_aligned(gb, bits // 8):
            return False
    elif not _global_ok(gb, bits // 8):  # byte strides of dims rank-2 .. 0 (TMA: multiples of 16)
        return False
    try:
        rows, cols, s, e = tma_box(dst)
    except TileOpError:
        return False
    if not (rows <= 256 and e <= 256 and cols % e == 0):
        return False
    ext = [int(x) for x in src.extents]
    if rank == 2:
        return [x for x in ext if x != 1] == [rows, cols]
    rd = tma_rows_dim(src)
    return rd is not None and ext[-1] == cols and ext[rd] == rows


def tma_box_dims(src: Region, dst: Region):
    """The TMA box of one swizzle plane of the copy `src` -> `dst`, one extent per dimension of the global tensor,
    innermost first: the plane's columns, the tile's rows at the rows dimension (:func:`tma_rows_dim`), 1
    elsewhere ((cols, rows) for a 2-d tensor)."""
    rows, _, _, elems = tma_box(dst)
    rank = len(src.buffer.shape)
    box = [1] * rank
    box[0] = elems
    if not _is_vector(dst):
        box[rank - 1 - tma_rows_dim(src)] = rows
    return tuple(box)


def tma_reduce_box(dst: Region, src: Region):
    """The box (one extent per global dimension, innermost first) of a TMA reduction of the whole row-major 2-d
    shared tile `src` (rows x cols, 16- or 32-bit) into the global region `dst`, or None when the hardware cannot
    do it in one box: rows and cols at most 256, rows of a multiple of 16 bytes, the same dtype on both sides, a
    static contiguous global tensor of rank 2..5 with 16-byte aligned strides, and a region whose extents are 1
    except the last (cols) and one rows dimension (rows)."""
    sb = src.buffer
    if not is_shared(sb) or str(sb.dtype) != str(dst.buffer.dtype) or len(sb.shape) != 2:
        return None
    if not all(isinstance(e, (int, tirx.IntImm)) for e in [*src.extents, *sb.shape]):
        return None
    rows, cols = (int(e) for e in sb.shape)
    if [int(e) for e in src.extents] != [rows, cols]:
        return None
    return tma_reduce_tile_box(dst, rows, cols)


def tma_reduce_tile_box(dst: Region, rows: int, cols: int):
    """The box of TMA reductions of (rows x cols) tiles of dst's dtype into the global region `dst` (see
    `tma_reduce_box`), or None."""
    gb = dst.buffer
    if not is_global(gb):
        return None
    bits = tvm.DataType(str(gb.dtype)).bits
    rank = len(gb.shape)
    if bits not in (16, 32) or not 2 <= rank <= 5 or not _global_ok(gb, bits // 8):
        return None
    if not all(isinstance(e, (int, tirx.IntImm)) for e in dst.extents):
        return None
    if rows > 256 or cols > 256 or cols * bits // 8 % 16:
        return None
    ext = [int(e) for e in dst.extents]
    rd = tma_rows_dim(dst)
    if ext[-1] != cols or rd is None or ext[rd] != rows or any(e != 1 for d, e in enumerate(ext[:-1]) if d != rd):
        return None
    box = [1] * rank
    box[0], box[rank - 1 - rd] = cols, rows
    return tuple(box)


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
        tma_box(self.dst)  # a tile that is not whole planes of its buffer: TileOpError
        return shared_layout(self.dst)

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
            kind = "a row-major" if swz == 0 else "the wgmma swizzle"
            raise TileOpError(f"{self.describe()}: the shared tile '{buf.name}' must have {kind} layout "
                              f"for a TMA load, it has {have}")
        g = self.src.buffer
        rank = len(g.shape)
        tmap = ctx.tensor_map(g, tma_box_dims(self.src, self.dst), swz)
        bar = tirx.address_of(ctx.load(self.barrier.source, list(self.barrier.indices)))
        out = []
        for p in range(cols // elems):
            idx = list(self.dst.mins[:-1]) + [self.dst.mins[-1] + p * elems]
            phys, off = ctx.physical_index(buf, idx)
            # written by the async proxy, ordered by the stage's mbarrier: not an access for TVM's ThreadSync
            dst_ptr = phys.access_ptr(0, offset=off[0], extent=1)
            # coordinates innermost first: the plane's first column, then every other dimension's start
            coords = [self.src.mins[-1] + p * elems] + [self.src.mins[d] for d in reversed(range(rank - 1))]
            out.append(_TMA_LOADS[rank](dst_ptr, tirx.address_of(tmap), bar, *coords))
        return out[0] if len(out) == 1 else tirx.SeqStmt(out)


_TMA_LOADS = {1: intrin.tma_load_1d, 2: intrin.tma_load_2d, 3: intrin.tma_load_3d, 4: intrin.tma_load_4d,
              5: intrin.tma_load_5d}
