"""Frontend builders of atomics: ``T.atomic_add`` / ``T.atomic_max`` / ``T.atomic_min``.

* ``T.atomic_add(C[i, j], v)``: one element of a global or shared buffer, ``v`` a scalar (converted to C's dtype);
  usable anywhere, typically inside ``T.Parallel``.
* ``T.atomic_add(C[by * bm, bx * bn], C_frag)`` / ``T.atomic_add(C_region, S)``: a whole tile, like
  ``T.copy(C_frag, C[...])`` but combining atomically (vectorized where the GPU has vector atomics; on sm_90 a
  shared tile, and with ``use_tma=True`` a fragment through a staged shared tile, is added by the TMA unit).

* ``T.atomic_addx2(C[i, 2 * j], S[i, 2 * j])`` / ``T.atomic_addx4(...)``: two / four consecutive elements starting
  at the given ones, one vector atomic where the GPU has it (``C`` aligned to the vector).

Element types: float32, float64, float16, bfloat16, int32, uint32, int64, uint64 (max/min on float16/bfloat16 use a
compare-and-swap loop; on float32/float64 a sign-bit trick that orders negative values and -0.0 correctly).
On one element, ``return_prev=True`` gives the value before (``old = T.atomic_add(cnt[0], 1, return_prev=True)``)
and ``memory_order`` ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst"; device scope) orders the
thread's other memory accesses around the atomic: add on int32/uint32/int64/uint64/float32/float64, max/min on the
integer types. Tile atomics are relaxed and return nothing.
Not implemented (raise NotImplementedError): ``use_tma=True`` on an element or on max/min, ``annotations``.
"""
from __future__ import annotations

from tilex.ir import intrin
from tilex.language.options import as_bool, no_annotations, unsupported
from tilex.op.atomic import ADD, MAX, MIN, atomic, atomic_add_vector, is_tile

MEMORY_ORDERS = tuple(intrin.ATOMIC_ORDERS)  # ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst")


def _check(api, memory_order, return_prev, use_tma, annotations):
    if memory_order is not None and memory_order not in MEMORY_ORDERS:
        raise ValueError(f"{api}: memory_order must be one of {MEMORY_ORDERS} or None, got {memory_order!r}")
    no_annotations(api, annotations)
    return as_bool(api, "return_prev", return_prev)


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False, annotations=None):
    """``dst += value`` atomically (dst an element or a tile of a global/shared buffer); on an element,
    `return_prev` returns the value before."""
    return_prev = _check("T.atomic_add", memory_order, return_prev, use_tma, annotations)
    use_tma = as_bool("T.atomic_add", "use_tma", use_tma)
    if use_tma and not is_tile(value):
        unsupported("T.atomic_add", "use_tma", True,
                    "the TMA unit adds whole tiles: give a buffer or region as the value")
    return atomic(ADD, dst, value, memory_order, return_prev, use_tma=use_tma)


def atomic_max(dst, value, memory_order=None, return_prev=False, annotations=None):
    """``dst = max(dst, value)`` atomically (dst an element or a tile of a global/shared buffer)."""
    return_prev = _check("T.atomic_max", memory_order, return_prev, False, annotations)
    return atomic(MAX, dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order=None, return_prev=False, annotations=None):
    """``dst = min(dst, value)`` atomically (dst an element or a tile of a global/shared buffer)."""
    return_prev = _check("T.atomic_min", memory_order, return_prev, False, annotations)
    return atomic(MIN, dst, value, memory_order, return_prev)


def _vector_add(width, dst, value, return_prev):
    if as_bool(f"T.atomic_addx{width}", "return_prev", return_prev):
        unsupported(f"T.atomic_addx{width}", "return_prev", True,
                    "the vector atomics tilex issues return nothing; use T.atomic_add(..., return_prev=True) per element")
    return atomic_add_vector(dst, value, width)


def atomic_addx2(dst, value, return_prev=False):
    """Two consecutive elements added atomically: ``dst[..., j:j+2] += value[..., j:j+2]`` with ``dst`` and
    ``value`` given as their first elements (``T.atomic_addx2(C[i, 2 * j], S[i, 2 * j])``); ``dst`` aligned to two
    elements. float16 / bfloat16 pairs are one instruction."""
    return _vector_add(2, dst, value, return_prev)


def atomic_addx4(dst, value, return_prev=False):
    """Four consecutive elements added atomically (``T.atomic_addx4(C[i, 4 * j], S[i, 4 * j])``), ``dst`` aligned to
    four elements; float32 in global memory on sm_90 is one vector atomic."""
    return _vector_add(4, dst, value, return_prev)


__all__ = ["atomic_add", "atomic_max", "atomic_min", "atomic_addx2", "atomic_addx4"]
