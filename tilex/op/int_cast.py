"""Integer -> float16 / bfloat16 casts of small ranges without the conversion unit.

A conversion instruction (I2F) runs at a fraction of the ALU rate, and a decode loop converts one code per element.
For an integer x known to lie in [lo, lo + 2^m) (m = 10 for float16, 7 for bfloat16: the mantissa bits), the
float whose exponent is that of 2^m and whose low mantissa bits are x - lo is exactly 2^m + (x - lo); one OR
builds it and one subtraction of the constant 2^m - lo gives x, both exact. Ranges come from the arithmetic
analyzer (``(w >> s) & 15`` lies in [0, 15]).
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir.visit import dtype_of, map_nodes

# float type -> (bits of the float 2^m, 2^m): the numbers whose low mantissa bits hold x - lo
_MAGIC = {"float16": (0x6400, 1024), "bfloat16": (0x4300, 128)}


def _small_range(value, analyzer, span):
    src = dtype_of(value)
    if not (src.startswith("int") or src.startswith("uint")) or "x" in src or isinstance(value, tirx.IntImm):
        return None  # a constant's cast folds away
    bound = analyzer.const_int_bound(value)
    lo, hi = int(bound.min_value), int(bound.max_value)
    if hi - lo >= span or abs(lo) > span:
        return None  # the constant 2^m - lo must stay exact
    return lo


def fast_int_casts(node, analyzer):
    """`node` with every scalar cast of a small-range integer to float16 / bfloat16 rewritten as an OR into the
    mantissa of a power of two and one subtraction (see the module docstring); an integer constant added to or
    subtracted from the cast joins that subtraction (``half(code) - 8``). Other casts are left alone."""

    def magic(to, value):
        bits_of, span = _MAGIC[to]
        lo = _small_range(value, analyzer, span)
        if lo is None:
            return None
        # 16-bit arithmetic: the range fits, and the vector loop's width was chosen for the body's own types
        low = tirx.Cast("int16", value) - tirx.const(lo, "int16") if lo else value
        bits = tirx.Cast("uint16", low) | tirx.const(bits_of, "uint16")
        return tirx.reinterpret(to, bits) - tirx.const(float(span - lo), to)

    def on_cast(c):
        to = dtype_of(c)
        if to not in _MAGIC:
            return c
        out = magic(to, c.value)
        return c if out is None else out

    def folded(node, sign):
        # half(x) +- c with c an integer: half(x +- c), exact wherever the rewrite applies (|values| < 2^(m+1))
        a, b = node.a, node.b
        if not (isinstance(a, tirx.Cast) and isinstance(b, tirx.FloatImm) and dtype_of(a) in _MAGIC):
            return node
        c = float(b.value)
        if c != int(c) or abs(c) > _MAGIC[dtype_of(a)][1] or not dtype_of(a.value).startswith(("int", "uint")):
            return node
        shifted = tirx.Cast("int16", a.value) + tirx.const(sign * int(c), "int16")
        out = magic(dtype_of(a), shifted)
        return node if out is None else out

    node = map_nodes(node, [(tirx.Sub, lambda n: folded(n, -1)), (tirx.Add, lambda n: folded(n, 1))], order="post")
    return map_nodes(node, (tirx.Cast, on_cast), order="post")
