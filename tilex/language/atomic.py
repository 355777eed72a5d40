"""Frontend builders of atomics: ``T.atomic_add`` / ``T.atomic_max`` / ``T.atomic_min``.

* ``T.atomic_add(C[i, j], v)``: one element of a global or shared buffer, ``v`` a scalar (converted to C's dtype);
  usable anywhere, typically inside ``T.Parallel``.
* ``T.atomic_add(C[by * bm, bx * bn], C_frag)`` / ``T.atomic_add(C_region, S)``: a whole tile, like
  ``T.copy(C_frag, C[...])`` but combining atomically (vectorized where the GPU has vector atomics).

Element types: float32, float64, float16, bfloat16, int32, uint32, int64, uint64 (max/min on float16/bfloat16 use a
compare-and-swap loop; on float32/float64 a sign-bit trick that orders negative values and -0.0 correctly).
Not supported (raise TileOpError): ``return_prev=True`` (nothing is returned), memory orders other than relaxed,
``use_tma=True``.
"""
from __future__ import annotations

from tilex.op.atomic import ADD, MAX, MIN, atomic


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False):
    """``dst += value`` atomically (dst an element or a tile of a global/shared buffer)."""
    return atomic(ADD, dst, value, memory_order, return_prev, use_tma)


def atomic_max(dst, value, memory_order=None, return_prev=False):
    """``dst = max(dst, value)`` atomically (dst an element or a tile of a global/shared buffer)."""
    return atomic(MAX, dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order=None, return_prev=False):
    """``dst = min(dst, value)`` atomically (dst an element or a tile of a global/shared buffer)."""
    return atomic(MIN, dst, value, memory_order, return_prev)


__all__ = ["atomic_add", "atomic_max", "atomic_min"]
