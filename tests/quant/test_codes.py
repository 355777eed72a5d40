"""tilex.quant.decode / encode: exhaustive over every code of every type, rounding, saturation, specials."""
import math

import pytest
import torch

from tilex import dtypes, quant

FLOATS = [t for t in dtypes.ALL_TYPES if t.is_float]
INTS = [t for t in dtypes.ALL_TYPES if not t.is_float]


def bitfield_values(t):
    """float64 value of every code, computed with torch bit operations from the fields (not from tilex)."""
    c = torch.arange(t.num_codes, dtype=torch.int64)
    if t.kind == "uint":
        return c.double()
    if t.kind == "int":
        return torch.where(c >= 2 ** (t.bits - 1), c - 2 ** t.bits, c).double()
    sign = torch.where((c >> (t.bits - 1)) & 1 == 1, -1.0, 1.0).double()
    e = (c >> t.mantissa) & (2 ** t.exponent - 1)
    m = (c & (2 ** t.mantissa - 1)).double()
    bias = 2 ** (t.exponent - 1) - 1
    normal = (1 + m / 2 ** t.mantissa) * torch.pow(2.0, (e - bias).double())
    subnormal = (m / 2 ** t.mantissa) * 2.0 ** (1 - bias)
    v = sign * torch.where(e == 0, subnormal, normal)
    top = e == 2 ** t.exponent - 1
    if t.exponent == 5:
        v = torch.where(top, torch.where(m == 0, sign * math.inf, math.nan), v)
    if (t.exponent, t.mantissa) == (4, 3):
        v = torch.where(top & (m == 7), math.nan, v)
    return v


def all_codes(t):
    return torch.arange(t.num_codes, dtype=torch.uint8)


@pytest.mark.parametrize("t", dtypes.ALL_TYPES, ids=str)
def test_decode_matches_bit_fields(t):
    got = quant.decode(all_codes(t), t)
    assert got.dtype == torch.float32
    want = bitfield_values(t).float()
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    ok = ~torch.isnan(want)
    assert torch.equal(got[ok], want[ok])
    assert torch.equal(torch.signbit(got[ok]), torch.signbit(want[ok]))  # -0.0 included


@pytest.mark.parametrize("t", dtypes.ALL_TYPES, ids=str)
def test_round_trip_every_code(t):
    codes = all_codes(t)
    values = quant.decode(codes, t)
    again = quant.encode(values, t, saturate=False)  # saturate=False: inf codes stay inf
    nan = torch.isnan(values)
    assert torch.equal(again[~nan], codes[~nan])
    nan_code = 2 ** (t.bits - 1) - 1  # canonical NaN: sign 0, every other bit 1
    assert (again[nan] == nan_code).all()
    if t.has_nan:
        assert math.isnan(t.value(nan_code))
    # the same values given as float16 / bfloat16 where exact there
    for target, torch_dtype in [("float16", torch.float16), ("bfloat16", torch.bfloat16)]:
        if t.exact_in(target):
            assert torch.equal(quant.encode(values.to(torch_dtype), t, saturate=False), again)


@pytest.mark.parametrize("name, torch_dtype, saturate", [("float8_e4m3", torch.float8_e4m3fn, True),
                                                         ("float8_e5m2", torch.float8_e5m2, False)])
def test_float8_encode_matches_torch(name, torch_dtype, saturate):
    t = dtypes.lookup(name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=g) * torch.pow(2.0, torch.randint(-20, 18, (20000,), generator=g).float())
    table = quant.decode(all_codes(t), t)
    finite = table[torch.isfinite(table)].unique()
    x = torch.cat([x, finite, (finite[1:] + finite[:-1]) / 2, -(finite[1:] + finite[:-1]) / 2])  # + every tie
    if name == "float8_e4m3":  # torch saturates e4m3fn; keep to the range where that is unambiguous
        x = x.clamp(-448, 448)
    assert torch.equal(quant.encode(x, t, saturate=saturate), x.to(torch_dtype).view(torch.uint8))


@pytest.mark.parametrize("t", FLOATS, ids=str)
def test_ties_go_to_the_even_code(t):
    values = bitfield_values(t)
    n = int(torch.isfinite(values[: t.num_codes // 2]).sum())  # non-negative finite codes 0 .. n-1
    lo = torch.arange(n - 1)
    mid = (values[lo] + values[lo + 1]) / 2
    even = torch.where(lo % 2 == 0, lo, lo + 1)
    sign = 2 ** (t.bits - 1)
    assert torch.equal(quant.encode(mid, t).long(), even)
    assert torch.equal(quant.encode(-mid, t).long(), even + sign)
    below, above = torch.nextafter(mid, torch.zeros_like(mid)), torch.nextafter(mid, mid * 2)
    assert torch.equal(quant.encode(below, t).long(), lo)
    assert torch.equal(quant.encode(above, t).long(), lo + 1)


def test_rounding_by_hand():
    e2m1 = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, 0.2, 6.9]
    assert quant.decode(quant.encode(torch.tensor(e2m1), "float4_e2m1"), "float4_e2m1").tolist() == \
        [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 0.0, 6.0]
    # e3m0 (no mantissa): values 0, 0.25, 0.5, 1, 2, 4, 8, 16; 1.5 ties between codes 3 (1) and 4 (2)
    assert quant.encode(torch.tensor([1.5, 3.0, 0.125, 0.375]), "float4_e3m0").tolist() == [4, 4, 0, 2]
    ints = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.49, -3.51])
    assert quant.decode(quant.encode(ints, "int4"), "int4").tolist() == [0, 2, 2, 0, -2, -2, 2, -4]
    assert quant.encode(torch.tensor([-1.0, -8.0, 7.0]), "int4").tolist() == [15, 8, 7]  # two's complement


def test_saturation_and_inf():
    big = torch.tensor([100.0, -100.0, math.inf, -math.inf])
    assert quant.encode(big, "float4_e2m1").tolist() == [7, 15, 7, 15]
    assert quant.encode(big, "float4_e2m1", saturate=False).tolist() == [7, 15, 7, 15]  # no inf to go to
    assert quant.encode(big * 10, "float8_e4m3").tolist() == [0x7E, 0xFE, 0x7E, 0xFE]  # 448, no inf
    assert quant.encode(big[:2], "float8_e4m3").tolist() == [0x6C, 0xEC]  # 100: tie of 96 and 104 -> 96
    assert quant.encode(big, "int4").tolist() == [7, 8, 7, 8]
    assert quant.encode(big, "uint4").tolist() == [15, 0, 15, 0]
    over = torch.tensor([60000.0, 61440.0, 1e6, math.inf, -1e6])  # e5m2: max 57344, next binade 65536
    assert quant.encode(over, "float8_e5m2").tolist() == [0x7B, 0x7B, 0x7B, 0x7B, 0xFB]
    assert quant.encode(over, "float8_e5m2", saturate=False).tolist() == [0x7B, 0x7C, 0x7C, 0x7C, 0xFC]
    # at the midpoint to the next binade: inf where it is the even code (e5m1: max 49152 is code 61)
    assert quant.encode(torch.tensor([57344.0, 57343.0]), "float7_e5m1", saturate=False).tolist() == [62, 61]
    # e5m0: max 32768 is code 30, inf 31; the midpoint 49152 stays at the even max
    assert quant.encode(torch.tensor([49152.0, 49153.0]), "float6_e5m0", saturate=False).tolist() == [30, 31]
    assert math.isinf(dtypes.float6_e5m0.value(0x1F))


def test_nan_and_signed_zero():
    nan = torch.tensor([math.nan, -math.nan, 1.0])
    assert quant.encode(nan, "float8_e4m3").tolist() == [0x7F, 0x7F, 0x38]
    assert quant.encode(nan, "float8_e5m2").tolist() == [0x7F, 0x7F, 0x3C]
    for name in ["float4_e2m1", "float6_e5m0", "int4", "uint8"]:
        with pytest.raises(ValueError, match=f"{name} has no NaN"):
            quant.encode(nan, name)
    zeros = torch.tensor([0.0, -0.0, -1e-30])
    assert quant.encode(zeros, "float4_e2m1").tolist() == [0, 8, 8]
    assert quant.encode(zeros, "float8_e4m3").tolist() == [0, 0x80, 0x80]
    assert quant.encode(zeros, "int4").tolist() == [0, 0, 0]


def test_bad_inputs():
    with pytest.raises(ValueError, match="0 .. 15 for uint4"):
        quant.decode(torch.tensor([3, 16], dtype=torch.uint8), "uint4")
    with pytest.raises(ValueError, match="integer"):
        quant.decode(torch.tensor([1.0]), "uint4")
    with pytest.raises(ValueError, match="unknown low-bit type"):
        quant.decode(torch.tensor([1], dtype=torch.uint8), "int16")
    with pytest.raises(ValueError, match="torch tensor"):
        quant.encode([1.0], "int4")
    assert quant.decode(torch.tensor([[1, 2]], dtype=torch.int64), "int4").tolist() == [[1.0, 2.0]]
