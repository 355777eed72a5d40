"""Group-wise weight quantization to a low-bit type: ``w ~= (decode(code) - zero) * scale``.

The weight is (N, K) in ``torch.nn.Linear`` orientation (out_features, in_features); each row is split into
groups of ``group_size`` consecutive elements along K (any positive divisor of K; None or -1: one group per
row), each with its own scale (and zero).

* Symmetric (``zero_point=False``): scale = absmax(group) / q, code = encode(w / scale), with q the type's
  largest value. ``zeros`` is None, except for unsigned integers: they are offset binary with the fixed zero
  2**(b-1), q = 2**(b-1) - 1 (uint4 codes 1 .. 15 read as -7 .. 7 around code 8); ``zeros`` then holds that
  constant. int1 and uint1 have no positive value and need ``zero_point=True``.
* Zero points, integers: asymmetric min/max over the group's range widened to include 0:
  scale = (max - min) / (qmax - qmin), zero = round(qmin - min / scale) (an integer in the code range).
* Zero points, floats: the range is centred: scale = (max - min) / 2 / q, zero = -midpoint / scale (a float
  offset in decoded units), so that (w - midpoint) / scale lies in [-q, q]. The scale is raised where needed
  to keep |zero| within half of ``scale_dtype``'s range.

Scales are at least ``scale_dtype``'s smallest normal value, 1 where the range is 0 (an all-zero group; with
a float zero point, any constant group), and rounded *up* to ``scale_dtype`` so that no element saturates.
Codes are computed against the stored scales and zeros, so an element's error is at most scale / 2 for
integers, and for floats half the type's spacing at the element (in decoded units) times the scale, plus,
with a float zero point, the rounding of the zero to ``scale_dtype``.
"""
import dataclasses
from typing import Optional

import torch

from tilex import dtypes
from tilex.quant.codes import decode, encode


@dataclasses.dataclass(eq=False)
class QuantizedWeight:
    """codes: uint8 (N, K) unpacked codes; scales, zeros: (N, K // group_size); zeros None when not used."""

    codes: torch.Tensor
    scales: torch.Tensor
    zeros: Optional[torch.Tensor]
    dtype: dtypes.LowBitType
    group_size: int

    @property
    def shape(self):
        return tuple(self.codes.shape)


def _group_size(group_size, k):
    if group_size is None or group_size == -1:
        return k
    if not isinstance(group_size, int) or group_size <= 0 or k % group_size:
        raise ValueError(f"group_size must be a positive divisor of K = {k} (or None / -1 for one group per "
                         f"row), got {group_size!r}")
    return group_size


def _store_scale(scale, scale_dtype):
    """`scale` (float32, > 0 or 0 for all-zero groups) as `scale_dtype`, rounded up, at least its smallest
    normal value."""
    finfo = torch.finfo(scale_dtype)
    scale = torch.where(scale == 0, 1.0, scale.clamp(min=finfo.tiny))
    stored = scale.to(scale_dtype)
    stored = torch.where(stored.float() < scale, torch.nextafter(stored, torch.full_like(stored, finfo.max)),
                         stored)
    if not bool(torch.isfinite(stored).all()):
        raise ValueError(f"the weight's magnitude needs scales beyond the range of {scale_dtype}")
    return stored


def quantize(weight, dtype, group_size=128, zero_point=False, scale_dtype=torch.float16):
    """Quantize a float (N, K) `weight` to `dtype` group-wise along K (see the module docstring)."""
    dtype = dtypes.lookup(dtype)
    if not isinstance(weight, torch.Tensor) or not weight.dtype.is_floating_point:
        raise ValueError(f"weight must be a floating-point torch tensor, got "
                         f"{weight.dtype if isinstance(weight, torch.Tensor) else type(weight).__name__}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-d (out_features, in_features), got shape {tuple(weight.shape)}")
    if not (isinstance(scale_dtype, torch.dtype) and scale_dtype.is_floating_point):
        raise ValueError(f"scale_dtype must be a floating-point torch dtype, got {scale_dtype!r}")
    if not bool(torch.isfinite(weight).all()):
        raise ValueError("weight contains inf or NaN")
    n, k = weight.shape
    g = _group_size(group_size, k)
    w = weight.float().reshape(n, k // g, g)

    if zero_point and dtype.is_float:
        scales, zeros = _float_zero_point(w, dtype, scale_dtype)
    elif zero_point:
        scales, zeros = _int_zero_point(w, dtype, scale_dtype)
    else:
        scales, zeros = _symmetric(w, dtype, scale_dtype)
    shifted = w / scales.float().unsqueeze(-1)
    if zeros is not None:
        shifted = shifted + zeros.float().unsqueeze(-1)
    codes = encode(shifted, dtype).reshape(n, k)
    return QuantizedWeight(codes, scales, zeros, dtype, g)


def _symmetric(w, dtype, scale_dtype):
    offset = 2 ** (dtype.bits - 1) if dtype.kind == "uint" else 0
    top = (offset - 1) if dtype.kind == "uint" else dtype.max_value
    if top <= 0:
        raise ValueError(f"{dtype.name} has no positive value around its zero; use zero_point=True")
    scales = _store_scale(w.abs().amax(-1) / top, scale_dtype)
    zeros = torch.full_like(scales, offset) if offset else None
    return scales, zeros


def _int_zero_point(w, dtype, scale_dtype):
    qmin, qmax = dtype.min_value, dtype.max_value
    lo = w.amin(-1).clamp(max=0)  # the range includes 0 so that the zero lies in the code range
    hi = w.amax(-1).clamp(min=0)
    scales = _store_scale((hi - lo) / (qmax - qmin), scale_dtype)
    zeros = torch.round(qmin - lo / scales.float()).clamp(qmin, qmax) + 0.0  # + 0.0: no -0 zeros
    return scales, zeros.to(scale_dtype)  # integers up to 255: exact in every float dtype


def _float_zero_point(w, dtype, scale_dtype):
    lo, hi = w.amin(-1), w.amax(-1)
    mid = (hi + lo) * 0.5
    scale = (hi - lo) * 0.5 / dtype.max_value
    scale = torch.where(scale == 0, 1.0, scale)
    # keep |zero| = |mid| / scale at most half of scale_dtype's range, so the stored zero is finite
    scale = torch.maximum(scale, mid.abs() * (2.0 / torch.finfo(scale_dtype).max))
    scales = _store_scale(scale, scale_dtype)
    zeros = (-mid / scales.float()).to(scale_dtype)
    return scales, zeros


def dequantize(qw, out_dtype=torch.float16):
    """The (N, K) weight ``(decode(codes) - zeros) * scales`` in `out_dtype` (computed in float32)."""
    values = decode(qw.codes, qw.dtype)
    if qw.zeros is not None:
        values = values - qw.zeros.float().repeat_interleave(qw.group_size, dim=1)
    return (values * qw.scales.float().repeat_interleave(qw.group_size, dim=1)).to(out_dtype)
