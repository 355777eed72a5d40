"""tilex.dtypes: the low-bit type descriptions, checked against values written from the bit fields here and
against torch's float8 dtypes."""
import ast
import dataclasses
import math
import pathlib

import pytest
import torch

from tilex import dtypes

FLOATS = [t for t in dtypes.ALL_TYPES if t.kind == "float"]
IEEE_STYLE = {"float8_e5m2", "float7_e5m1", "float6_e5m0"}  # all-ones exponent: inf / NaN


def expected_value(t, code):
    """The value of `code`, written from its bit fields (independently of tilex.dtypes)."""
    if t.kind == "uint":
        return float(code)
    if t.kind == "int":
        return float(code if code < 2 ** (t.bits - 1) else code - 2 ** t.bits)
    e_bits, m_bits = t.exponent, t.mantissa
    negative = code >= 2 ** (t.bits - 1)
    e = (code % 2 ** (t.bits - 1)) // 2 ** m_bits
    m = code % 2 ** m_bits
    bias = 2 ** (e_bits - 1) - 1
    if t.name in IEEE_STYLE and e == 2 ** e_bits - 1:
        v = math.inf if m == 0 else math.nan
    elif t.name == "float8_e4m3" and e == 15 and m == 7:
        v = math.nan
    elif e == 0:
        v = (m / 2 ** m_bits) * 2.0 ** (1 - bias)
    else:
        v = (1 + m / 2 ** m_bits) * 2.0 ** (e - bias)
    return -v if negative else v


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def test_all_types():
    names = [t.name for t in dtypes.ALL_TYPES]
    assert len(names) == len(set(names)) == 16 + 27  # 8 int + 8 uint + every split of 3..8-bit floats
    assert names[:3] == ["int1", "int2", "int3"] and names[8] == "uint1"
    for t in dtypes.ALL_TYPES:
        assert getattr(dtypes, t.name) is t
        assert dtypes.lookup(t.name) is t
        assert str(t) == t.name
    for bits in range(3, 9):
        for e in range(1, bits):
            t = getattr(dtypes, f"float{bits}_e{e}m{bits - 1 - e}")
            assert (t.bits, t.exponent, t.mantissa, t.bias) == (bits, e, bits - 1 - e, 2 ** (e - 1) - 1)


@pytest.mark.parametrize("t", dtypes.ALL_TYPES, ids=str)
def test_values_match_bit_fields(t):
    assert len(t.values()) == t.num_codes == 2 ** t.bits
    for code in range(t.num_codes):
        assert same(t.value(code), expected_value(t, code)), (t.name, code)


def test_e2m1_values():
    magnitudes = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert list(dtypes.float4_e2m1.values()) == magnitudes + [-m for m in magnitudes]
    assert math.copysign(1, dtypes.float4_e2m1.value(8)) == -1  # negative zero


@pytest.mark.parametrize("name, torch_dtype", [("float8_e4m3", torch.float8_e4m3fn),
                                               ("float8_e5m2", torch.float8_e5m2)])
def test_float8_matches_torch(name, torch_dtype):
    reference = torch.arange(256, dtype=torch.uint8).view(torch_dtype).double().tolist()
    ours = dtypes.lookup(name).values()
    assert all(same(a, b) for a, b in zip(ours, reference))


def test_ranges_and_specials():
    known = {"float8_e4m3": 448, "float8_e5m2": 57344, "float4_e2m1": 6, "float6_e2m3": 7.5,
             "float6_e3m2": 28, "float6_e5m0": 32768, "float3_e1m1": 3, "int4": 7, "uint4": 15, "int1": 0,
             "int8": 127, "uint8": 255}
    for name, top in known.items():
        assert dtypes.lookup(name).max_value == top, name
    assert dtypes.int4.min_value == -8 and dtypes.int1.min_value == -1 and dtypes.uint3.min_value == 0
    assert dtypes.float4_e2m1.min_value == -6 and dtypes.float8_e4m3.min_value == -448
    assert {t.name for t in dtypes.ALL_TYPES if t.has_inf} == IEEE_STYLE
    assert {t.name for t in dtypes.ALL_TYPES if t.has_nan} == {"float8_e4m3", "float8_e5m2", "float7_e5m1"}
    for t in dtypes.ALL_TYPES:
        finite = [v for v in t.values() if math.isfinite(v)]
        assert (min(finite), max(finite)) == (t.min_value, t.max_value)
        assert any(math.isinf(v) for v in t.values()) == t.has_inf
        assert any(math.isnan(v) for v in t.values()) == t.has_nan
        assert t.storage_bits == 8
        assert t.signed == (t.kind != "uint") and t.is_float == (t.kind == "float")


def test_constructors():
    assert dtypes.int_type(4) is dtypes.int4 and dtypes.int_type(4, signed=False) is dtypes.uint4
    assert dtypes.float_type(2, 1) is dtypes.float4_e2m1 and dtypes.float_type(5, 2) is dtypes.float8_e5m2
    assert dtypes.float_type(1, 1).values()[:4] == (0.0, 1.0, 2.0, 3.0)
    for bad in (0, 9):
        with pytest.raises(ValueError, match="1..8"):
            dtypes.int_type(bad)
    for e, m, msg in [(0, 2, "exponent >= 1"), (2, -1, "mantissa >= 0"), (1, 0, "2 bits"), (4, 4, "9 bits")]:
        with pytest.raises(ValueError, match=msg):
            dtypes.float_type(e, m)
    with pytest.raises(dataclasses.FrozenInstanceError):
        dtypes.int4.bits = 3
    assert dtypes.lookup(dtypes.LowBitType("uint4", 4, "uint")) is dtypes.uint4  # an equal object: canonical


def test_lookup_spellings():
    assert dtypes.lookup("float8_e4m3fn") is dtypes.float8_e4m3
    assert dtypes.lookup("float4_e2m1fn") is dtypes.float4_e2m1
    assert dtypes.lookup("float6_e3m2fn") is dtypes.float6_e3m2
    assert dtypes.lookup("float6_e2m3fnu") is dtypes.float6_e2m3
    for bad in ["int9", "int0", "uint", "float16", "float9_e5m3", "float8_e4m3fnuz", "bfloat16", "Int4"]:
        with pytest.raises(ValueError, match="accepted: 'int1'"):
            dtypes.lookup(bad)
    with pytest.raises(ValueError, match="8 bits != 1 sign \\+ 4 exponent \\+ 2 mantissa"):
        dtypes.lookup("float8_e4m2")
    with pytest.raises(ValueError, match="has infinities"):
        dtypes.lookup("float8_e5m2fn")
    with pytest.raises(ValueError, match="torch.int8"):
        dtypes.lookup(torch.int8)


@pytest.mark.parametrize("target, torch_dtype", [("float16", torch.float16), ("bfloat16", torch.bfloat16)])
def test_exact_in(target, torch_dtype):
    for t in dtypes.ALL_TYPES:
        finite = torch.tensor([v for v in t.values() if math.isfinite(v)], dtype=torch.float64)
        round_trips = bool((finite.to(torch_dtype).double() == finite).all())
        assert t.exact_in(target) == dtypes.exact_in(t.name, target) == round_trips, (t.name, target)
    if target == "float16":
        assert {t.name for t in FLOATS if not t.exact_in(target)} == {"float7_e6m0", "float8_e6m1", "float8_e7m0"}
    else:
        assert all(t.exact_in(target) for t in dtypes.ALL_TYPES)
    with pytest.raises(ValueError, match="unknown target"):
        dtypes.exact_in(dtypes.int4, "float8")


def test_module_is_torch_free():
    tree = ast.parse(pathlib.Path(dtypes.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"dataclasses", "functools", "math", "re"}
