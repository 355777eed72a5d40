"""`T.im2col`: one tile of the im2col matrix of a 2-d convolution, gathered from an NHWC image.

The image ``img`` is a 4-d ``(N, H, W, C)`` buffer; the convolution has a square ``kernel`` x ``kernel`` window,
``stride``, ``dilation`` and zero padding ``pad`` on every side, so its output is ``OH x OW`` with
``OH = (H + 2 pad - dilation (kernel - 1) - 1) // stride + 1`` (OW alike). The im2col matrix has one row per
output pixel, ``m = (n * OH + oh) * OW + ow``, and one column per window element, ``k = (kh * kernel + kw) * C + c``
(the row-major flattening of a ``(kernel, kernel, C, F)`` filter), holding the pixel

    img[n, oh * stride + kh * dilation - pad, ow * stride + kw * dilation - pad, c]

or 0 where that falls into the padding. ``T.im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad)``
writes the tile of rows ``nhw_step * BM ..`` and columns ``c_step * BK ..`` of it into ``col`` (a ``BM x BK``
tile: a shared tile, a whole fragment or a global region; leading extents 1). Elements past the last row
(``m >= N * OH * OW``) or column (``k >= kernel * kernel * C``) of the matrix are 0 as well, so a ragged last tile
multiplies as zeros.

Lowered as a thread-partitioned element loop (fragments by their layout, other tiles by a coalesced plan), each
element a guarded load; vectors of up to 16 bytes run along the channels when ``C`` and the tile width allow
(the vector then stays inside one window position, so its guard holds for all lanes). In a ``T.Pipelined`` loop it
is not one of the copies loaded ahead (those are ``T.copy``): it runs where it is written, in every iteration.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.visit import dtype_of
from tilex.op.base import InferLevel, TileOp, TileOpError, is_fragment, is_global, is_local, is_shared
from tilex.op.partition import (access_vectorizable, coalesced_plan, emit_by_fragment, emit_by_plan,
                                fragment_vector_width, static_shape)
from tilex.op.region import READ, WRITE, Region, to_region
from tilex.op.registry import register_tile_op

#: the integer options, in the order the call carries them after the two regions and the two steps
OPTIONS = ("kernel", "stride", "dilation", "pad")


def _int(e):
    if isinstance(e, int):
        return e
    return int(e.value) if isinstance(e, tirx.IntImm) else None


def _as_index(value, api, name):
    """`value` (a Python int or an integer expression) as an index expression."""
    if isinstance(value, int) and not isinstance(value, bool):
        return tirx.const(value, "int32")
    if tvm.ir.is_prim_expr(value) and dtype_of(value).startswith(("int", "uint")):
        return value
    raise TypeError(f"{api}: {name} must be an integer expression, got {value!r}")


def im2col_call(img, col, nhw_step, c_step, kernel, stride, dilation, pad, api="T.im2col"):
    """The TIR call of ``T.im2col`` (arguments as the module docstring describes; the four options are ints)."""
    src, dst = to_region(img), to_region(col)
    steps = [_as_index(nhw_step, api, "nhw_step"), _as_index(c_step, api, "c_step")]
    options = []
    for name, value in zip(OPTIONS, (kernel, stride, dilation, pad)):
        v = _int(value)
        if v is None or isinstance(value, bool):
            raise TypeError(f"{api}: {name} must be an int, got {value!r}")
        if v < (0 if name == "pad" else 1):
            raise ValueError(f"{api}: {name} must be {'>= 0' if name == 'pad' else '>= 1'}, got {v}")
        options.append(tirx.const(v, "int32"))
    Im2ColOp(src, dst, *steps, *(_int(o) for o in options))  # check the operands now, where the user wrote them
    return tirx.call_intrin("handle", Im2ColOp.op_name, src.to_call(READ), dst.to_call(WRITE), *steps, *options)


@register_tile_op("tilex.im2col")
class Im2ColOp(TileOp):
    """``T.im2col``: the image region (whole), the destination tile, the two tile steps and the four options."""

    def __init__(self, src: Region, dst: Region, nhw_step, c_step, kernel, stride, dilation, pad):
        self.src, self.dst = src, dst
        self.nhw_step, self.c_step = nhw_step, c_step
        self.kernel, self.stride, self.dilation, self.pad = kernel, stride, dilation, pad
        img, col = src.buffer, dst.buffer
        if len(img.shape) != 4 or not src.is_whole():
            raise TileOpError(f"{self.describe()}: the image must be a whole 4-d (N, H, W, C) buffer, got {src}")
        if not (is_global(img) or is_shared(img)):
            raise TileOpError(f"{self.describe()}: the image '{img.name}' must be in global or shared memory, not "
                              f"{img.scope()}")
        if str(img.dtype) != str(col.dtype):
            raise TileOpError(f"{self.describe()}: the image is {img.dtype} and the tile {col.dtype}; im2col copies "
                              f"elements unchanged, the dtypes must be equal")
        if dst.ndim < 2:
            raise TileOpError(f"{self.describe()}: the destination must be a 2-d (rows, columns) tile, got {dst}")
        ext = static_shape(dst.extents, f"{self.describe()} destination")
        if any(e != 1 for e in ext[:-2]):
            raise TileOpError(f"{self.describe()}: the destination tile may have extent 1 only outside its last two "
                              f"dimensions, got {dst}")
        self.extents = ext[-2:]
        if is_local(col):
            raise TileOpError(f"{self.describe()}: the destination must be a shared tile, a fragment or global "
                              f"memory, not the per-thread buffer '{col.name}'")
        if is_fragment(col) and not dst.is_whole():
            raise TileOpError(f"{self.describe()}: a fragment destination must be written whole, got {dst}")

    @classmethod
    def from_call(cls, call):
        a = call.args
        return cls(Region.from_call(a[0]), Region.from_call(a[1]), a[2], a[3], *(int(x.value) for x in a[4:8]))

    def buffers(self):
        return [self.src.buffer, self.dst.buffer]

    def reads_writes(self, buffer):
        if buffer.same_as(self.dst.buffer):
            return not self.dst.is_whole(), True
        return True, False

    def describe(self):
        return (f"T.im2col({self.src.buffer.name} -> {self.dst}, kernel={self.kernel}, stride={self.stride}, "
                f"dilation={self.dilation}, pad={self.pad})")

    # ---- the im2col matrix ------------------------------------------------------------------------------------
    def _geometry(self):
        n, h, w, c = self.src.buffer.shape
        span = self.dilation * (self.kernel - 1) + 1
        out_h = tirx.floordiv(h + 2 * self.pad - span, self.stride) + 1
        out_w = tirx.floordiv(w + 2 * self.pad - span, self.stride) + 1
        return n, h, w, c, out_h, out_w

    def _element(self, i, j, j0=None, analyzer=None):
        """(image indices, in-range condition) of tile element (i, j). Given `j0`, the column of the first element
        of j's vector (the vector's width dividing C and the tile width), the lane ``j - j0`` is added to the
        channel alone: the same element, in the form that shows the vector's loads to be contiguous."""
        n, h, w, c, out_h, out_w = self._geometry()
        lane = 0
        if j0 is not None:
            lane = j - j0 if analyzer is None else analyzer.simplify(j - j0)
            j = j0
        m = self.nhw_step * self.extents[0] + i
        k = self.c_step * self.extents[1] + j
        pixel = tirx.floormod(m, out_h * out_w)
        row = tirx.floordiv(pixel, out_w) * self.stride + tirx.floordiv(k, self.kernel * c) * self.dilation - self.pad
        col = tirx.floormod(pixel, out_w) * self.stride \
            + tirx.floormod(tirx.floordiv(k, c), self.kernel) * self.dilation - self.pad
        cond = tirx.all(m < n * out_h * out_w, k < self.kernel * self.kernel * c, row >= 0, row < h, col >= 0,
                        col < w)
        return [tirx.floordiv(m, out_h * out_w), row, col, tirx.floormod(k, c) + lane], cond

    def _dst_index(self, i, j):
        return [*self.dst.mins[:-2], self.dst.mins[-2] + i, self.dst.mins[-1] + j]

    # ---- layout inference -------------------------------------------------------------------------------------
    def infer_layout(self, ctx, level):
        col = self.dst.buffer
        if level != InferLevel.FREE or not is_fragment(col) or ctx.layout_map.get(col) is not None:
            return {}
        shape = [int(s) for s in col.shape]
        vec = self._widest_vector(ctx, self._max_vector())
        plan = None
        while plan is None and vec >= 1:
            plan = coalesced_plan(shape, ctx.threads, vec)
            vec //= 2
        if plan is None:
            raise TileOpError(f"{self.describe()}: cannot deal a {shape} tile to {ctx.threads} threads")
        return {col: plan}

    # ---- lowering ---------------------------------------------------------------------------------------------
    def _max_vector(self):
        """Lanes of a 16-byte vector, at most; 1 unless C (static) and the tile width are multiples of it."""
        c = _int(self.src.buffer.shape[3])
        v = max(1, 128 // tvm.DataType(str(self.src.buffer.dtype)).bits)
        while v > 1 and (c is None or c % v or self.extents[1] % v):
            v //= 2
        return v

    def _widest_vector(self, ctx, vec, phys=None):
        """The widest width <= `vec` whose image loads (and destination stores, `phys`: tile index -> physical
        indices) are contiguous, aligned vectors."""
        bind = {ctx.thread_var: tvm.ir.Range(0, ctx.threads)} if getattr(ctx, "thread_var", None) is not None else {}
        while vec > 1:
            def image_index(ix, v=vec):
                return self._element(ix[0], ix[1], ix[1] - tirx.floormod(ix[1], v))[0]

            accesses = [(self.src.buffer, image_index)]
            if phys is not None:
                accesses.append((self.dst.buffer, phys))
            if all(access_vectorizable(b, fn, self.extents, vec, ctx.analyzer, bind) for b, fn in accesses):
                break
            vec //= 2
        return vec

    def lower(self, ctx):
        img, col = self.src.buffer, self.dst.buffer
        zero = tirx.const(0, col.dtype)

        def element(ix, gix, store, vec):
            # a vector stays in one window position: its first element (gix) gives the pixel and the condition
            if vec == 1:
                index, cond = self._element(*ix)
            else:
                index, cond = self._element(gix[0], ix[1], gix[1], ctx.analyzer)
            return tirx.IfThenElse(cond, store(ctx.load(img, index)), store(zero))

        if is_fragment(col):
            frag = ctx.layout_map.get(col)
            if frag is None:
                raise TileOpError(f"{self.describe()}: fragment '{col.name}' has no layout")
            vec = self._widest_vector(ctx, fragment_vector_width(frag, self._max_vector(), ctx.analyzer))
            rank = len(col.shape)

            def make_frag(fix, fgix, l_flat):
                return element(fix[rank - 2:], fgix[rank - 2:],
                               lambda v: tirx.BufferStore(ctx.remap[col], v, [l_flat]), vec)

            return emit_by_fragment(ctx, frag, vec, make_frag, name="im2col", bounds=[int(s) for s in col.shape])

        def phys(ix):
            index = self._dst_index(*ix)
            return ctx.physical_index(col, index)[1] if col in ctx.remap else index

        vec = self._widest_vector(ctx, self._max_vector(), phys)

        def make(ix, gix):
            index = self._dst_index(*ix)
            stmt = element(ix, gix, lambda v: ctx.store(col, v, index), vec)
            if is_global(col):  # a global tile hanging over the edge: its outside elements are not written
                inside = [e < s for e, s in zip(self._dst_index(*gix), col.shape)
                          if not ctx.analyzer.can_prove(e < s)]
                if inside:
                    stmt = tirx.IfThenElse(tirx.all(*inside), stmt, None)
            return stmt

        return emit_by_plan(ctx, self.extents, vec, make, name="im2col")
