"""tilex.op.int_cast: small-range integer -> float16 / bfloat16 casts without the conversion unit (CPU: the IR)."""
import tvm
from tvm import tirx

from tilex.op.int_cast import fast_int_casts


def _bound(var, lo, hi):
    a = tvm.sym.Analyzer()
    a.bind(var, tvm.ir.Range(lo, hi + 1))
    return a


def _casts(expr):
    out = []
    from tilex.ir.visit import walk
    walk(expr, (tirx.Cast, out.append))
    return out


def test_nibble_cast_becomes_or_and_subtraction():
    w = tirx.Var("w", "int32")
    code = (w >> 4) & 15
    out = fast_int_casts(tirx.Cast("float16", code), _bound(w, 0, 255))
    text = str(out)
    assert "reinterpret" in text and "25600" in text and "1024" in text  # 0x6400 = 1024.0
    assert all(str(c.ty) != "float16" for c in _casts(out))


def test_offset_joins_the_subtraction():
    """half(code) - 8 -> one subtraction of 1032: the code's range shifts to [-8, 7]."""
    w = tirx.Var("w", "int32")
    out = fast_int_casts(tirx.Cast("float16", w & 15) - tirx.const(8.0, "float16"), _bound(w, 0, 255))
    assert "1032" in str(out) and "reinterpret" in str(out)


def test_bfloat16_uses_its_own_power_of_two():
    w = tirx.Var("w", "int32")
    out = fast_int_casts(tirx.Cast("bfloat16", w & 127), _bound(w, 0, 1 << 20))
    assert "17152" in str(out)  # 0x4300 = 128.0 in bfloat16


def test_wide_or_unknown_ranges_keep_the_cast():
    w = tirx.Var("w", "int32")
    a = _bound(w, 0, 4096)
    for e in (tirx.Cast("float16", w), tirx.Cast("bfloat16", w & 255), tirx.Cast("float32", w & 15)):
        assert str(fast_int_casts(e, a)) == str(e)
