"""Warp primitives of tile programs (TileLang's names): lane and warp indices, shuffles, warp reductions, votes and
``T.sync_warp``.

Every function returns a TIR expression (a statement when written alone). Shuffles, reductions and votes are
collective: every lane named by `mask` (by default the whole warp) must execute them. Lane and warp indices are
computed from the enclosing ``T.Kernel``'s thread indices (``threadIdx.x + threadIdx.y * blockDim.x + ...``).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.visit import dtype_of
from tilex.language.kernel import current_kernel, integer_arg

__all__ = ["shfl_sync", "shfl_xor", "shfl_down", "shfl_up", "warp_reduce_sum", "warp_reduce_max", "warp_reduce_min",
           "warp_reduce_bitand", "warp_reduce_bitor", "get_lane_idx", "get_warp_idx", "get_warp_idx_sync",
           "get_warp_group_idx", "ballot_sync", "ballot", "activemask", "any_sync", "all_sync", "sync_warp"]

WARP_SIZE = 32
WARPS_PER_GROUP = 4
_SHUFFLE_BITS = 64  # warp.h moves values of up to 8 bytes


def _value(api, value):
    """A shuffled / reduced value as a scalar TIR expression (Python ints become int32, floats float32)."""
    if isinstance(value, bool):
        return tirx.const(value, "bool")
    if isinstance(value, int):
        return tirx.const(value, "int32")
    if isinstance(value, float):
        return tirx.const(value, "float32")
    if not tvm.ir.is_prim_expr(value):
        raise TypeError(f"{api}: the value must be a scalar expression (a number or a buffer element), got "
                        f"{value!r}")
    dt = tvm.DataType(dtype_of(value))
    if dt.bits * dt.lanes > _SHUFFLE_BITS:
        raise TypeError(f"{api}: a value of {dtype_of(value)} is more than the 8 bytes a warp shuffle moves")
    return value


def _mask(api, mask):
    """A lane mask as a uint32 expression (Python ints must fit 32 bits)."""
    m = integer_arg(api, "mask", mask)
    if isinstance(m, int):
        if not 0 <= m <= intrin.FULL_WARP_MASK:
            raise ValueError(f"{api}: mask must be a 32-bit lane mask, got {m:#x}")
        return tirx.const(m, "uint32")
    return m if dtype_of(m) == "uint32" else tirx.Cast("uint32", m)


def _width(api, width):
    w = integer_arg(api, "width", width)
    if isinstance(w, int) and (w < 1 or w > WARP_SIZE or w & (w - 1)):
        raise ValueError(f"{api}: width must be a power of two from 1 to {WARP_SIZE}, got {w}")
    return w


def _shuffle(kind, api, value, lane, width, mask):
    value = _value(api, value)
    lane = integer_arg(api, "srcLane" if kind == "sync" else ("laneMask" if kind == "xor" else "delta"), lane)
    if isinstance(lane, int) and lane < 0:
        raise ValueError(f"{api}: the lane argument must be >= 0, got {lane}")
    return intrin.shuffle(kind, dtype_of(value), _mask(api, mask), value, lane, _width(api, width))


def shfl_sync(value, srcLane, width=WARP_SIZE, mask=intrin.FULL_WARP_MASK):  # noqa: N803 - TileLang's spelling
    """`value` of lane `srcLane` of each group of `width` lanes, in every lane of the group (``__shfl_sync``)."""
    return _shuffle("sync", "T.shfl_sync", value, srcLane, width, mask)


def shfl_xor(value, delta, width=WARP_SIZE, mask=intrin.FULL_WARP_MASK):
    """`value` of lane ``lane ^ delta`` (``__shfl_xor_sync``): a butterfly exchange."""
    return _shuffle("xor", "T.shfl_xor", value, delta, width, mask)


def shfl_down(value, delta, width=WARP_SIZE, mask=intrin.FULL_WARP_MASK):
    """`value` of lane ``lane + delta`` of the group of `width` lanes; the last `delta` lanes keep their own
    (``__shfl_down_sync``)."""
    return _shuffle("down", "T.shfl_down", value, delta, width, mask)


def shfl_up(value, delta, width=WARP_SIZE, mask=intrin.FULL_WARP_MASK):
    """`value` of lane ``lane - delta`` of the group of `width` lanes; the first `delta` lanes keep their own
    (``__shfl_up_sync``)."""
    return _shuffle("up", "T.shfl_up", value, delta, width, mask)


def _warp_reduce(kind, value):
    api = f"T.warp_reduce_{kind}"
    value = _value(api, value)
    dt = tvm.DataType(dtype_of(value))
    if dt.lanes != 1:
        raise TypeError(f"{api}: reduces one scalar per lane, got a {dtype_of(value)} vector")
    integral = dt.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT)
    if kind in ("bitand", "bitor") and not integral:
        raise TypeError(f"{api}: a bitwise reduction needs an integer value, got {dtype_of(value)}")
    if not integral and dt.type_code not in (tvm.DataTypeCode.FLOAT, tvm.DataTypeCode.BFLOAT):
        raise TypeError(f"{api}: reduces integer, float16/32/64 or bfloat16 values, got {dtype_of(value)}")
    return intrin.warp_reduce(kind, dtype_of(value), value)


def warp_reduce_sum(value):
    """The sum of `value` over the 32 lanes of the warp, in every lane (in `value`'s own dtype)."""
    return _warp_reduce("sum", value)


def warp_reduce_max(value):
    """The maximum of `value` over the 32 lanes of the warp, in every lane."""
    return _warp_reduce("max", value)


def warp_reduce_min(value):
    """The minimum of `value` over the 32 lanes of the warp, in every lane."""
    return _warp_reduce("min", value)


def warp_reduce_bitand(value):
    """The bitwise and of an integer `value` over the 32 lanes of the warp, in every lane."""
    return _warp_reduce("bitand", value)


def warp_reduce_bitor(value):
    """The bitwise or of an integer `value` over the 32 lanes of the warp, in every lane."""
    return _warp_reduce("bitor", value)


def _positive(api, name, value, default):
    if value is None:
        return default
    v = integer_arg(api, name, value)
    if isinstance(v, int) and v <= 0:
        raise ValueError(f"{api}: {name} must be positive, got {v}")
    return v


def get_lane_idx(warp_size=None):
    """The lane of the calling thread in its warp: its linear index in the block modulo `warp_size` (32)."""
    api = "T.get_lane_idx"
    ws = _positive(api, "warp_size", warp_size, WARP_SIZE)
    return tirx.floormod(current_kernel(api + "()").linear_thread_index(), ws)


def get_warp_idx(warp_size=None):
    """The warp of the calling thread: its linear index in the block divided by `warp_size` (32)."""
    api = "T.get_warp_idx"
    ws = _positive(api, "warp_size", warp_size, WARP_SIZE)
    return tirx.floordiv(current_kernel(api + "()").linear_thread_index(), ws)


def get_warp_idx_sync(warp_size=None):
    """The warp of the calling thread, for code whose warps are converged (the same value as ``T.get_warp_idx``)."""
    api = "T.get_warp_idx_sync"
    ws = _positive(api, "warp_size", warp_size, WARP_SIZE)
    return tirx.floordiv(current_kernel(api + "()").linear_thread_index(), ws)


def get_warp_group_idx(warp_size=None, warps_per_group=None):
    """The warpgroup of the calling thread: its linear index in the block divided by ``warp_size *
    warps_per_group`` (32 x 4)."""
    api = "T.get_warp_group_idx"
    if warps_per_group is not None and warp_size is None:
        raise ValueError(f"{api}: give warp_size when giving warps_per_group")
    ws = _positive(api, "warp_size", warp_size, WARP_SIZE)
    wpg = _positive(api, "warps_per_group", warps_per_group, WARPS_PER_GROUP)
    return tirx.floordiv(current_kernel(api + "()").linear_thread_index(), ws * wpg)


def _predicate(api, predicate):
    if isinstance(predicate, (bool, int)):
        return tirx.const(int(predicate), "int32")
    if not tvm.ir.is_prim_expr(predicate):
        raise TypeError(f"{api}: the predicate must be an integer or boolean expression, got {predicate!r}")
    dt = tvm.DataType(dtype_of(predicate))
    if dtype_of(predicate) != "bool" and dt.type_code not in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT):
        raise TypeError(f"{api}: the predicate must be an integer or boolean expression, got {dtype_of(predicate)}")
    return predicate


def ballot_sync(predicate, mask=intrin.FULL_WARP_MASK):
    """A uint64 whose bit N is set when lane N (in `mask`) has a non-zero `predicate` (``__ballot_sync``; the upper
    32 bits are 0)."""
    api = "T.ballot_sync"
    return tirx.Cast("uint64", intrin.ballot_sync(_mask(api, mask), _predicate(api, predicate)))


def ballot(predicate):
    """``T.ballot_sync(predicate)`` over the whole warp."""
    return tirx.Cast("uint64", intrin.ballot_sync(tirx.const(intrin.FULL_WARP_MASK, "uint32"),
                                                  _predicate("T.ballot", predicate)))


def activemask():
    """A uint64 whose bit N is set when lane N executes this call (``__activemask``)."""
    return tirx.Cast("uint64", intrin.activemask())


def any_sync(predicate, mask=intrin.FULL_WARP_MASK):
    """Non-zero (int32) when any lane in `mask` has a non-zero `predicate` (``__any_sync``)."""
    api = "T.any_sync"
    return intrin.vote_sync("any", _mask(api, mask), _predicate(api, predicate))


def all_sync(predicate, mask=intrin.FULL_WARP_MASK):
    """Non-zero (int32) when every lane in `mask` has a non-zero `predicate` (``__all_sync``)."""
    api = "T.all_sync"
    return intrin.vote_sync("all", _mask(api, mask), _predicate(api, predicate))


def sync_warp(mask=None):
    """``__syncwarp()``: the lanes of the warp (those in `mask`) reconverge; their shared-memory accesses before it
    are visible to each other after it."""
    if mask is None:
        return intrin.syncwarp().value
    return intrin.syncwarp(_mask("T.sync_warp", mask)).value
