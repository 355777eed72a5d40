"""SubWordFills: vectors of one value of 8- or 16-bit elements are written in 32-bit words.

Consumes: per-thread TIR after TVM's VectorizeLoop (flat buffers, ``Broadcast`` values, ``Ramp`` indices).
Produces: the same program where a ``Broadcast(v, n)`` of 8-bit (float8, int8, uint8) or 16-bit integer elements
with n > 4 lanes -- the zero fill of a bounds-guarded copy or of a guarded global read, a T.fill, a T.Parallel
writing one value -- is ``reinterpret(Broadcast(w, n * bits / 32))`` of the uint32 word `w` that repeats `v`'s
bits, wherever it occurs: folded for a constant (float constants: +0.0), ``uint32(bits of v) * 0x01010101``
(``* 0x00010001`` for 16 bits) otherwise.

Why: TVM's CUDA code generator prints a float8 vector of one value for 1, 2 or 4 lanes only (an internal error
otherwise) and an 8-lane int8 / 16-lane int8 / 8-lane int16 one as a ``make_int2`` / ``make_int4`` call with one
argument per element, which nvcc rejects; uint32 vectors print as ``make_uint2`` / ``make_uint4``. 16-bit floats
(half8, bfloat16 x 8) print correctly and are left alone.
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx

from tilex.ir.visit import map_nodes

#: the most lanes of an 8-bit / 16-bit integer or float8 vector of one value TVM's CUDA code generator prints
_MAX_LANES = 4


def needs_words(dtype) -> bool:
    """Whether a one-value vector of `dtype` (a vector type) is written in 32-bit words by this pass."""
    t = tvm.DataType(str(dtype))
    if t.lanes <= _MAX_LANES:
        return False
    if t.bits == 8:
        return t.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) or "float8" in str(t)
    return t.bits == 16 and t.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT)


def _constant_bits(value, bits):
    """The bit pattern of a scalar constant of `bits` bits, or None when it is not a constant this pass reads
    (a float constant other than +0.0, whose bits depend on the float format)."""
    if isinstance(value, tirx.IntImm):
        return int(value.value) & ((1 << bits) - 1)
    if isinstance(value, tirx.FloatImm) and float(value.value) == 0.0 and math.copysign(1.0, value.value) > 0:
        return 0  # +0.0: every bit clear in each float format
    return None


def _word(value, bits):
    """The uint32 word repeating the `bits`-bit value `value` (a constant folded here, anything else computed)."""
    per_word = 32 // bits
    pattern = _constant_bits(value, bits)
    if pattern is not None:
        word = 0
        for _ in range(per_word):
            word = (word << bits) | pattern
        return tirx.const(word, "uint32")
    narrow = f"uint{bits}"
    t = tvm.DataType(str(value.dtype))
    raw = tirx.Cast(narrow, value) if t.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) \
        else tirx.reinterpret(narrow, value)
    repeat = sum(1 << (bits * k) for k in range(per_word))  # 0x01010101 / 0x00010001
    return tirx.Cast("uint32", raw) * tirx.const(repeat, "uint32")


def sub_word_fills_body(body):
    """`body` with its one-value vectors of 8/16-bit elements written in 32-bit words (see the module docstring)."""

    def on_broadcast(vec):
        if not needs_words(vec.dtype):
            return vec
        bits = tvm.DataType(str(vec.dtype)).bits
        per_word, n = 32 // bits, int(vec.lanes)
        if n % per_word:
            return vec
        word = _word(vec.value, bits)
        return tirx.reinterpret(str(vec.dtype), tirx.Broadcast(word, n // per_word) if n > per_word else word)

    return map_nodes(body, (tirx.Broadcast, on_broadcast))


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.SubWordFills")
def SubWordFills(func, mod, ctx):  # noqa: N802
    """The pass (see the module docstring)."""
    body = sub_word_fills_body(func.body)
    return func if body.same_as(func.body) else func.with_body(body)
