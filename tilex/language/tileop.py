"""Frontend builders of tile operators: each returns the TIR call that carries the operator."""
from __future__ import annotations

from tilex.op.copy import copy_call
from tilex.op.fill import fill_call
from tilex.op.gemm import GemmWarpPolicy, gemm_call
from tilex.op.reduce import reduce_call


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None):
    """Copy a tile: ``T.copy(A[by * bm, k * bk], A_shared)``; either side may be a buffer, a slice, or a start
    element (then the tile has the other side's shape)."""
    return copy_call(src, dst)


def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False,
         k_pack=1, wg_wait=0):
    """``C += A @ B`` (with optional transposes) on tensor cores; A and B in shared memory, C a fragment."""
    return gemm_call(A, B, C, transpose_A, transpose_B, policy, clear_accum, k_pack, wg_wait)


def fill(buffer, value):
    """Set every element of a tile to `value`."""
    return fill_call(buffer, value)


def clear(buffer):
    """Set every element of a tile to zero."""
    return fill_call(buffer, 0)


def reduce(buffer, out, reduce_type, dim=-1, clear=True):
    """Reduce `buffer` along `dim` into `out` (reduce_type: sum, max, min, abssum, absmax); with clear=False the
    result is combined with what `out` already holds."""
    return reduce_call(buffer, out, reduce_type, dim, clear)


def reduce_sum(buffer, out, dim=-1, clear=True):
    return reduce_call(buffer, out, "sum", dim, clear)


def reduce_max(buffer, out, dim=-1, clear=True):
    return reduce_call(buffer, out, "max", dim, clear)


def reduce_min(buffer, out, dim=-1, clear=True):
    return reduce_call(buffer, out, "min", dim, clear)


def reduce_abssum(buffer, out, dim=-1, clear=True):
    return reduce_call(buffer, out, "abssum", dim, clear)


def reduce_absmax(buffer, out, dim=-1, clear=True):
    return reduce_call(buffer, out, "absmax", dim, clear)


__all__ = ["copy", "gemm", "fill", "clear", "GemmWarpPolicy", "reduce", "reduce_sum", "reduce_max", "reduce_min",
           "reduce_abssum", "reduce_absmax"]
