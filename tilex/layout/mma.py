"""Register fragments of ``mma.sync.m16n8k16`` (fp16/bf16 inputs, fp32 or fp16 accumulators; warp = 32 lanes), and
the A and B operands of ``m16n8k8`` (tf32), ``m16n8k32`` (8-bit) and ``m16n8k64`` (4-bit inputs).

All fragments are built with the ``Fragment`` algebra from an 8x8 atom (lane ``4*r + c//2`` holds row ``r``,
columns ``2*(lane%4) + {0,1}`` in 2 consecutive registers), then ``repeat`` / ``replicate`` up to the
full tile and the warp grid.  Warps are numbered ``warp = wi * warp_n + wj``; ``thread = warp * 32 + lane``.
"""
from __future__ import annotations

from .fragment import Fragment
from ._expr import LayoutError

__all__ = ["make_mma_accumulator_fragment", "make_mma_a_fragment", "make_mma_b_fragment"]

WARP_SIZE = 32


def _atom_rows():
    """8x8 atom, lane = 4*i + j//2, local = j%2 (C / A layout: rows by lane // 4)."""
    return Fragment((8, 8), lambda i, j: i * 4 + j // 2, lambda i, j: j % 2)


def _atom_cols():
    """8x8 atom transposed, lane = 4*j + i//2, local = i%2 (B layout: (k, n) with n by lane // 4)."""
    return Fragment((8, 8), lambda i, j: j * 4 + i // 2, lambda i, j: i % 2)


def _split(total, parts, align, what):
    if parts <= 0 or total % parts != 0 or (total // parts) % align != 0:
        raise LayoutError(f"{what}={total} must split into {parts} warps of a multiple of {align} "
                          f"(got {total}/{parts})")
    return total // parts


def make_mma_accumulator_fragment(m: int, n: int, warp_m: int, warp_n: int) -> Fragment:
    """fp32 accumulator (C/D) of an (m, n) tile computed by a ``warp_m x warp_n`` warp grid.

    Element (i, j): ``wi, ii = divmod(i, wm)``, ``wj, jj = divmod(j, wn)``;
    ``thread = (wi*warp_n + wj)*32 + (ii%8)*4 + (jj%8)//2``;
    ``local = ((ii//16)*(wn//8) + jj//8)*4 + ((ii%16)//8)*2 + jj%2``.
    """
    wm = _split(m, warp_m, 16, "m")
    wn = _split(n, warp_n, 8, "n")
    frag = _atom_rows().repeat((2, 1), on_thread=False)                         # m16n8: c0..c3
    frag = frag.repeat((wm // 16, wn // 8), on_thread=False, lower_dim_first=True)  # warp tile
    return frag.repeat((warp_m, warp_n), on_thread=True, lower_dim_first=True)   # warp grid


def make_mma_a_fragment(m: int, k: int, warp_m: int, warp_n: int, bits: int = 16) -> Fragment:
    """A operand (m, k) of `bits`-bit elements in registers: rows split over ``warp_m`` warps, replicated over the
    ``warp_n`` warps.

    With ``e = 32 // bits`` elements per 32-bit register (2 for fp16/bf16: m16k16 tiles; 4 for 8-bit: m16k32) and
    a k step of ``s = 8*e``, per m16 x s tile (r = ii%16, c = kk%s): ``lane = (r%8)*4 + (c%(4e))//e``, register
    element ``x = ((c//(4e))*2 + r//8)*e + c%e`` (four registers a0..a3); ``local = ((ii//16)*(k//s) + kk//s)*4e +
    x``; ``thread = (wi*warp_n + rep)*32 + lane`` for ``rep`` in ``[0, warp_n)``.
    """
    e = 32 // bits
    step = 8 * e
    wm = _split(m, warp_m, 16, "m")
    if k % step != 0 or k <= 0:
        raise LayoutError(f"k={k} must be a positive multiple of {step} for {bits}-bit elements")
    atom = Fragment((8, 4 * e), lambda i, j: i * 4 + j // e, lambda i, j: j % e)  # one register per lane
    frag = atom.repeat((2, 2), on_thread=False, lower_dim_first=False)             # a0..a3
    frag = frag.repeat((wm // 16, k // step), on_thread=False, lower_dim_first=True)
    frag = frag.replicate(warp_n)                                               # warps wj share A
    return frag.repeat((warp_m, 1), on_thread=True)


def make_mma_b_fragment(k: int, n: int, warp_m: int, warp_n: int, bits: int = 16) -> Fragment:
    """B operand (k, n) of `bits`-bit elements in registers: cols split over ``warp_n`` warps, replicated over the
    ``warp_m`` warps.

    With ``e = 32 // bits`` elements per 32-bit register (2 for fp16/bf16: k16n8 tiles; 1 for tf32: k8n8; 4 for
    8-bit: k32n8) and a k step of ``s = 8*e``, per k-step x n8 tile (r = kk%s, c = jj%8): ``lane = c*4 +
    (r%(4e))//e``, register element ``x = (r//(4e))*e + r%e`` (two registers b0, b1); ``local = ((kk//s)*(wn//8)
    + jj//8)*2e + x``; ``thread = (rep*warp_n + wj)*32 + lane`` for ``rep`` in ``[0, warp_m)``.
    """
    e = 32 // bits
    step = 8 * e
    wn = _split(n, warp_n, 8, "n")
    if k % step != 0 or k <= 0:
        raise LayoutError(f"k={k} must be a positive multiple of {step} for {bits}-bit elements")
    if bits == 16:
        atom = _atom_cols()
    else:
        atom = Fragment((4 * e, 8), lambda i, j: j * 4 + i // e, lambda i, j: i % e)  # one register per lane
    frag = atom.repeat((2, 1), on_thread=False)                                  # b0, b1
    frag = frag.repeat((k // step, wn // 8), on_thread=False, lower_dim_first=True)
    frag = frag.repeat((1, warp_n), on_thread=True)
    return frag.replicate(warp_m)
