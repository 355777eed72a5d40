"""Hopper ``wgmma`` layouts: swizzled shared-memory operand tiles, the warpgroup accumulator fragment and the
register fragment of an A operand held in registers.

Operand tiles use the canonical swizzled layouts the wgmma matrix descriptors describe. The contiguous dimension
(``cols``: K for a K-major operand, M/N for an MN-major one) is cut into *planes* of one swizzle row
(``S`` bytes, S in {32, 64, 128}); each plane stores its ``rows`` rows back to back, S bytes each; inside every
8-row, S-byte-wide atom the 16-byte chunks are permuted by xor (CUTLASS's ``Swizzle<log2(S/16), 4, 3>`` on byte
offsets)::

    E      = S * 8 // bits                       # elements per swizzle row
    off    = (col // E) * rows * E + row * E + col % E
    b      = off * bits // 8                     # byte offset
    chunk  = (b // 16) % (S // 16);  key = (b // 128) % (S // 16)
    phys_b = b - 16 * chunk + 16 * (chunk ^ key)

A descriptor then says: start address, swizzle mode S, SBO = 8 * S bytes (next 8 rows) and LBO = rows * S bytes
(next plane; used by MN-major operands whose M/N extent spans several planes).
"""
from __future__ import annotations

from tvm import tirx

from ._expr import LayoutError
from .fragment import Fragment
from .layout import Layout

__all__ = ["wgmma_swizzle_bytes", "make_wgmma_operand_layout", "make_wgmma_accumulator_fragment",
           "make_wgmma_a_fragment"]


def wgmma_swizzle_bytes(rows: int, cols: int, dtype_bits: int) -> int:
    """Largest swizzle (128/64/32 bytes) the tile allows, or 0 if it fits none (then wgmma cannot read it)."""
    row_bytes = cols * dtype_bits // 8
    if rows % 8 or (cols * dtype_bits) % 8:
        return 0
    for s in (128, 64, 32):
        if row_bytes % s == 0:
            return s
    return 0


def make_wgmma_operand_layout(rows: int, cols: int, dtype_bits: int, swizzle_bytes: int | None = None) -> Layout:
    """(rows, cols) -> (physical offset,) layout of a wgmma operand tile whose ``cols`` dimension is contiguous."""
    s = swizzle_bytes or wgmma_swizzle_bytes(rows, cols, dtype_bits)
    if s not in (32, 64, 128):
        raise LayoutError(f"a ({rows}, {cols}) {dtype_bits}-bit tile has no wgmma swizzle layout "
                          f"(rows must be a multiple of 8 and each row a multiple of 32 bytes)")
    elems = s * 8 // dtype_bits
    groups = s // 16
    vec = 128 // dtype_bits  # elements per 16-byte chunk

    def fwd(r, c):
        off = tirx.floordiv(c, elems) * (rows * elems) + r * elems + tirx.floormod(c, elems)
        chunk = tirx.floormod(tirx.floordiv(off, vec), groups)
        key = tirx.floormod(tirx.floordiv(off, 8 * vec), groups)
        return [off + (tirx.bitwise_xor(chunk, key) - chunk) * vec]

    def inverse():
        def inv(p):
            chunk = tirx.floormod(tirx.floordiv(p, vec), groups)
            key = tirx.floormod(tirx.floordiv(p, 8 * vec), groups)
            off = p + (tirx.bitwise_xor(chunk, key) - chunk) * vec
            plane, rest = tirx.floordiv(off, rows * elems), tirx.floormod(off, rows * elems)
            return [tirx.floordiv(rest, elems), plane * elems + tirx.floormod(rest, elems)]

        return Layout((rows * cols,), inv, output_shape=(rows, cols))

    return Layout((rows, cols), fwd, output_shape=(rows * cols,), inverse=inverse)


def make_wgmma_accumulator_fragment(m: int, n: int, wg_m: int, wg_n: int) -> Fragment:
    """fp32 accumulator of an (m, n) tile computed by ``wg_m x wg_n`` warpgroups with ``m64nNk16`` wgmma.

    Warpgroup ``g = gi * wg_n + gj`` owns rows ``gi*wm .. +wm`` and columns ``gj*wn .. +wn``; inside it, 64-row
    blocks ``mb`` follow one another in registers; warp ``w`` of the group holds rows ``16w .. 16w+15`` of each block
    in the m16n8 accumulator pattern, repeated along N in registers::

        thread = g*128 + w*32 + (r%8)*4 + (c%8)//2
        local  = mb*(wn//2) + (c//8)*4 + (r//8)*2 + c%2        (r = row in the 16-row slab, c = column in wn)
    """
    if m % wg_m or n % wg_n or (m // wg_m) % 64 or (n // wg_n) % 8:
        raise LayoutError(f"a {m}x{n} tile cannot be split over {wg_m}x{wg_n} warpgroups of m64 x n8k multiples")
    wm, wn = m // wg_m, n // wg_n

    def thread(i, j):
        gi, ii = tirx.floordiv(i, wm), tirx.floormod(i, wm)
        gj, jj = tirx.floordiv(j, wn), tirx.floormod(j, wn)
        r = tirx.floormod(ii, 16)
        w = tirx.floordiv(tirx.floormod(ii, 64), 16)
        return (gi * wg_n + gj) * 128 + w * 32 + tirx.floormod(r, 8) * 4 + tirx.floordiv(tirx.floormod(jj, 8), 2)

    def index(i, j):
        ii, jj = tirx.floormod(i, wm), tirx.floormod(j, wn)
        r = tirx.floormod(ii, 16)
        mb = tirx.floordiv(ii, 64)
        return mb * (wn // 2) + tirx.floordiv(jj, 8) * 4 + tirx.floordiv(r, 8) * 2 + tirx.floormod(jj, 2)

    return Fragment((m, n), thread, index)


def make_wgmma_a_fragment(m: int, k: int, wg_m: int, wg_n: int, bits: int = 16) -> Fragment:
    """(m, k) A operand of `bits`-bit elements in registers for ``m64nNk16`` (16-bit) or ``m64nNk32`` (8-bit)
    wgmma issued by ``wg_m x wg_n`` warpgroups.

    Warpgroup ``g = gi * wg_n + gj`` needs rows ``gi*wm .. +wm`` (``wm = m // wg_m``) whatever its column slab
    ``gj``, so every element lives in the ``wg_n`` warpgroups of its row slab (replica ``rep = gj``). Inside a
    warpgroup the PTX ISA's A fragment (four .b32 registers per thread and k step) is the ``mma.sync`` A pattern
    per warp: warp ``w`` holds rows ``16w .. 16w+15`` of each 64-row block ``mb``. With ``e = 32 // bits``
    elements per register and a k step of ``s = 8*e``::

        thread = (gi*wg_n + rep)*128 + w*32 + (r%8)*4 + (c%(4e))//e
        local  = mb*(k//2) + (kk//s)*4e + ((c//(4e))*2 + r//8)*e + c%e     (r = row in the 16-row slab, c = kk%s)

    so the 4e elements one instruction reads for k-step ``ki`` are locals ``(mb*(k//s) + ki)*4e .. +4e``; for
    16-bit elements this is the accumulator pattern of an (m, k) tile (`make_wgmma_accumulator_fragment` with
    ``wg_n = 1``).
    """
    e = 32 // bits
    step = 8 * e
    if m % wg_m or (m // wg_m) % 64 or k % step or k <= 0 or wg_n < 1:
        raise LayoutError(f"an A operand of {m}x{k} cannot be split over {wg_m} warpgroup rows of m64k{step} "
                          f"(m must be a multiple of {64 * wg_m}, k of {step})")
    wm = m // wg_m

    def thread(i, j, *rep):
        gi, ii = tirx.floordiv(i, wm), tirx.floormod(i, wm)
        gj = rep[0] if rep else 0
        w = tirx.floordiv(tirx.floormod(ii, 64), 16)
        return (gi * wg_n + gj) * 128 + w * 32 + tirx.floormod(ii, 8) * 4 + tirx.floordiv(tirx.floormod(j, 4 * e), e)

    def index(i, j):
        ii = tirx.floormod(i, wm)
        r = tirx.floormod(ii, 16)
        c = tirx.floormod(j, step)
        return (tirx.floordiv(ii, 64) * (k // 2) + tirx.floordiv(j, step) * (4 * e)
                + (tirx.floordiv(c, 4 * e) * 2 + tirx.floordiv(r, 8)) * e + tirx.floormod(c, e))

    return Fragment((m, k), thread, index, replicate=wg_n)
