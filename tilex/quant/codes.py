"""Conversion between values and the codes of a low-bit type (`tilex.dtypes`), on torch tensors.

Codes are unpacked: one code per uint8 element, 0 <= code < 2**bits.

``encode`` rounds to nearest with ties to the even code (for floats with M >= 1 that is the even mantissa, as
in IEEE round-to-nearest-even; for e*m0 floats it is the even exponent field; for integers it is
``torch.round``'s half-to-even). Out-of-range magnitudes saturate to the largest finite value; only with
``saturate=False`` and a type that has inf (E == 5) do they round to inf: beyond the midpoint between the
largest finite value and the next power of two, and at it where inf is the even code (e5m2, e5m1, not e5m0).
NaN encodes to the type's canonical NaN code (sign 0, all ones), and a NaN input for a type without NaN raises
ValueError. For floats the sign is kept, so -0.0 and negative values that round to zero give the
negative-zero code.
"""
import functools
import math

import torch

from tilex import dtypes
from tilex.ir import lowbit_chunk


def check_codes(codes, dtype):
    """Raise ValueError unless `codes` is an integer tensor with every element in 0 .. 2**bits - 1."""
    if not isinstance(codes, torch.Tensor):
        raise ValueError(f"codes must be a torch tensor, got {type(codes).__name__}")
    if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
        raise ValueError(f"codes must be an integer (uint8) tensor, got {codes.dtype}")
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= dtype.num_codes):
        raise ValueError(f"codes must lie in 0 .. {dtype.num_codes - 1} for {dtype.name}, got values in "
                         f"{int(codes.min())} .. {int(codes.max())}")


@functools.lru_cache(maxsize=None)
def _value_table(dtype, device):
    """float32 (2**bits,): the value of each code."""
    return torch.tensor(dtype.values(), dtype=torch.float32, device=device)


@functools.lru_cache(maxsize=None)
def _magnitude_table(dtype, device):
    """float64 (n + 1,): the values of the non-negative finite codes 0 .. n-1 (increasing: for sign-magnitude
    floats the code is the index), then the next value an unbounded exponent would give (the overflow
    boundary's far side, whose code n is the inf code where the type has inf)."""
    values = dtype.values()[:dtype.num_codes // 2]
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    top = finite[-1]
    top_binade = math.frexp(top)[1] - 1  # floor(log2(top))
    next_value = top + math.ldexp(1.0, top_binade - dtype.mantissa)  # top + one unit in the last place
    return torch.tensor(finite + [next_value], dtype=torch.float64, device=device)


def decode(codes, dtype):
    """float32 values of unpacked `codes` of `dtype` (NaN / +-inf where the type has them)."""
    dtype = dtypes.lookup(dtype)
    check_codes(codes, dtype)
    return _value_table(dtype, codes.device)[codes.long()]


def encode(values, dtype, saturate=True):
    """uint8 codes of `dtype` nearest to `values` (see the module docstring for rounding and specials)."""
    dtype = dtypes.lookup(dtype)
    if not isinstance(values, torch.Tensor):
        raise ValueError(f"values must be a torch tensor, got {type(values).__name__}")
    if values.dtype.is_complex or values.dtype == torch.bool:
        raise ValueError(f"values must be a real tensor, got {values.dtype}")
    x = values.to(torch.float64)  # exact for every input dtype up to float64, so comparisons below are exact
    nan = torch.isnan(x)
    any_nan = bool(nan.any())
    if any_nan and not dtype.has_nan:
        raise ValueError(f"{dtype.name} has no NaN, but the values contain NaN")
    if dtype.is_float:
        codes = _encode_float(torch.where(nan, 0.0, x), dtype, saturate)
        if any_nan:
            codes = torch.where(nan, dtype.num_codes // 2 - 1, codes)  # sign 0, all ones: NaN for E == 4, 5
    else:
        rounded = torch.round(x).clamp(dtype.min_value, dtype.max_value)
        codes = rounded.to(torch.int64) & (dtype.num_codes - 1)  # two's complement for signed types
    return codes.to(torch.uint8)


def _encode_float(x, dtype, saturate):
    mags = _magnitude_table(dtype, x.device)
    n = mags.numel() - 1  # number of non-negative finite codes
    a = x.abs()
    hi = torch.searchsorted(mags, a).clamp(max=n)  # first magnitude >= a (n: past the largest finite)
    lo = (hi - 1).clamp(min=0)
    mid = (mags[lo] + mags[hi]) * 0.5  # exact: the magnitudes have few significant bits
    tie = lo + (lo & 1)  # lo and hi are neighbours: exactly one of them is even
    index = torch.where(a < mid, lo, torch.where(a > mid, hi, tie))
    overflow = index >= n
    if saturate or not dtype.has_inf:
        index = torch.where(overflow, n - 1, index)
    # else: index n is the inf code (all-ones exponent, mantissa 0 comes right after the largest finite)
    sign = torch.signbit(x).to(torch.int64) << (dtype.bits - 1)
    return index | sign


def raw_scale_exponent(dtype, act="float16"):
    """k such that the kernels' raw decode of `dtype` into `act` gives value * 2^-k (``T.dequantize(...,
    prescaled=True)`` then wants scales times 2^k), or None where the type has no raw decode."""
    t = dtypes.lookup(str(dtype))
    return lowbit_chunk.raw_scale_exponent(t.kind, t.exponent, t.mantissa, str(act))
