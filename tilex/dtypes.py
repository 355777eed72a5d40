"""Low-bit (1 to 8 bit) integer and floating-point element types.

A ``LowBitType`` describes the values of a type's ``2**bits`` codes; it knows nothing about tensors (the
torch-side helpers live in ``tilex.quant``). Every type has one canonical object::

    from tilex import dtypes
    dtypes.lookup("float4_e2m1fn") is dtypes.float4_e2m1 is dtypes.float_type(2, 1)

Integers (``int1`` .. ``int8``, ``uint1`` .. ``uint8``): signed types are two's complement, so ``int1`` holds
{-1, 0} and ``int4`` holds -8 .. 7; unsigned types hold 0 .. 2**bits - 1.

Floats (``float{bits}_e{E}m{M}``, every split with E >= 1, M >= 0 and 3 <= bits = 1 + E + M <= 8):
sign-magnitude, the sign in the top bit, then E exponent bits, then M mantissa bits; the exponent bias is
2**(E-1) - 1. Exponent field 0 holds zero and the subnormals 0.M * 2**(1 - bias); field e > 0 holds
1.M * 2**(e - bias). Which codes are special depends on the split:

* ``float8_e4m3``: exactly ``torch.float8_e4m3fn``: no infinity, only S.1111.111 is NaN, max 448.
* E == 5 (``float8_e5m2``, ``float7_e5m1``, ``float6_e5m0``): IEEE style, the all-ones exponent holds inf
  (mantissa 0) and NaN (mantissa != 0); ``float8_e5m2`` is exactly ``torch.float8_e5m2``. ``float6_e5m0`` has
  inf but no NaN.
* every other split: all codes are finite numbers, the all-ones exponent is an ordinary binade (as in the
  OCP MX types e2m1, e2m3, e3m2).

Both signs of zero exist for floats (the codes 0 and ``1 << (bits - 1)``).
"""
import dataclasses
import functools
import math
import re

__all__ = ["LowBitType", "int_type", "float_type", "lookup", "exact_in", "ALL_TYPES"]

_KINDS = ("int", "uint", "float")

# IEEE binary formats (exponent bits, mantissa bits) that `exact_in` checks against.
_TARGET_FORMATS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23)}


@dataclasses.dataclass(frozen=True, repr=False)
class LowBitType:
    """A 1..8-bit element type. Use `int_type`, `float_type` or `lookup` to get the canonical object."""

    name: str
    bits: int
    kind: str  # "int" | "uint" | "float"
    exponent: int = 0  # floats only
    mantissa: int = 0  # floats only

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {self.kind!r}")
        if not 1 <= self.bits <= 8:
            raise ValueError(f"bits must be in 1..8, got {self.bits}")
        if self.kind == "float" and self.bits != 1 + self.exponent + self.mantissa:
            raise ValueError(f"{self.name}: bits ({self.bits}) != 1 + exponent ({self.exponent}) + "
                             f"mantissa ({self.mantissa})")

    def __str__(self):
        return self.name

    def __repr__(self):
        return f"tilex.dtypes.{self.name}"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def signed(self) -> bool:
        return self.kind != "uint"

    @property
    def bias(self) -> int:
        """Exponent bias 2**(E-1) - 1 (0 for integers)."""
        return (1 << (self.exponent - 1)) - 1 if self.is_float else 0

    @property
    def num_codes(self) -> int:
        return 1 << self.bits

    @property
    def storage_bits(self) -> int:
        """Bits of the container an unpacked code lives in (one uint8): always 8."""
        return 8

    @property
    def has_inf(self) -> bool:
        return self.is_float and self.exponent == 5

    @property
    def has_nan(self) -> bool:
        return self.is_float and ((self.exponent == 5 and self.mantissa > 0) or self._is_e4m3fn)

    @property
    def _is_e4m3fn(self) -> bool:
        return self.is_float and (self.exponent, self.mantissa) == (4, 3)

    @property
    def max_value(self) -> float:
        """The largest finite value."""
        if self.kind == "int":
            return float((1 << (self.bits - 1)) - 1)
        if self.kind == "uint":
            return float((1 << self.bits) - 1)
        return max(v for v in _code_values(self) if math.isfinite(v))

    @property
    def min_value(self) -> float:
        """The most negative finite value."""
        if self.kind == "int":
            return float(-(1 << (self.bits - 1)))
        if self.kind == "uint":
            return 0.0
        return -self.max_value

    def value(self, code: int) -> float:
        """The value of one code (0 <= code < 2**bits); NaN / +-inf where the type has them."""
        if not 0 <= code < self.num_codes:
            raise ValueError(f"code {code} out of range for {self.name} (0 .. {self.num_codes - 1})")
        return _code_values(self)[code]

    def values(self) -> tuple:
        """The values of all codes, indexed by code."""
        return _code_values(self)

    def exact_in(self, target: str) -> bool:
        """Whether every finite value is exactly representable in `target` ("float16", "bfloat16", "float32")."""
        return exact_in(self, target)


@functools.lru_cache(maxsize=None)
def _code_values(t: LowBitType) -> tuple:
    return tuple(_decode_one(t, c) for c in range(t.num_codes))


def _decode_one(t: LowBitType, code: int) -> float:
    if t.kind == "uint":
        return float(code)
    if t.kind == "int":
        return float(code - (1 << t.bits) if code >> (t.bits - 1) else code)
    sign = -1.0 if code >> (t.bits - 1) else 1.0
    e_all, m_all = (1 << t.exponent) - 1, (1 << t.mantissa) - 1
    e_field, m_field = (code >> t.mantissa) & e_all, code & m_all
    if t.has_inf and e_field == e_all:
        return sign * math.inf if m_field == 0 else math.nan
    if t._is_e4m3fn and e_field == e_all and m_field == m_all:
        return math.nan
    if e_field == 0:  # zero and subnormals
        return sign * math.ldexp(m_field, 1 - t.bias - t.mantissa)
    return sign * math.ldexp((1 << t.mantissa) | m_field, e_field - t.bias - t.mantissa)


def exact_in(dtype, target: str) -> bool:
    """Whether every finite value of `dtype` is exactly representable in the IEEE-style `target` format
    ("float16", "bfloat16" or "float32"; subnormals count as representable)."""
    dtype = lookup(dtype)
    if target not in _TARGET_FORMATS:
        raise ValueError(f"unknown target {target!r}; expected one of {sorted(_TARGET_FORMATS)}")
    t_exp, t_man = _TARGET_FORMATS[target]
    t_bias = (1 << (t_exp - 1)) - 1
    t_max = math.ldexp(2.0 - math.ldexp(1.0, -t_man), (1 << t_exp) - 2 - t_bias)
    for v in _code_values(dtype):
        if not math.isfinite(v) or v == 0.0:
            continue
        a = abs(v)
        if a > t_max:
            return False
        # the target's spacing in a's binade (subnormals share the lowest normal binade's spacing)
        binade = max(math.frexp(a)[1] - 1, 1 - t_bias)
        if not (a / math.ldexp(1.0, binade - t_man)).is_integer():
            return False
    return True


_REGISTRY = {}  # canonical name -> LowBitType


def _int_name(bits, signed):
    return f"{'int' if signed else 'uint'}{bits}"


def _float_name(exponent, mantissa):
    return f"float{1 + exponent + mantissa}_e{exponent}m{mantissa}"


def int_type(bits: int, signed: bool = True) -> LowBitType:
    """The canonical `bits`-bit integer type (two's complement when `signed`; int1 holds {-1, 0})."""
    if not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"integer types have 1..8 bits, got {bits!r}")
    return _REGISTRY[_int_name(bits, signed)]


def float_type(exponent: int, mantissa: int) -> LowBitType:
    """The canonical float type with `exponent` and `mantissa` bits (plus a sign bit; 3..8 bits in all)."""
    if not isinstance(exponent, int) or not isinstance(mantissa, int) or exponent < 1 or mantissa < 0:
        raise ValueError(f"float types need exponent >= 1 and mantissa >= 0, got e{exponent}m{mantissa}")
    bits = 1 + exponent + mantissa
    if not 3 <= bits <= 8:
        raise ValueError(f"float e{exponent}m{mantissa} has {bits} bits (1 sign + {exponent} exponent + "
                         f"{mantissa} mantissa); low-bit float types have 3..8 bits")
    return _REGISTRY[_float_name(exponent, mantissa)]


_FLOAT_NAME = re.compile(r"float(\d+)_e(\d+)m(\d+)(fnu|fn)?")


def lookup(name) -> LowBitType:
    """The canonical type for a name: "int1".."int8", "uint1".."uint8", "float{bits}_e{E}m{M}", the latter
    also with the suffix "fn" / "fnu" (finite: only for types without inf), e.g. "float8_e4m3fn".
    A `LowBitType` is returned as its canonical object; anything else raises ValueError."""
    if isinstance(name, LowBitType):
        return lookup(name.name)
    if not isinstance(name, str):
        raise ValueError(f"expected a low-bit type name or LowBitType, got {name!r}")
    if name in _REGISTRY:
        return _REGISTRY[name]
    m = _FLOAT_NAME.fullmatch(name)
    if m:
        bits, e, mant = (int(g) for g in m.groups()[:3])
        canonical = _REGISTRY.get(_float_name(e, mant))
        if bits != 1 + e + mant:
            raise ValueError(f"{name!r}: {bits} bits != 1 sign + {e} exponent + {mant} mantissa bits")
        if canonical is not None:
            if m.group(4) and canonical.has_inf:
                raise ValueError(f"{name!r}: the suffix {m.group(4)!r} means finite, but "
                                 f"{canonical.name} has infinities; use {canonical.name!r}")
            return canonical
    raise ValueError(f"unknown low-bit type {name!r}; accepted: 'int1'..'int8', 'uint1'..'uint8', "
                     f"'float{{bits}}_e{{E}}m{{M}}' with bits = 1 + E + M in 3..8 and E >= 1 "
                     f"(e.g. 'float4_e2m1', 'float8_e4m3'), optionally suffixed 'fn'/'fnu' for types "
                     f"without inf (e.g. 'float8_e4m3fn')")


def _build_all():
    types = [LowBitType(_int_name(b, True), b, "int") for b in range(1, 9)]
    types += [LowBitType(_int_name(b, False), b, "uint") for b in range(1, 9)]
    for bits in range(3, 9):
        for e in range(1, bits):
            types.append(LowBitType(_float_name(e, bits - 1 - e), bits, "float", e, bits - 1 - e))
    return tuple(types)


ALL_TYPES = _build_all()
_REGISTRY.update((t.name, t) for t in ALL_TYPES)
globals().update(_REGISTRY)  # module attributes int1 .. uint8, float3_e1m1 .. float8_e7m0
__all__ += [t.name for t in ALL_TYPES]
