"""Element types of tile programs: TileLang's dtype objects (``T.float16``, ``T.float``, ``T.dtype(x)``) and the
spellings TVM's CUDA codegen emits.

A :class:`dtype` is a ``str`` (a subclass of ``tvm_ffi.dtype``) holding the TVM name: ``T.float16 == "float16"``,
it hashes like that string, and every API that takes a dtype name (TVM's FFI, ``tirx.const``, ``T.Buffer``,
``T.alloc_shared``, ...) takes it unchanged. On top of the string it has

* ``.bits``, ``.lanes``, ``.bytes`` (``.itemsize``), ``.type_code`` and ``.as_torch()``;
* for the 1..8-bit types of :mod:`tilex.dtypes` (``T.int4``, ``T.uint3``, ``T.float8_e5m2``, ...) the code-value
  attributes of their :class:`~tilex.dtypes.LowBitType` (``.kind``, ``.max_value``, ``.values()``, ...);
* the behaviour of TVMScript's dtype constructors inside programs: ``T.float32(0)`` is a constant, ``T.float32(x)``
  a cast, ``T.float32()`` a new variable, ``n: T.int32`` a scalar parameter, ``x: T.float32[4]`` a local array.

``T.dtype(x)`` builds one from a name (TileLang's C spellings ``"float"``, ``"int"``, ``"half"``, ... included), a
dtype object, a TVMScript dtype constructor, a torch dtype, a numpy dtype or the Python types ``bool`` / ``int`` /
``float``. ``T.float8_e4m3`` keeps its name (``== "float8_e4m3"``, as in TileLang); :func:`canonical_dtype`, which
tilex's allocation and annotation functions apply, turns it into the ``float8_e4m3fn`` TVM's codegen knows.

``T.tfloat32`` (and ``T.tfloat32x2`` .. ``x64``; ``T.dtype("tfloat32")`` / ``"custom[tfloat32]"``) is TileLang's
TensorFloat32, a :class:`TensorFloat32` over float32 storage (TVM 0.27 has no tf32 type): a buffer or tensor of it
is a float32 one (torch.float32 arguments, as in TileLang), a T.gemm over it runs on the tf32 tensor cores (the
float32 gemm of ``tilex.op.mma_types``), and ``T.tfloat32(x)`` rounds `x` to tf32 (``cvt.rna.tf32.f32``: nearest,
ties away from zero). Unlike TileLang, a store into a tfloat32 buffer and arithmetic on its elements are float32:
values keep their low mantissa bits until an MMA reads them (each operand is then rounded to the nearest tf32,
the value TileLang's store would have kept) or a ``T.tfloat32(x)`` rounds them.
"""
from __future__ import annotations

import builtins
import sys

import numpy as np
import tvm_ffi
from tvm import ir, tirx
from tvm.tirx.script.builder import ir as _script

from tilex import dtypes as lowbit
from tilex.ir import intrin

#: TileLang spelling -> TVM dtype (TVM's codegen has no plain "float8_e4m3"; CUDA's __nv_fp8_e4m3 is e4m3fn)
ALIASES = {"float8_e4m3": "float8_e4m3fn"}

#: TileLang's C-style names -> TVM names
C_NAMES = {"bool": "bool", "short": "int16", "int": "int32", "uint": "uint32", "long": "int64", "ulong": "uint64",
           "half": "float16", "float": "float32", "double": "float64"}

#: TVM name -> attribute of the torch module (the names torch spells the same way, and TileLang's e4m3 / fp4x2)
TORCH_NAMES = {name: name for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
    "float32", "float64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")}
TORCH_NAMES["float8_e4m3"] = "float8_e4m3fn"  # TileLang's e4m3 is CUDA's __nv_fp8_e4m3: no infinity
TORCH_NAMES["float4_e2m1fnx2"] = "float4_e2m1fn_x2"

_PYTHON_TYPES = {builtins.bool: "bool", builtins.int: "int32", builtins.float: "float32"}

# the attributes of tilex.dtypes.LowBitType a low-bit dtype object answers (`bits` and `is_float` it has itself)
_LOWBIT_ATTRS = frozenset(("kind", "signed", "exponent", "mantissa", "bias", "num_codes", "storage_bits",
                           "has_inf", "has_nan", "max_value", "min_value", "value", "values", "exact_in"))


class dtype(tvm_ffi.dtype):  # noqa: N801 - TileLang's spelling (T.dtype)
    """An element type: the TVM dtype name as a ``str``, with ``.bits``, ``.bytes``, ``.lanes``, ``.as_torch()``,
    callable and subscriptable as TVMScript's dtype constructors are (see the module docstring)."""

    __slots__ = ()

    def __new__(cls, value):
        if isinstance(value, cls):
            return value
        if cls is dtype and isinstance(value, str) and tf32_lanes(value):
            return TensorFloat32(value)
        return super().__new__(cls, _name_of(value))

    def __reduce__(self):
        return dtype, (str(self),)

    @property
    def bytes(self) -> int:
        """Bytes of one element (all lanes; a sub-byte type counts one byte, as ``.itemsize``)."""
        return self.itemsize

    @property
    def _dtype_str(self) -> str:
        # the attribute TVMScript's builders read a dtype constructor's name from (ir._normalize_prim_type)
        return str(self)

    def as_torch(self):
        """The torch dtype of this type (``float8_e4m3`` gives ``torch.float8_e4m3fn``); TypeError for a type torch
        has no dtype for (sub-byte integers, fp4 / fp6 codes, vectors)."""
        import torch

        found = getattr(torch, TORCH_NAMES.get(str(self), ""), None)
        if not isinstance(found, torch.dtype):
            raise TypeError(f"dtype {str(self)!r} has no torch dtype (torch {torch.__version__}); store such values "
                            f"packed in a uint8 / int8 / int32 tensor")
        return found

    def __call__(self, *values, is_size_var=False):
        """``T.float32(0)``: a constant; ``T.float32(x)``: `x` cast; ``T.float32()``: a new variable (as TVMScript's
        dtype constructors); ``T.float16x2(a, b)``: the lanes `a`, `b` as one vector value."""
        if is_size_var:
            raise NotImplementedError(f"T.{self}(is_size_var=True): TVM 0.27 has no SizeVar; declare the size with "
                                      f"T.symbolic or T.{self}()")
        if len(values) > 1:
            if len(values) != self.lanes:
                raise ValueError(f"T.{self}: {len(values)} values given for a vector of {self.lanes} lanes")
            lane = dtype(self.with_lanes(1))
            return tirx.Shuffle([lane(v) for v in values], [tirx.const(i, "int32") for i in range(len(values))])
        value = values[0] if values else None
        constructor = _script_constructor(str(self))
        if constructor is not None:
            return constructor(value)
        if isinstance(value, str):
            value = builtins.float(value)
        if value is None:
            return tirx.Var("", self)
        if isinstance(value, (builtins.int, builtins.float)):
            return tirx.const(value, self)
        return _script.cast(value, self)

    def __getitem__(self, key):
        """``T.float32[4]`` / ``T.float32[M, N]``: TVMScript's local-array annotation (``x: T.float32[4]``); a slice
        slices the name as a string."""
        if isinstance(key, slice):
            return str(self)[key]
        return _script.LocalVectorAnnotation(str(self), key if isinstance(key, tuple) else (key,))

    def __getattr__(self, name):
        if name in _LOWBIT_ATTRS:
            try:
                return getattr(lowbit.lookup(str(self)), name)
            except ValueError:
                pass
        raise AttributeError(f"{type(self).__name__} {str(self)!r} has no attribute {name!r}")


class TensorFloat32(dtype):
    """TileLang's TensorFloat32 element type (``T.tfloat32``, ``T.tfloat32x2`` .. ``x64``) over float32 storage: the
    string is the float32 name TVM takes (``T.tfloat32 == "float32"``, ``T.tfloat32x4 == "float32x4"``), so buffers,
    tensors and gemms of it are float32 ones (see the module docstring); ``.name`` is TileLang's spelling. Called,
    it rounds to tf32: ``T.tfloat32(x)`` is `x` (cast to float32) rounded by ``cvt.rna.tf32.f32``, a constant
    rounded the same way in Python, ``T.tfloat32()`` a new float32 variable."""

    __slots__ = ()

    def __new__(cls, value="tfloat32"):
        if isinstance(value, cls):
            return value
        lanes = tf32_lanes(value) if isinstance(value, str) else None
        if lanes is None:
            raise ValueError(f"TensorFloat32: {value!r} is not a tfloat32 name (tfloat32, tfloat32x2 .. x64, "
                             f"custom[tfloat32])")
        return tvm_ffi.dtype.__new__(cls, "float32" if lanes == 1 else f"float32x{lanes}")

    @property
    def name(self) -> str:
        """TileLang's name: ``"tfloat32"`` or ``"tfloat32x<lanes>"``."""
        return "tfloat32" if self.lanes == 1 else f"tfloat32x{self.lanes}"

    def __repr__(self):
        return f"dtype({self.name!r})"

    def __reduce__(self):
        return TensorFloat32, (self.name,)

    def __call__(self, *values, is_size_var=False):
        if is_size_var or not values:
            return super().__call__(is_size_var=is_size_var)  # a new float32 variable (or the SizeVar refusal)
        if len(values) != self.lanes:
            raise ValueError(f"T.{self.name}: {len(values)} values given for {self.lanes} lane(s); a vector is "
                             f"built from one value per lane")
        if self.lanes > 1:
            lane = TensorFloat32("tfloat32")
            return tirx.Shuffle([lane(v) for v in values], [tirx.const(i, "int32") for i in range(len(values))])
        value = values[0]
        if isinstance(value, str):
            value = builtins.float(value)
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, (builtins.int, builtins.float)):
            return tirx.const(round_tf32(value), "float32")
        if isinstance(value, tirx.FloatImm):
            return tirx.const(round_tf32(value.value), "float32")
        if str(value.dtype) != "float32":
            value = _script.cast(value, "float32")
        return intrin.round_tf32(value)


def tf32_lanes(name: str) -> int | None:
    """The lanes of TileLang's TensorFloat32 type `name` (``tfloat32`` -> 1, ``tfloat32x4`` /
    ``custom[tfloat32]x4`` -> 4), None for any other name."""
    for base in ("tfloat32", "custom[tfloat32]"):
        if name == base:
            return 1
        if name.startswith(base + "x") and name[len(base) + 1:].isdigit():
            lanes = builtins.int(name[len(base) + 1:])
            return lanes if lanes in (2, 4, 8, 16, 32, 64) else None
    if name == "custom[tfloat32]32":  # TVM's full spelling of the custom type (32 bits)
        return 1
    return None


def round_tf32(value: builtins.float) -> builtins.float:
    """`value` rounded to tf32 as ``cvt.rna.tf32.f32`` does (float32 first; the 13 low mantissa bits rounded to
    nearest, ties away from zero; infinities and NaN unchanged)."""
    bits = np.array([value], dtype=np.float32).view(np.uint32)[0]
    if (bits & 0x7F800000) != 0x7F800000:  # finite
        bits = np.uint32((builtins.int(bits) + 0x1000) & 0xFFFFE000)
    return builtins.float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def canonical_dtype(value):
    """`value` (a dtype name, a :class:`dtype`, a TVMScript dtype constructor, a torch / numpy dtype) as the
    :class:`dtype` TVM's codegen takes, TileLang's aliases resolved (``float8_e4m3`` -> ``float8_e4m3fn``,
    ``tfloat32`` -> its float32 storage); a ``tvm.ir.Type`` is returned unchanged. ValueError / TypeError name an
    unknown or unusable dtype."""
    if isinstance(value, ir.Type):
        return value
    d = dtype(value)
    if isinstance(d, TensorFloat32):
        return dtype(str(d))
    return dtype(ALIASES[d]) if d in ALIASES else d


def is_dtype_like(value) -> builtins.bool:
    """Whether `value` names an element type :class:`dtype` accepts (a name, a dtype object, a torch / numpy
    dtype; not a Python number)."""
    try:
        dtype(value)
    except (TypeError, ValueError):
        return False
    return True


#: TileLang's TensorFloat32 types (``T.tfloat32``, ``T.tfloat32x2`` .. ``x64``; named ``custom[tfloat32]`` there):
#: :class:`TensorFloat32` objects
TF32_NAMES = ("tfloat32", *(f"tfloat32x{n}" for n in (2, 4, 8, 16, 32, 64)))


def _name_of(value) -> str:
    """The TVM dtype name `value` stands for (see :class:`dtype`; a tfloat32 name: its float32 storage)."""
    if isinstance(value, str):
        name = C_NAMES.get(str(value), str(value))
        lanes = tf32_lanes(name)
        if lanes:
            name = "float32" if lanes == 1 else f"float32x{lanes}"
    elif isinstance(value, _script.DtypeConstructor):
        name = value._dtype_str  # noqa: SLF001 - TVMScript's constructor names its dtype there
    elif value is _script.boolean:  # TVMScript's T.bool
        name = "bool"
    elif isinstance(value, lowbit.LowBitType):
        name = value.name
    elif isinstance(value, ir.PrimType):
        name = str(value.dtype)
    elif isinstance(value, type) and value in _PYTHON_TYPES:
        name = _PYTHON_TYPES[value]
    elif isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        name = str(np.dtype(value))
    elif _is_torch_dtype(value):
        name = _torch_name(value)
    else:
        raise TypeError(f"expected a dtype (a name such as 'float16', a T.dtype, a torch or numpy dtype), got "
                        f"{value!r} of type {type(value).__name__}")
    try:
        return str(tvm_ffi.core.DataType(name))
    except ValueError:
        raise ValueError(_unknown(name)) from None


def _unknown(name):
    try:
        code = lowbit.lookup(name)
    except ValueError:
        return (f"unknown dtype {name!r}; expected a TVM dtype name ('float16', 'bfloat16', 'float32', 'int8', "
                f"'uint32', 'float8_e4m3fn', 'float16x2', ...), one of TileLang's {sorted(C_NAMES)}, or a torch / "
                f"numpy dtype")
    return (f"dtype {name!r} is tilex's low-bit code type {code.name} (the dtype argument of T.dequantize), not an "
            f"element type TVM can store; keep its codes packed in uint8 / int32 buffers")


def _is_torch_dtype(value) -> builtins.bool:
    torch = sys.modules.get("torch")  # a torch dtype means torch is imported
    return torch is not None and isinstance(value, torch.dtype)


def _torch_name(value) -> str:
    import torch

    for name, attr in TORCH_NAMES.items():
        if name not in ALIASES and getattr(torch, attr, None) == value:
            return name
    raise TypeError(f"torch dtype {value} has no TVM dtype")


def _script_constructor(name):
    """TVMScript's constructor of dtype `name` (T.float32, T.bool, ...), None where it has none (T.int4) or its
    FFI function is missing (T.float16x2)."""
    if name == "bool":
        return _script.boolean
    found = getattr(_script, name, None)
    if isinstance(found, _script.DtypeConstructor) and hasattr(_script._ffi_api, found._ffi_name):  # noqa: SLF001
        return found
    return None


# TVMScript's short names (T.f16, T.i32, ...): their constructors name the dtype
_SHORTHANDS = ("f16", "f32", "f64", "bf16", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")


def _exported_names():
    names = [n for n, v in vars(_script).items() if isinstance(v, _script.DtypeConstructor)]
    names += ["bool", "int4", "bfloat16x2", *(n for n in C_NAMES if n != "ulong")]  # T.dtype("ulong") only
    names += TF32_NAMES
    for t in lowbit.ALL_TYPES:  # the 1..8-bit integers and float8 types TVM has (T.int3, T.uint4, ...)
        if tvm_ffi.dtype.is_dtype(t.name):
            names.append(t.name)
    return list(dict.fromkeys(names))


#: every dtype object of ``tilex.language`` by its name there (``T.float16``, ``T.f16``, ``T.half``, ``T.int3``, ...)
TYPES = {name: dtype(getattr(_script, name) if name in _SHORTHANDS else name) for name in _exported_names()}

#: names of TYPES that would shadow Python's builtins where imported (tilex.language serves T.int / T.float itself)
BUILTIN_NAMES = ("bool", "int", "float")

globals().update((name, t) for name, t in TYPES.items() if name not in BUILTIN_NAMES)
__all__ = ["dtype", "canonical_dtype", *(name for name in TYPES if name not in BUILTIN_NAMES)]


def __getattr__(name):
    """``_TORCH_DTYPE_TO_STR`` (TileLang's {torch dtype: dtype name} table, which its examples import), built on
    first use from :data:`TORCH_NAMES` and the installed torch."""
    if name == "_TORCH_DTYPE_TO_STR":
        import torch

        table = {}
        for tvm_name, attr in TORCH_NAMES.items():
            found = getattr(torch, attr, None)
            if isinstance(found, torch.dtype) and tvm_name not in ALIASES:
                table.setdefault(found, tvm_name)
        table.update({torch.short: "int16", torch.int: "int32", torch.long: "int64", torch.half: "float16",
                      torch.float: "float32", torch.double: "float64"})
        return table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
