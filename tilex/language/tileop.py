"""Frontend builders of tile operators: each returns the TIR call that carries the operator.

The keyword arguments are TileLang's; the ones tilex does not implement raise ``NotImplementedError`` naming them
when given a non-default value (see ``tilex.language.options``).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import dtypes as lowbit
from tilex.ir.visit import BufferLoadNode
from tilex.language.options import as_bool, as_int, constant, no_annotations, unsupported
from tilex.op.copy import copy_call
from tilex.op.dequantize import dequantize_call
from tilex.op.fill import fill_call
from tilex.op.gemm import GemmWarpPolicy, gemm_call
from tilex.op.gemm_sp import gemm_sp_call
from tilex.op.im2col import im2col_call
from tilex.op.reduce import BITWISE_KINDS, KINDS, is_integer_dtype, reduce_call
from tilex.op.region import to_region
from tilex.op.scan import scan_call

EVICTION_POLICIES = ("evict_normal", "evict_first", "evict_last")
PREFER_INSTRUCTIONS = ("tma", "cp_async", "sync")
_COPY_ANNOTATIONS = ("coalesced_width", "disable_tma", "eviction_policy", "prefer_instruction")


def copy(src, dst, *, coalesced_width=None, disable_tma=False, eviction_policy=None, prefer_instruction=None,
         annotations=None, loop_layout=None):
    """Copy a tile: ``T.copy(A[by * bm, k * bk], A_shared)``; either side may be a buffer, a slice, or a start
    element (then the tile has the other side's shape).

    ``disable_tma=True`` keeps this copy off the Tensor Memory Accelerator (sm90 TMA loads / stores);
    ``eviction_policy="evict_normal"`` is the default cache behaviour. ``annotations`` may carry the same four
    options (its values take precedence). Not implemented (NotImplementedError): ``coalesced_width``,
    ``eviction_policy="evict_first"/"evict_last"``, ``prefer_instruction``, ``loop_layout``.
    """
    api = "T.copy"
    if annotations is not None:
        if not isinstance(annotations, dict):
            raise TypeError(f"{api}: annotations must be a dict, got {annotations!r}")
        opts = {"coalesced_width": coalesced_width, "disable_tma": disable_tma, "eviction_policy": eviction_policy,
                "prefer_instruction": prefer_instruction}
        for key, value in annotations.items():
            if key not in _COPY_ANNOTATIONS:
                unsupported(api, "annotations", {key: value}, f"annotation '{key}' is not implemented")
            opts[key] = value
        coalesced_width, disable_tma = opts["coalesced_width"], opts["disable_tma"]
        eviction_policy, prefer_instruction = opts["eviction_policy"], opts["prefer_instruction"]
    if coalesced_width is not None:
        as_int(api, "coalesced_width", coalesced_width, minimum=1)
        unsupported(api, "coalesced_width", constant(coalesced_width),
                    "tilex picks the vector width of each copy from the layouts")
    if isinstance(eviction_policy, int) and not isinstance(eviction_policy, bool) and 0 <= eviction_policy < 3:
        eviction_policy = EVICTION_POLICIES[eviction_policy]  # TileLang's annotation encoding
    if eviction_policy is not None and eviction_policy not in EVICTION_POLICIES:
        raise ValueError(f"{api}: eviction_policy must be one of {EVICTION_POLICIES} or None, got {eviction_policy!r}")
    if eviction_policy not in (None, "evict_normal"):
        unsupported(api, "eviction_policy", eviction_policy, "copies use the default cache policy")
    if prefer_instruction is not None:
        if prefer_instruction not in PREFER_INSTRUCTIONS:
            raise ValueError(f"{api}: prefer_instruction must be one of {PREFER_INSTRUCTIONS} or None, got "
                             f"{prefer_instruction!r}")
        unsupported(api, "prefer_instruction", prefer_instruction,
                    "use disable_tma=True, or pass_configs such as tilex.disable_tma")
    if loop_layout is not None:
        unsupported(api, "loop_layout", loop_layout, "copy loops take their layout from layout inference")
    if as_bool(api, "disable_tma", disable_tma):
        return copy_call(src, dst, disable_tma=True)
    return copy_call(src, dst)


def im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy=None, annotations=None):
    """Gather one tile of a 2-d convolution's im2col matrix from an NHWC image: rows ``nhw_step * BM ..`` (output
    pixels ``(n * OH + oh) * OW + ow``), columns ``c_step * BK ..`` (window elements ``(kh * kernel + kw) * C + c``)
    of a ``kernel`` x ``kernel`` window with `stride`, `dilation` and zero padding `pad`, into the ``BM x BK`` tile
    `col`; padding and elements past the matrix's last row / column are 0 (see ``tilex.op.im2col``).
    ``eviction_policy="evict_normal"`` is the default cache behaviour; the other policies and ``annotations`` are
    not implemented (NotImplementedError)."""
    api = "T.im2col"
    if isinstance(eviction_policy, int) and not isinstance(eviction_policy, bool) and 0 <= eviction_policy < 3:
        eviction_policy = EVICTION_POLICIES[eviction_policy]
    if eviction_policy is not None and eviction_policy not in EVICTION_POLICIES:
        raise ValueError(f"{api}: eviction_policy must be one of {EVICTION_POLICIES} or None, got {eviction_policy!r}")
    if eviction_policy not in (None, "evict_normal"):
        unsupported(api, "eviction_policy", eviction_policy, "the image is read with the default cache policy")
    no_annotations(api, annotations)
    return im2col_call(img, col, nhw_step, c_step, kernel, stride, dilation, pad, api)


def c2d_im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy=None, annotations=None):
    """TileLang's older name of :func:`im2col` (the same operator)."""
    return im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy, annotations)


def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False,
         k_pack=1, wg_wait=0, mbar=None, annotations=None):
    """``C += A @ B`` (with optional transposes) on tensor cores; A and B in shared memory, C a fragment.

    ``clear_accum=True`` zeroes C first (``C = A @ B``). The warpgroup MMAs of sm90 are waited for by tilex
    itself (inside ``T.Pipelined`` one k-tile stays in flight), so ``wg_wait`` other than 0 is not implemented;
    neither are ``k_pack`` != 1 (ROCm), ``mbar`` (Blackwell) nor ``annotations``.
    """
    api = "T.gemm"
    transpose_A = as_bool(api, "transpose_A", transpose_A)
    transpose_B = as_bool(api, "transpose_B", transpose_B)
    p = constant(policy)
    if isinstance(p, bool) or not isinstance(p, int) or p not in {int(x) for x in GemmWarpPolicy}:
        raise ValueError(f"{api}: policy must be a T.GemmWarpPolicy ({', '.join(x.name for x in GemmWarpPolicy)}), "
                         f"got {policy!r}")
    policy = GemmWarpPolicy(p)
    clear_accum = as_bool(api, "clear_accum", clear_accum)
    if as_int(api, "k_pack", k_pack, minimum=1) != 1:
        unsupported(api, "k_pack", constant(k_pack), "k_pack packs matrix cores on ROCm only")
    if as_int(api, "wg_wait", wg_wait, minimum=-1) != 0:
        unsupported(api, "wg_wait", constant(wg_wait),
                    "tilex waits for its warpgroup MMAs itself (and keeps one k-tile in flight inside T.Pipelined)")
    if mbar is not None:
        unsupported(api, "mbar", mbar, "mbar is for Blackwell tcgen05 MMAs")
    no_annotations(api, annotations)
    return gemm_call(A, B, C, transpose_A, transpose_B, policy, clear_accum)


def dequantize(packed, out, dtype, scale=None, zero=None, group_size=0, offset=None, prescaled=False):
    """Decode packed low-bit codes into the float16/bfloat16 fragment `out`:
    ``out[i, j] = (value(code[i, j]) - zero) * scale``, with per-group scale and zero, or
    ``value(code[i, j]) * scale + offset`` with a per-group `offset` instead of a zero (one fma per pair; an
    offset of -(zero * scale) computed ahead, or the "min" of min/scale quantization formats).

    `dtype` is a low-bit type (``T.uint4``, ``T.int3``, ``T.float6_e3m2``, ``tilex.dtypes.float_type(...)`` or its
    name); `packed` holds 32-bit words in the order `tilex.op.dequantize.packed_order` gives for `out`'s layout
    (which a consumer such as T.gemm chooses); `scale` / `zero` are (groups of the tile, rows of out) tiles:
    ``scale[j // group_size, i]`` (the layout of (K // g, N) scale tensors).

    `prescaled=True` (float types): `scale` holds scale * 2^k, k = ``tilex.quant.raw_scale_exponent(dtype, out's
    dtype)``; the codes are then decoded without their own power-of-two multiply (one fma per pair fewer).
    """
    api = "T.dequantize"
    # TVMScript's dtype constructors (T.int8, T.float8_e4m3, ...) name their dtype in `_dtype_str`
    name = getattr(dtype, "_dtype_str", None) or str(dtype)
    try:
        lowbit.lookup(name)
    except ValueError as e:
        raise ValueError(f"{api}: {e}") from None
    group_size = as_int(api, "group_size", group_size, minimum=0)
    if offset is not None and (scale is None or zero is not None):
        raise ValueError(f"{api}: an offset goes with a scale and without a zero (value * scale + offset)")
    if not isinstance(prescaled, bool):
        raise ValueError(f"{api}: prescaled is True or False, got {prescaled!r}")
    return dequantize_call(packed, out, name, scale, zero, group_size, offset, prescaled)


def fill(buffer, value, annotations=None):
    """Set every element of a tile to `value`."""
    no_annotations("T.fill", annotations)
    return fill_call(buffer, value)


def clear(buffer, annotations=None):
    """Set every element of a tile to zero."""
    no_annotations("T.clear", annotations)
    return fill_call(buffer, 0)


def _ndim(obj):
    """The number of dimensions of the buffer behind a reduce operand, or None if it is not recognised."""
    if tirx.is_buffer_var(obj):
        return len(obj.shape)
    source = getattr(obj, "source", None) if isinstance(obj, (tvm.ir.expr.TensorRegion, BufferLoadNode)) else None
    return len(source.shape) if source is not None else None


def _dtype(obj):
    """The dtype of the buffer behind a reduce operand, or None if it is not recognised."""
    if tirx.is_buffer_var(obj):
        return str(obj.dtype)
    source = getattr(obj, "source", None) if isinstance(obj, (tvm.ir.expr.TensorRegion, BufferLoadNode)) else None
    return str(source.dtype) if source is not None else None


def reduce(buffer, out, reduce_type, dim=-1, clear=True, batch=1, nan_propagate=False, annotations=None):
    """Reduce `buffer` along `dim` into `out` (reduce_type: sum, max, min, abssum, absmax, and for integer tiles
    bitand, bitor, bitxor); with clear=False the result is combined with what `out` already holds. Each of
    `buffer` and `out` is a fragment or a shared tile; `out` has the source's shape without `dim`, or with it as 1."""
    api = f"T.reduce_{reduce_type}" if isinstance(reduce_type, str) else "T.reduce"
    if reduce_type not in KINDS:
        raise ValueError(f"T.reduce: unknown reduce_type {reduce_type!r}, expected one of {KINDS}")
    if reduce_type in BITWISE_KINDS:
        for name, operand in (("source", buffer), ("destination", out)):
            dtype = _dtype(operand)
            if dtype is not None and not is_integer_dtype(dtype):
                raise TypeError(f"{api}: a bitwise reduction needs integer tiles, the {name} is {dtype}")
    nd = _ndim(buffer)
    dim = as_int(api, "dim", dim)
    if nd is not None and not -nd <= dim < nd:
        raise ValueError(f"{api}: dim={dim} is out of range for a {nd}-d source (expected {-nd} <= dim < {nd})")
    clear = as_bool(api, "clear", clear)
    if as_int(api, "batch", batch, minimum=1) != 1:
        unsupported(api, "batch", constant(batch), "each output element is combined on its own")
    if as_bool(api, "nan_propagate", nan_propagate):
        unsupported(api, "nan_propagate", True)
    no_annotations(api, annotations)
    return reduce_call(buffer, out, reduce_type, dim, clear)


def reduce_sum(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    return reduce(buffer, out, "sum", dim, clear, batch, annotations=annotations)


def reduce_max(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False, annotations=None):
    return reduce(buffer, out, "max", dim, clear, batch, nan_propagate, annotations)


def reduce_min(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False, annotations=None):
    return reduce(buffer, out, "min", dim, clear, batch, nan_propagate, annotations)


def reduce_abssum(buffer, out, dim=-1, batch=1, annotations=None):
    """As in TileLang, an abs-sum always overwrites `out` (no `clear` argument)."""
    return reduce(buffer, out, "abssum", dim, True, batch, annotations=annotations)


def reduce_absmax(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False, annotations=None):
    return reduce(buffer, out, "absmax", dim, clear, batch, nan_propagate, annotations)


def _scan(kind, src, dst, dim, reverse, annotations):
    api = f"T.cum{kind}"
    no_annotations(api, annotations)
    try:
        s = to_region(src)
        d = s if dst is None else to_region(dst, like_shape=s.extents)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{api}: {e}") from None
    rank = len(s.extents)
    dim = as_int(api, "dim", dim)
    if not -rank <= dim < rank:
        raise ValueError(f"{api}: dim={dim} is out of range for a {rank}-d source (expected {-rank} <= dim < {rank})")
    s_ext, d_ext = [constant(e) for e in s.extents], [constant(e) for e in d.extents]
    if all(isinstance(e, int) for e in s_ext + d_ext) and \
            [e for e in s_ext if e != 1] != [e for e in d_ext if e != 1]:
        raise ValueError(f"{api}: the destination's shape {d_ext} must match the source's {s_ext}")
    return scan_call(s, d, kind, dim, as_bool(api, "reverse", reverse))


def cumsum(src, dst=None, dim=0, reverse=False, annotations=None):
    """The running (inclusive) sum of `src` along `dim` into `dst` (in place when `dst` is None):
    ``dst[..., i, ...] = src[..., 0, ...] + ... + src[..., i, ...]``; ``reverse=True`` sums from the end
    (``src[..., i, ...] + ... + src[..., n-1, ...]``). Shared-memory tiles (or regions of them) and whole fragments,
    one dtype for both."""
    return _scan("sum", src, dst, dim, reverse, annotations)


def cummax(src, dst=None, dim=0, reverse=False, annotations=None):
    """The running (inclusive) maximum of `src` along `dim` into `dst` (in place when `dst` is None);
    ``reverse=True`` from the end. The operands as for ``T.cumsum``."""
    return _scan("max", src, dst, dim, reverse, annotations)


def reduce_bitand(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """The bitwise and of an integer tile along `dim` (clear=False: and-ed into what `out` holds)."""
    return reduce(buffer, out, "bitand", dim, clear, batch, annotations=annotations)


def reduce_bitor(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """The bitwise or of an integer tile along `dim` (clear=False: or-ed into what `out` holds)."""
    return reduce(buffer, out, "bitor", dim, clear, batch, annotations=annotations)


def reduce_bitxor(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
    """The bitwise xor of an integer tile along `dim` (clear=False: xor-ed into what `out` holds)."""
    return reduce(buffer, out, "bitxor", dim, clear, batch, annotations=annotations)


def gemm_sp(A_sparse, E, B, C, transpose_A=False, transpose_E=False, transpose_B=False, policy=GemmWarpPolicy.Square,
            clear_accum=False, k_pack=1, wg_wait=0, annotations=None):
    """TileLang's structured-sparse GEMM: ``C += A @ B`` with A given 2:4-compressed (1:2 for 32-bit elements) as its
    kept values `A_sparse` (M, K / 2) and metadata `E` (M, K / e_factor) (stored transposed with transpose_A /
    transpose_E); the format is ``tilex.op.gemm_sp``'s docstring. tilex rebuilds the dense A in registers and runs
    the dense T.gemm: the results of the product, without the sparse tensor-core instructions. ``k_pack`` != 1,
    ``wg_wait`` != 0 and ``annotations`` are not implemented (as for T.gemm)."""
    api = "T.gemm_sp"
    transpose_A = as_bool(api, "transpose_A", transpose_A)
    transpose_E = as_bool(api, "transpose_E", transpose_E)
    transpose_B = as_bool(api, "transpose_B", transpose_B)
    p = constant(policy)
    if isinstance(p, bool) or not isinstance(p, int) or p not in {int(x) for x in GemmWarpPolicy}:
        raise ValueError(f"{api}: policy must be a T.GemmWarpPolicy ({', '.join(x.name for x in GemmWarpPolicy)}), "
                         f"got {policy!r}")
    clear_accum = as_bool(api, "clear_accum", clear_accum)
    if as_int(api, "k_pack", k_pack, minimum=1) != 1:
        unsupported(api, "k_pack", constant(k_pack), "k_pack packs matrix cores on ROCm only")
    if as_int(api, "wg_wait", wg_wait, minimum=-1) != 0:
        unsupported(api, "wg_wait", constant(wg_wait), "tilex waits for its MMAs itself")
    no_annotations(api, annotations)
    return gemm_sp_call(A_sparse, E, B, C, transpose_A, transpose_E, transpose_B, GemmWarpPolicy(p), clear_accum)


__all__ = ["copy", "gemm", "fill", "clear", "GemmWarpPolicy", "reduce", "reduce_sum", "reduce_max", "reduce_min",
           "reduce_abssum", "reduce_absmax", "reduce_bitand", "reduce_bitor", "reduce_bitxor", "cumsum", "cummax",
           "im2col", "c2d_im2col", "gemm_sp"]
