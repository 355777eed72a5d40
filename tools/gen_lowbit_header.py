"""Generate src/tilex/lowbit.h: register decoders from a packed chunk of 32 low-bit codes (1..8-bit unsigned and
signed integers, 3..8-bit floats eXmY) to 16 registers of fp16 or bf16 pairs, by bit tricks.

The chunk format is tilex/ir/lowbit_chunk.py's (loaded from its file, so this script needs no tilex import). For
every type and target this script plans straight-line code -- which shifted copies of which words, which masks,
which constants, which fp16x2/bf16x2 operations -- checks the plan bit-exactly against the values of every code
(a Python model of each operation, :func:`verify`), and prints one explicit specialization per type:

* integers: OR the code, placed at bit z of each half, into the mantissa of the target's 2^mantissa (fp16
  1024.0, bf16 128.0), then one fma: x * 2^-z - (2^mantissa * 2^-z + offset); signed codes get their sign bit
  flipped by the same LOP3 and offset 2^(bits-1). z is chosen per pair so that the fewest shifted words are made.
  8-bit codes do not fit bf16's 7-bit mantissa: the low 7 bits go over 128.0, bit 7 into the exponent of 0.5
  (0.5 or 1.0), and two fmas add them up exactly.
* floats: sign to bit 15, exponent+mantissa so that the mantissa lines up with the target's, then one fma by
  2^(target bias - source bias) (none for e5 -> fp16, which is the identity placement); that also makes the
  subnormals right. float8_e4m3fn's NaN code and the e5 types' all-ones exponent in bf16 are set to an all-ones
  target exponent by an add, a mask and a multiply-add before the scaling.
* the one exception: float8_e4m3fn -> fp16 on sm_89+ converts pairs with cvt.rn.f16x2.e4m3x2 (:func:`hw_plan`).

Run: python tools/gen_lowbit_header.py > src/tilex/lowbit.h
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import itertools
import math
import pathlib
import random
import sys
import textwrap
from fractions import Fraction

_CHUNK_PY = pathlib.Path(__file__).resolve().parent.parent / "tilex" / "ir" / "lowbit_chunk.py"
_spec = importlib.util.spec_from_file_location("_lowbit_chunk", _CHUNK_PY)
chunk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chunk)

PAIRS = chunk.PAIRS
HALF = 0x00010001  # a 16-bit constant times HALF: the same constant in both halves
UINT, INT, FLOAT = 0, 1, 2
KIND_NAMES = {UINT: "uint", INT: "int", FLOAT: "float"}


# ---- targets ------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # f16 / bf16: the decoder's member function
    exp: int
    man: int

    @property
    def bias(self):
        return (1 << (self.exp - 1)) - 1

    @property
    def fma(self):
        return f"fma_{self.name}x2"

    @property
    def magic(self):
        """Bits of 2^man: its mantissa field holds any integer below 2^man, with ulp 1."""
        return (self.bias + self.man) << self.man

    def encode(self, value: float) -> int:
        """The 16 bits of `value` (a finite float that must be exactly representable)."""
        return self.from_value(("num", math.copysign(1.0, value) < 0, Fraction(abs(value))))

    def pair(self, value) -> int:
        return self.encode(value) * HALF

    @functools.lru_cache(maxsize=None)
    def decode(self, bits):
        """("num", negative, |value| as a Fraction), ("inf", negative, None) or ("nan", None, None)."""
        neg = bool(bits >> 15)
        e, m = (bits >> self.man) & ((1 << self.exp) - 1), bits & ((1 << self.man) - 1)
        if e == (1 << self.exp) - 1:
            return ("inf", neg, None) if m == 0 else ("nan", None, None)
        if e == 0:
            return ("num", neg, Fraction(m, 1 << self.man) * Fraction(2) ** (1 - self.bias))
        return ("num", neg, (1 + Fraction(m, 1 << self.man)) * Fraction(2) ** (e - self.bias))

    @functools.lru_cache(maxsize=None)
    def from_value(self, v) -> int:
        """Exact 16 bits of a decoded value; raises when rounding would be needed (the plans never round)."""
        kind, neg, mag = v
        if kind == "nan":
            return 0x7FFF
        sign = 0x8000 if neg else 0
        if kind == "inf":
            return sign | (((1 << self.exp) - 1) << self.man)
        if mag == 0:
            return sign
        e = mag.numerator.bit_length() - mag.denominator.bit_length()
        if Fraction(2) ** e > mag:
            e -= 1
        e = max(e, 1 - self.bias)  # subnormals share the lowest binade's spacing
        steps = mag / Fraction(2) ** (e - self.man)
        if steps.denominator != 1:
            raise ArithmeticError(f"{float(mag)} is inexact in {self.name}")
        if e + self.bias >= (1 << self.exp) - 1:
            raise ArithmeticError(f"{float(mag)} overflows {self.name}")
        steps = int(steps)
        if steps < (1 << self.man):  # subnormal
            return sign | steps
        return sign | ((e + self.bias) << self.man) | (steps - (1 << self.man))


F16 = Target("f16", 5, 10)
BF16 = Target("bf16", 8, 7)
TARGETS = (F16, BF16)
TARGET_ACTS = {"f16": "float16", "bf16": "bfloat16"}


@functools.lru_cache(maxsize=None)
def _fma_bits(target, a, b, c):
    """fma on one half: 16-bit patterns in and out."""
    return target.from_value(_fma_value(target.decode(a), target.decode(b), target.decode(c)))


def _fma_value(a, b, c):
    """Exact a * b + c on decoded values (IEEE special cases for inf / NaN / signed zeros)."""
    if "nan" in (a[0], b[0], c[0]):
        return ("nan", None, None)
    prod_neg = a[1] != b[1]
    if a[0] == "inf" or b[0] == "inf":
        if (a[0] == "num" and a[2] == 0) or (b[0] == "num" and b[2] == 0):
            return ("nan", None, None)
        if c[0] == "inf" and c[1] != prod_neg:
            return ("nan", None, None)
        return ("inf", prod_neg, None)
    if c[0] == "inf":
        return c
    p = a[2] * b[2] * (-1 if prod_neg else 1)
    s = p + c[2] * (-1 if c[1] else 1)
    if s == 0:
        neg = prod_neg and c[1] if (p == 0 and c[2] == 0) else False
        return ("num", neg, Fraction(0))
    return ("num", s < 0, abs(s))


# ---- code types ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CodeType:
    kind: int
    bits: int
    exp: int = 0
    man: int = 0

    @property
    def name(self):
        return f"e{self.exp}m{self.man}" if self.kind == FLOAT else f"{KIND_NAMES[self.kind]}{self.bits}"

    @property
    def bias(self):
        return (1 << (self.exp - 1)) - 1

    def value(self, code):
        """The decoded value, in the form of Target.decode."""
        if self.kind == UINT:
            return ("num", False, Fraction(code))
        if self.kind == INT:
            v = code - (1 << self.bits) if code >> (self.bits - 1) else code
            return ("num", v < 0, Fraction(abs(v)))
        neg = bool(code >> (self.bits - 1))
        e_all, m_all = (1 << self.exp) - 1, (1 << self.man) - 1
        e, m = (code >> self.man) & e_all, code & m_all
        if self.exp == 5 and e == e_all:
            return ("inf", neg, None) if m == 0 else ("nan", None, None)
        if (self.exp, self.man) == (4, 3) and e == e_all and m == m_all:
            return ("nan", None, None)
        if e == 0:
            return ("num", neg, Fraction(m, 1 << self.man) * Fraction(2) ** (1 - self.bias))
        return ("num", neg, (1 + Fraction(m, 1 << self.man)) * Fraction(2) ** (e - self.bias))


def all_types():
    """uint1..8, int1..8, then every float split with 3..8 bits (exponent >= 1, mantissa >= 0)."""
    for bits in range(1, 9):
        yield CodeType(UINT, bits)
    for bits in range(1, 9):
        yield CodeType(INT, bits)
    for bits in range(3, 9):
        for e in range(1, bits):
            yield CodeType(FLOAT, bits, e, bits - 1 - e)


def supports(t: CodeType, target: Target) -> bool:
    """fp16 holds the floats with at most 5 exponent bits; everything else fits both targets."""
    return not (t.kind == FLOAT and target is F16 and t.exp > 5)


# ---- expressions: what a decoder computes, printed as C++ and evaluated in Python ---------------------------------
class Expr:
    pass


def _shifted(v, delta):
    """v << delta (delta > 0) or v >> -delta, in 32 bits."""
    return (v << delta) & 0xFFFFFFFF if delta >= 0 else v >> -delta


def _shift_name(name, delta):
    """The printed temporary of `name` shifted by delta: w0l4, g1or3, ..."""
    return name if delta == 0 else f"{name}{'l' if delta > 0 else 'r'}{abs(delta)}"


def _shift_decl(name, delta):
    """`<temporary> = <name> << delta` (or >>)."""
    return f"{_shift_name(name, delta)} = {name} {'<<' if delta > 0 else '>>'} {abs(delta)}"


@dataclasses.dataclass(frozen=True)
class Word(Expr):
    """chunk[q], shifted left (delta > 0) or right (delta < 0): one named temporary per (q, delta)."""
    q: int
    delta: int = 0

    def c(self, top=False):
        return _shift_name(f"w{self.q}", self.delta)

    def ev(self, w):
        return _shifted(w[self.q], self.delta)


@dataclasses.dataclass(frozen=True)
class Gathered(Expr):
    """A word of a 4-bit float plane with each code's sign moved `gap` - 3 bits above its magnitude, for the codes
    of one parity (even / odd nibbles), shifted by delta: even nibbles take their signs from w << (gap - 3),
    odd nibbles their magnitudes from w >> (gap - 3); one select_bits (LOP3) each. Bits of the other parity's
    codes are garbage: the pair's mask drops them."""
    q: int
    parity: int
    gap: int
    delta: int = 0

    def base(self):
        """(a, b, mask): the word is (a & mask) | (b & ~mask)."""
        move = self.gap - 3
        if self.parity == 0:  # the even nibbles' magnitudes stay, their signs come up
            return Word(self.q), Word(self.q, move), 0x0707 * HALF
        return Word(self.q), Word(self.q, -move), 0x8080 * HALF  # the odd nibbles' signs stay, magnitudes come down

    def name(self):
        return f"g{self.q}{'e' if self.parity == 0 else 'o'}"

    def c(self, top=False):
        return _shift_name(self.name(), self.delta)

    def ev(self, w):
        a, b, m = self.base()
        return _shifted((a.ev(w) & m) | (b.ev(w) & ~m & 0xFFFFFFFF), self.delta)


@dataclasses.dataclass(frozen=True)
class Masked(Expr):
    """a & mask (a 32-bit constant)."""
    a: Expr
    mask: int

    def c(self, top=False):
        text = f"{self.a.c()} & {_hex(self.mask)}"
        return text if top else f"({text})"

    def ev(self, w):
        return self.a.ev(w) & self.mask


@dataclasses.dataclass(frozen=True)
class AndOp(Expr):
    """(a & b) | c or (a & b) ^ c: one LOP3 (and_or / and_xor of the header)."""
    op: str
    a: Expr
    b: object
    c_: object

    def c(self, top=False):
        name = {"|": "and_or", "^": "and_xor"}[self.op]
        return f"{name}({_c(self.a, True)}, {_c(self.b, True)}, {_c(self.c_, True)})"

    def ev(self, w):
        ab = self.a.ev(w) & _ev(self.b, w)
        return ab | _ev(self.c_, w) if self.op == "|" else ab ^ _ev(self.c_, w)


@dataclasses.dataclass(frozen=True)
class Prmt(Expr):
    """prmt(a, b, sel): byte n of the result is byte sel[n] of {b:a} (PRMT)."""
    a: Expr
    b: int
    sel: int

    def c(self, top=False):
        return f"prmt({self.a.c(True)}, {_hex(self.b)}, 0x{self.sel:04X})"

    def ev(self, w):
        src = self.a.ev(w) | (self.b << 32)
        return sum(((src >> (8 * ((self.sel >> (4 * n)) & 7))) & 0xFF) << (8 * n) for n in range(4))


@dataclasses.dataclass(frozen=True)
class Fma(Expr):
    """a * b + c on both halves in `target` (b, c: Exprs or constants)."""
    target: Target
    a: Expr
    b: object
    c_: object
    note: str = ""

    def c(self, top=False):
        return f"{self.target.fma}({_c(self.a, True)}, {_c(self.b, True)}, {_c(self.c_, True)})"

    def ev(self, w):
        a, b, c = self.a.ev(w), _ev(self.b, w), _ev(self.c_, w)
        return sum(_fma_bits(self.target, (a >> h) & 0xFFFF, (b >> h) & 0xFFFF, (c >> h) & 0xFFFF) << h
                   for h in (0, 16))


@dataclasses.dataclass(frozen=True)
class CvtE4m3(Expr):
    """cvt.rn.f16x2.e4m3x2 of the low 16 bits of a: byte 0 to the low half, byte 1 to the high half (sm_89+)."""
    a: Expr

    def c(self, top=False):
        return f"cvt_f16x2_e4m3x2({self.a.c(True)})"

    def ev(self, w):
        a, e4m3 = self.a.ev(w), CodeType(FLOAT, 8, 4, 3)
        return sum(F16.from_value(e4m3.value((a >> (8 * n)) & 0xFF)) << (16 * n) for n in (0, 1))


@dataclasses.dataclass(frozen=True)
class Finish(Expr):
    """The decoder's finish_<target> function applied to x (special values, then the scaling fma)."""
    target: Target
    x: Expr
    steps: tuple

    def c(self, top=False):
        return f"finish_{self.target.name}<Raw>({self.x.c(True)})"

    def ev(self, w):
        x = self.x.ev(w)
        for step in self.steps:
            x = step.ev_on(x)
        return x


@dataclasses.dataclass(frozen=True)
class Special:
    """x += ((x + add) & flag) * mul: a carry out of an all-ones field sets the target exponent to all ones."""
    add: int
    flag: int
    mul: int
    why: str

    def c(self):
        if self.mul == 1:
            return f"x = and_or(x + {_hex(self.add)}, {_hex(self.flag)}, x);"
        return f"x += ((x + {_hex(self.add)}) & {_hex(self.flag)}) * {self.mul}u;"

    def ev_on(self, x):
        return (x + ((x + self.add) & self.flag) * self.mul) & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Scale:
    """return x * 2^factor: the exact power of two from the source's bias to the target's."""
    target: Target
    factor: int  # the exponent of the power of two
    neg_zero: int

    def c(self):
        return f"return {self.target.fma}(x, {_hex(self.target.pair(2.0 ** self.factor))}, {_hex(self.neg_zero)});" \
               f"  // x * 2^{self.factor} + -0 (keeps -0)"

    def ev_on(self, x):
        return Fma(self.target, _Const(x), self.target.pair(2.0 ** self.factor), self.neg_zero).ev(None)


@dataclasses.dataclass(frozen=True)
class _Const(Expr):
    """A value already computed (Scale evaluates its fma on it)."""
    v: int

    def ev(self, w):
        return self.v


def _hex(v):
    return f"0x{v:08X}u"


def _c(v, top=False):
    return v.c(top) if isinstance(v, Expr) else _hex(v)


def _ev(v, w):
    return v.ev(w) if isinstance(v, Expr) else v


def _subexprs(e):
    """e and every expression inside it, depth first."""
    yield e
    for f in dataclasses.fields(e) if dataclasses.is_dataclass(e) else ():
        v = getattr(e, f.name)
        if isinstance(v, Expr):
            yield from _subexprs(v)


def _words(e, found):
    """The (q, delta) of every Word in expression e (those a Gathered reads included), added to `found`."""
    for x in _subexprs(e):
        if isinstance(x, Word):
            found.add((x.q, x.delta))
        elif isinstance(x, Gathered):
            found.update((w.q, w.delta) for w in x.base()[:2])
    return found


# ---- planning -----------------------------------------------------------------------------------------------------
def source(bits, j, k):
    """(word, bit within the half) of code bit k of pair j."""
    for p, o, first in chunk.plane_offsets(bits):
        if o <= k < o + p:
            q, i = divmod(j, 16 // p)
            return first + q, p * i + (k - o)
    raise AssertionError(k)


def pieces(bits, j, dest):
    """[(Word, 16-bit mask)] that put code bit k of pair j at bit dest[k] of each half: one per shifted word."""
    groups = {}
    for k, d in sorted(dest.items()):
        q, pos = source(bits, j, k)
        key = (q, d - pos)
        groups[key] = groups.get(key, 0) | (1 << d)
    return [(Word(q, delta), mask) for (q, delta), mask in groups.items()]


def assemble(parts, const=0, flip=0):
    """OR of the masked pieces, OR `const` (disjoint from the pieces), XOR `flip` (inside the first piece): one
    LOP3 per piece (nvcc splits (a & K) | C with two constants into two LOP3s: hence the explicit ones)."""
    (w0, m0), rest = parts[0], parts[1:]
    if const or flip:  # const's bits are outside m0, so ^ (const | flip) also ORs const
        x = AndOp("^" if flip else "|", w0, m0 * HALF, (const | flip) * HALF)
    else:
        x = Masked(w0, m0 * HALF)
    for w, m in rest:
        x = AndOp("|", w, m * HALF, x)
    return x


def byte_perm(parts, const):
    """One PRMT for a single piece of whole bytes moved by whole bytes within their half (the other bytes from
    `const`), where it saves the shift; else None."""
    if len(parts) != 1:
        return None
    (w, mask), = parts
    if w.delta == 0 or w.delta % 8 or mask not in (0x00FF, 0xFF00):
        return None
    sel = 0
    for n in range(4):
        if (mask * HALF) >> (8 * n) & 0xFF:
            src = n - w.delta // 8
            if src // 2 != n // 2:
                return None
            sel |= src << (4 * n)
        else:
            sel |= (4 + n) << (4 * n)
    return Prmt(Word(w.q), const, sel)


def choose_offsets(t: CodeType, target: Target):
    """Per pair, the bit z where an integer code goes (0 <= z <= mantissa - bits): greedily the z whose shifted
    words are already made, else the one whose new shifted words the later pairs can use most."""
    zmax = target.man - t.bits
    need = [[{(w.q, w.delta) for w, _ in pieces(t.bits, j, {k: z + k for k in range(t.bits)}) if w.delta}
             for z in range(zmax + 1)] for j in range(PAIRS)]
    made, zs = set(), []
    for j in range(PAIRS):
        def cost(z):
            new = need[j][z] - made
            reuse = sum(max(len(n & new) for n in need[jj]) for jj in range(j + 1, PAIRS))
            return len(new), -reuse, z
        z = min(range(zmax + 1), key=cost)
        made |= need[j][z]
        zs.append(z)
    return zs


def plan(t: CodeType, target: Target):
    """(the 16 output expressions, the finish steps or None, a comment)."""
    b = t.bits
    if t.kind != FLOAT and b > target.man:  # 8-bit codes in bf16: low 7 bits over 128.0, bit 7 over 0.5
        return _plan_split(t, target)
    if t.kind != FLOAT:
        return _plan_int(t, target)
    return _plan_float(t, target)


def _plan_int(t, target):
    b, magic_value = t.bits, 1 << target.man
    offset = (1 << (b - 1)) if t.kind == INT else 0
    outs = []
    for j, z in enumerate(choose_offsets(t, target)):
        parts = pieces(b, j, {k: z + k for k in range(b)})
        # the piece holding the top bit first: a signed code's sign bit is flipped in the same LOP3
        parts.sort(key=lambda p: not (p[1] >> (z + b - 1)) & 1)
        x = byte_perm(parts, target.magic * HALF) if t.kind == UINT else None
        if x is None:
            x = assemble(parts, const=target.magic, flip=(1 << (z + b - 1)) if t.kind == INT else 0)
        scale = 2.0 ** -z
        add = -(magic_value * scale + offset)
        note = f"x * 2^-{z} - {-add:g}" if z else f"x - {-add:g}"
        outs.append(Fma(target, x, target.pair(scale), target.pair(add), note))
    code = f"code ^ {offset} (= code + {offset}, sign bit flipped)" if offset else "the code"
    comment = (f"{t.name} -> {target.name}: {code} at bit z of each half ORed into {magic_value}.0, then "
               f"x * 2^-z - ({magic_value} * 2^-z{f' + {offset}' if offset else ''}); z per pair, to share shifts")
    return outs, None, comment


def _plan_split(t, target):
    hi_one = target.encode(0.5)  # 0.5, with bit 7 (the exponent's lowest bit) clear: | bit 7 makes 1.0
    assert hi_one & 0x80 == 0 and target.decode(hi_one | 0x80)[2] == 1
    outs = []
    for j in range(PAIRS):
        lo = assemble(pieces(8, j, {k: k for k in range(7)}), const=target.magic)
        hi_parts = pieces(8, j, {7: 7})
        # int8: the inverted bit 7, so that 0.5 stands for -128 and 1.0 for 0
        hi = assemble(hi_parts, const=hi_one, flip=0x80 if t.kind == INT else 0)
        sub = 384.0 if t.kind == INT else 256.0
        high = Fma(target, hi, target.pair(256.0), target.pair(-sub), f"bit 7: {128 - sub:g} or {256 - sub:g}")
        outs.append(Fma(target, lo, target.pair(1.0), high, "+ (128 + low 7 bits)"))
    comment = (f"{t.name} -> {target.name}: 128 + low 7 bits (128.0 with the bits in its mantissa) plus "
               f"256 * (0.5 or 1.0 from bit 7{', inverted' if t.kind == INT else ''}) - "
               f"{384 if t.kind == INT else 256}")
    return outs, None, comment


def _gather_gap(t, target):
    """The sign's distance above the magnitude's low bit in the target (15 - lo) where a 4-bit float into fp16
    decodes from gathered words (`Gathered`), else None. The nibble's own distance is 3; moving the signs of the
    even nibbles up (or the magnitudes of the odd ones down) by gap - 3 < 4 lands them in the other parity's
    nibbles, and every pair's magnitude then needs a left shift (lo >= 8): one shift and one mask per pair
    instead of two of each."""
    lo = target.man - t.man
    if t.kind != FLOAT or t.bits != 4 or target is not F16 or not 5 <= 15 - lo <= 7 or lo < 8:
        return None
    return 15 - lo


def _plan_float(t, target):
    b, lo = t.bits, target.man - t.man
    dest = {k: lo + k for k in range(b - 1)}
    dest[b - 1] = 15
    outs = []
    gap = _gather_gap(t, target)
    for j in range(PAIRS) if gap else ():
        q, i = divmod(j, 4)  # one 4-wide plane: pair j is nibble i of word q
        shift = lo - 4 * i if i % 2 == 0 else lo - 4 * i + gap - 3
        outs.append(Masked(Gathered(q, i % 2, gap, shift), (0x8000 | (7 << lo)) * HALF))
    for j in range(PAIRS) if not gap else ():
        parts = sorted(pieces(b, j, dest), key=lambda p: p[1] == 0x8000)  # the sign last
        outs.append(byte_perm(parts, 0) or assemble(parts))
    steps = []
    field = ((1 << (b - 1)) - 1) << lo  # exponent + mantissa in place
    if (t.exp, t.man) == (4, 3):
        # the only NaN, S.1111.111: exponent+mantissa all ones; + its lowest bit carries out of the field
        ones = ((1 << target.exp) - 1) << target.man
        top = field + (1 << lo)
        steps.append(Special((1 << lo) * HALF, top * HALF, (ones & ~field) // top, "NaN"))
    if t.exp == 5 and target is BF16:
        # the all-ones exponent (inf / NaN): + 1 at the exponent's lowest bit carries out of it
        ones = ((1 << target.exp) - 1) << target.man
        exp_field = ((1 << t.exp) - 1) << target.man
        top = 1 << (target.man + t.exp)
        steps.append(Special((1 << target.man) * HALF, top * HALF, (ones & ~exp_field) // top, "inf/NaN"))
    factor = target.bias - t.bias
    if factor:
        steps.append(Scale(target, factor, 0x80008000))
    outs = [Finish(target, o, tuple(steps)) if steps else o for o in outs]
    comment = (f"{t.name} -> {target.name}: sign to bit 15, exponent+mantissa to bits [{lo}, {lo + b - 1})"
               + (f", times 2^{factor}" if factor else " (the identity placement)")
               + (f"; from words with each sign {gap} bits above its magnitude (even / odd nibbles)" if gap else ""))
    return outs, (tuple(steps) if steps else None), comment


def hw_plan(t: CodeType, target: Target):
    """The outputs of a hardware path for sm_89+, or None: float8_e4m3fn -> fp16 has cvt.rn.f16x2.e4m3x2, one
    conversion per pair after a PRMT that gathers the pair's two bytes; on an H100 about twice the throughput of
    the bit trick (e5m2 -> fp16 stays a PRMT, cheaper than any conversion)."""
    if (t.kind, t.exp, t.man, target) != (FLOAT, 4, 3, F16):
        return None
    return [CvtE4m3(Prmt(Word(j // 2), 0, 0x0020 if j % 2 == 0 else 0x0031)) for j in range(PAIRS)]


# ---- checking -----------------------------------------------------------------------------------------------------
def _chunks(bits, rng):
    """Chunks in which every code sits at every position, and random ones."""
    n = 1 << bits
    out = [[(k + p) % n for p in range(chunk.CODES)] for k in range(n)]
    out += [[(k * 5 + p * 3 + 1) % n for p in range(chunk.CODES)] for k in range(n)]
    out += [[rng.randrange(n) for _ in range(chunk.CODES)] for _ in range(8)]
    return out


def same(target, got_bits, want):
    """Whether 16 bits are the value `want`: bit for bit (so zeros keep their sign), a NaN as any NaN."""
    if want[0] == "nan":
        return target.decode(got_bits)[0] == "nan"
    return got_bits == target.from_value(want)


def verify(t: CodeType, target: Target, rng=None):
    """Evaluate the plan on chunks holding every code at every position; raise on the first wrong value."""
    rng = rng or random.Random(0)
    variants = [plan(t, target)[0]] + ([hw_plan(t, target)] if hw_plan(t, target) else [])
    for codes, outs in itertools.product(_chunks(t.bits, rng), variants):
        w = chunk.pack_chunk(codes, t.bits)
        for j, o in enumerate(outs):
            r = o.ev(w)
            for h, code in ((0, codes[2 * j]), (16, codes[2 * j + 1])):
                if not same(target, (r >> h) & 0xFFFF, t.value(code)):
                    raise AssertionError(f"{t.name} -> {target.name}: code {code} at pair {j} gives "
                                         f"0x{(r >> h) & 0xFFFF:04X}, expected {t.value(code)}")


# ---- printing -----------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Var(Expr):
    """A named temporary of the printed code (printing only)."""
    name: str

    def c(self, top=False):
        return self.name


def _hoist(e, var):
    """([statements], Var) computing the LOP3 chain e piece by piece into `var`, or ([], e) for a single piece."""
    links = []
    while isinstance(e, AndOp) and isinstance(e.c_, Expr):
        links.append(e)
        e = e.c_
    if not links:
        return [], e
    stmts = [f"{var} = {e.c(True)};"]
    stmts += [f"{var} = {dataclasses.replace(link, c_=Var(var)).c(True)};" for link in reversed(links)]
    return stmts, Var(var)


def _statements(j, o):
    """The statements of out[j] = o: a chain of several pieces goes into x piece by piece (the high part of a
    split 8-bit code into h), so that each line reads in the order of the operations."""
    note = f"  // {o.note}" if isinstance(o, Fma) and o.note else ""
    pre = []
    if isinstance(o, Fma) and isinstance(o.c_, Fma):  # the 8-bit split: low part + fma of the high part
        pre, lo = _hoist(o.a, "x")
        pre.append(f"h = {o.c_.c(True)};")
        o = dataclasses.replace(o, a=lo, c_=Var("h"))
    elif isinstance(o, Fma):
        pre, x = _hoist(o.a, "x")
        o = dataclasses.replace(o, a=x)
    elif isinstance(o, Finish):
        pre, x = _hoist(o.x, "x")
        o = dataclasses.replace(o, x=x)
    return pre, f"out[{j}] = {o.c(True)};{note}"


def body(t: CodeType, outs, indent="    "):
    """The statements that compute `outs` from the chunk words w."""
    lines = [indent + "const uint32_t " + ", ".join(f"w{q} = w[{q}]" for q in range(t.bits)) + ";"]
    used = set()
    for o in outs:
        _words(o, used)
    shifted = sorted((q, d) for q, d in used if d)
    for q, grp in itertools.groupby(shifted, key=lambda qd: qd[0]):
        decl = ", ".join(_shift_decl(f"w{q}", d) for _, d in grp)
        lines += _wrap(f"const uint32_t {decl};", indent, ", ")
    gathered = {}  # unshifted Gathered -> its shifts
    for x in (x for o in outs for x in _subexprs(o) if isinstance(x, Gathered)):
        gathered.setdefault(dataclasses.replace(x, delta=0), set()).add(x.delta)
    for g in sorted(gathered, key=lambda g: (g.q, g.parity)):
        a, b, m = g.base()
        decl = [f"{g.name()} = select_bits({a.c()}, {b.c()}, {_hex(m)})"]
        decl += [_shift_decl(g.name(), d) for d in sorted(gathered[g]) if d]
        lines += _wrap(f"const uint32_t {', '.join(decl)};", indent, ", ")
    stmts = [_statements(j, o) for j, o in enumerate(outs)]
    temps = sorted({v for pre, _ in stmts for v in ("x", "h") if any(p.startswith(f"{v} = ") for p in pre)})
    if temps:
        lines.append(f"{indent}uint32_t {', '.join(temps)};")
    for pre, out in stmts:
        if pre:
            lines += _wrap(" ".join(pre), indent, "; ")
        lines.append(indent + out)
    return lines


def _wrap(text, indent, sep, width=118):
    """`text` on lines of at most `width` columns, broken after `sep` (continuation lines indented twice more)."""
    parts = text.split(sep)
    parts = [p + sep.rstrip() for p in parts[:-1]] + parts[-1:]
    lines, line = [], indent + parts[0]
    for part in parts[1:]:
        if len(line) + 1 + len(part) > width:
            lines.append(line)
            line = indent + "    " + part
        else:
            line += " " + part
    return lines + [line]


def raw_exponent(t: CodeType, target: Target):
    """tilex's rule (tilex/ir/lowbit_chunk.py) for the raw decode of t into target: 2^-k left to the scale."""
    return chunk.raw_scale_exponent(KIND_NAMES[t.kind], t.exp, t.man, TARGET_ACTS[target.name])


def function(t: CodeType, target: Target):
    outs, steps, comment = plan(t, target)
    hw = hw_plan(t, target)
    k = raw_exponent(t, target)
    if k is not None and (hw or not steps or len(steps) != 1 or not isinstance(steps[0], Scale)
                          or steps[0].factor != k):
        raise AssertionError(f"{t.name} -> {target.name}: tilex's raw exponent {k} is not this decoder's {steps}")
    lines = ["  // " + ln for ln in textwrap.wrap(comment, 114, subsequent_indent="  ")]
    no_raw = f'    static_assert(!Raw, "tilex: {t.name} has no raw {target.name} decode");'
    if steps:
        lines.append("  template <bool Raw = false>")
        lines.append(f"  static __device__ __forceinline__ uint32_t finish_{target.name}(uint32_t x) {{")
        if k is not None:
            lines.append(f"    if constexpr (Raw) return x;  // value * 2^-{k}: the caller's scale carries 2^{k}")
        lines += [f"    {s.c()}  // {s.why}" if isinstance(s, Special) else f"    {s.c()}" for s in steps]
        lines.append("  }")
    lines.append("  template <bool Raw = false>")
    lines.append(f"  static __device__ __forceinline__ void {target.name}(const uint32_t* w, uint32_t* out) {{")
    if k is None:
        lines.append(no_raw)
    if hw:
        lines.append("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890")
        lines.append("    // sm_89+: cvt.rn.f16x2.e4m3x2 of the pair's two bytes (twice the bit trick's throughput)")
        lines += body(t, hw)
        lines.append("#else")
    lines += body(t, outs)
    if hw:
        lines.append("#endif")
    lines.append("  }")
    return lines


def specialization(t: CodeType):
    """The explicit specialization of lowbit_detail::decoder for type t, with a member per supported target."""
    key = f"{t.kind}, {t.bits}, {t.exp}, {t.man}"
    lines = ["template <>", f"struct decoder<{key}> {{  // {t.name}"]
    for target in TARGETS:
        if supports(t, target):
            lines += function(t, target)
    lines.append("};")
    return "\n".join(lines)


HEADER = """// GENERATED by tools/gen_lowbit_header.py -- do not edit by hand.
// Register decoders from packed low-bit codes to fp16 / bf16 pairs (the chunk format: tilex/ir/lowbit_chunk.py).
//
// A chunk is 32 codes c[0..31] of one b-bit type (b = 1..8) in b 32-bit words, split into planes of widths
// 8 | 4,2,1 | 4,2 | 4,1 | 4 | 2,1 | 2 | 1 (b = 8 .. 1) from the code's low bits up; in a plane of width p, word q
// holds pair j = q * (16 / p) + i at bits [p*i, p*i + p) (c[2j]) and [16 + p*i, 16 + p*i + p) (c[2j+1]).
//
//   decode_chunk_f16<Kind, Bits, Exp, Man>(chunk, out)   out[j] = {c[2j] low half, c[2j+1] high half} as fp16
//   decode_chunk_bf16<Kind, Bits, Exp, Man>(chunk, out)  the same as bf16
//   decode_one_f32<Kind, Bits, Exp, Man>(code)            one code as float, written plainly (the tests' oracle)
//
// With Raw = true (floats for which tilex/ir/lowbit_chunk.py's raw_scale_exponent gives k) the chunk decoders skip
// their last fma and give value * 2^-k: a caller whose scale already carries 2^k saves one fma per pair.
//
// Kind 0: unsigned Bits-bit integer; 1: two's complement Bits-bit integer (Exp, Man ignored); 2: float with a
// sign bit, Exp exponent bits (bias 2^(Exp-1) - 1) and Man mantissa bits, 1 + Exp + Man = Bits, 3 <= Bits <= 8.
// e4m3 is float8_e4m3fn (S.1111.111 is NaN, no inf); Exp == 5 types are IEEE-style (all-ones exponent: inf or
// NaN); every other split has neither. Every finite value decodes exactly (fp16 holds Exp <= 5 only), zeros keep
// their sign, inf / NaN stay inf / NaN.
//
// Each decoder is straight-line integer bit operations (LOP3 / SHF / PRMT / IADD / IMAD) and one or two
// fp16x2 / bf16x2 fmas per register: no branches, no local memory, and no conversion instructions but one:
// float8_e4m3fn -> fp16 on sm_89+ converts pairs with cvt.rn.f16x2.e4m3x2 (twice the throughput of its bit trick).
#pragma once
#include <cstdint>

#include "tilex/arch.h"

namespace tilex {
namespace lowbit_detail {

// a * b + c on both halves, rounded to nearest; the decoders only use it where the result is exact.
__device__ __forceinline__ uint32_t fma_f16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// bf16x2 has fma (sm_80) but mul and add only from sm_90: fma serves all three.
__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// (a & b) | c and (a & b) ^ c as one LOP3 each. Written in C with two constants, (a & K) | C becomes two LOP3s
// (an instruction takes one immediate); here the second constant goes to a register once per decoder.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ uint32_t and_xor(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The bits of a where m is set, of b elsewhere: one LOP3.
__device__ __forceinline__ uint32_t select_bits(uint32_t a, uint32_t b, uint32_t m) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(d) : "r"(a), "r"(b), "r"(m));
  return d;
}

// float8_e4m3fn pair (low 16 bits of a) -> fp16 pair: the one conversion the decoders use, where the hardware has it
// (sm_89+; a template so that using it on an older arch is a compile error, not a wrong value).
template <int Arch = 0>
__device__ __forceinline__ uint32_t cvt_f16x2_e4m3x2(uint32_t a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t d;
  asm("{\\n.reg .b16 lo;\\nmov.b32 {lo, _}, %1;\\ncvt.rn.f16x2.e4m3x2 %0, lo;\\n}" : "=r"(d) : "r"(a));
  return d;
#else
  static_assert(arch_unsupported<Arch>::value, "tilex::lowbit_detail::cvt_f16x2_e4m3x2 needs sm_89");
  return a;
#endif
}

// Byte n of the result is byte ((sel >> 4n) & 7) of {b, a}. One PRMT: __byte_perm would be rewritten by nvcc into
// a shift and a mask when b is zero.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

template <int Kind, int Bits, int Exp, int Man>
inline constexpr bool valid_type =
    ((Kind == 0 || Kind == 1) && Bits >= 1 && Bits <= 8) ||
    (Kind == 2 && Exp >= 1 && Man >= 0 && Bits == 1 + Exp + Man && Bits >= 3 && Bits <= 8);

// One explicit specialization per type (ints with Exp = Man = 0), with the members f16 and / or bf16. The members
// are templates (on Raw) so that a kernel compiles just the decoders it calls (the rest costs ~50 ms of nvcc
// otherwise).
template <int Kind, int Bits, int Exp, int Man>
struct decoder;
"""

FOOTER = """
}  // namespace lowbit_detail

// The 32 codes of `chunk` (Bits 32-bit words) as 16 fp16 pairs (32-bit words): out[j] = {c[2j], c[2j+1]}.
template <int Kind, int Bits, int Exp, int Man, bool Raw = false>
__device__ __forceinline__ void decode_chunk_f16(const void* chunk, void* out) {
  static_assert(lowbit_detail::valid_type<Kind, Bits, Exp, Man>, "tilex::decode_chunk_f16: no such low-bit type");
  static_assert(Kind != 2 || Exp <= 5, "tilex::decode_chunk_f16: fp16 holds floats of at most 5 exponent bits");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  static_assert(arch_unsupported<Kind, Bits>::value, "tilex::decode_chunk_f16 needs sm_80");
#endif
  lowbit_detail::decoder<Kind, Bits, Kind == 2 ? Exp : 0, Kind == 2 ? Man : 0>::template f16<Raw>(
      static_cast<const uint32_t*>(chunk), static_cast<uint32_t*>(out));
}

// The 32 codes of `chunk` (Bits 32-bit words) as 16 bf16 pairs (32-bit words): out[j] = {c[2j], c[2j+1]}.
template <int Kind, int Bits, int Exp, int Man, bool Raw = false>
__device__ __forceinline__ void decode_chunk_bf16(const void* chunk, void* out) {
  static_assert(lowbit_detail::valid_type<Kind, Bits, Exp, Man>, "tilex::decode_chunk_bf16: no such low-bit type");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  static_assert(arch_unsupported<Kind, Bits>::value, "tilex::decode_chunk_bf16 needs sm_80");
#endif
  lowbit_detail::decoder<Kind, Bits, Kind == 2 ? Exp : 0, Kind == 2 ? Man : 0>::template bf16<Raw>(
      static_cast<const uint32_t*>(chunk), static_cast<uint32_t*>(out));
}

// One code (its low Bits bits) as float, from the definition of the type; slow and plain: the tests' oracle.
template <int Kind, int Bits, int Exp, int Man>
__device__ __forceinline__ float decode_one_f32(uint32_t code) {
  static_assert(lowbit_detail::valid_type<Kind, Bits, Exp, Man>, "tilex::decode_one_f32: no such low-bit type");
  code &= (1u << Bits) - 1u;
  if constexpr (Kind == 0) {
    return static_cast<float>(code);
  } else if constexpr (Kind == 1) {
    const int value = (code >> (Bits - 1)) ? static_cast<int>(code) - (1 << Bits) : static_cast<int>(code);
    return static_cast<float>(value);
  } else {
    constexpr int bias = (1 << (Exp - 1)) - 1;
    constexpr uint32_t exp_ones = (1u << Exp) - 1u, man_ones = (1u << Man) - 1u;
    const bool negative = (code >> (Bits - 1)) != 0;
    const uint32_t e = (code >> Man) & exp_ones, m = code & man_ones;
    float magnitude;
    if ((Exp == 4 && Man == 3 && e == exp_ones && m == man_ones) || (Exp == 5 && e == exp_ones && m != 0)) {
      return __int_as_float(0x7FC00000);  // NaN
    } else if (Exp == 5 && e == exp_ones) {
      magnitude = __int_as_float(0x7F800000);  // inf
    } else if (e == 0) {
      magnitude = ldexpf(static_cast<float>(m), 1 - bias - Man);
    } else {
      magnitude = ldexpf(static_cast<float>(m + (1u << Man)), static_cast<int>(e) - bias - Man);
    }
    return negative ? -magnitude : magnitude;
  }
}

}  // namespace tilex
"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    types = list(all_types())
    if "--no-verify" not in argv:
        for t in types:
            for target in TARGETS:
                if supports(t, target):
                    verify(t, target)
    parts = [HEADER]
    for t in types:
        parts.append("\n" + specialization(t) + "\n")
    parts.append(FOOTER)
    print("".join(parts), end="")


if __name__ == "__main__":
    main()
