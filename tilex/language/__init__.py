"""`import tilex.language as T`: the TileLang-style frontend (TVMScript's `T` plus tile-level constructs)."""
# ruff: noqa: F401,F403
from tvm.script.tirx import *  # the TVMScript surface: dtypes, math, T.serial, T.if_then_else, ...
from tvm.script.tirx import Buffer

from tilex.language.atomic import atomic_add, atomic_max, atomic_min
from tilex.language.layouts import Fragment, Layout, annotate_layout, make_swizzled_layout
from tilex.language.allocate import alloc_fragment, alloc_local, alloc_shared, alloc_var, view
from tilex.language.debug import print  # noqa: A004 - T.print, as in TileLang
from tilex.language.kernel import Kernel, get_thread_binding, sync_threads
from tilex.language.rasterize import use_swizzle
from tilex.language.symbolic import dynamic, symbolic
from tilex.language.loop import Parallel, Pipelined
from tilex.language.parser import prim_func
from tilex.language.tileop import (GemmWarpPolicy, clear, copy, dequantize, fill, gemm, reduce, reduce_abssum,
                                   reduce_absmax, reduce_max, reduce_min, reduce_sum)
from tilex import dtypes as _lowbit

# the low-bit types of tilex.dtypes as T.int3, T.uint4, T.float6_e3m2, ...; names TVMScript already has (T.int8,
# T.uint8, T.float8_e4m3, ...) stay TVMScript's dtypes, and T.dequantize accepts those too
for _t in _lowbit.ALL_TYPES:
    globals().setdefault(_t.name, _t)
del _t

from tilex.language.dtypes import canonical_dtype


def Tensor(shape, dtype="float32", *args, **kwargs):  # noqa: N802 - TileLang's spelling
    """A kernel parameter annotation (TVMScript's T.Buffer), TileLang dtype spellings accepted."""
    return Buffer(shape, canonical_dtype(dtype), *args, **kwargs)


def SharedBuffer(shape, dtype="float32"):  # noqa: N802 - TileLang's spelling
    """A `T.macro` parameter annotation for a shared-memory tile (as TileLang writes them)."""
    return Buffer(shape, canonical_dtype(dtype), scope="shared.dyn")


def FragmentBuffer(shape, dtype="float32"):  # noqa: N802
    """A `T.macro` parameter annotation for a register fragment."""
    return Buffer(shape, canonical_dtype(dtype), scope="local.fragment")


def LocalBuffer(shape, dtype="float32"):  # noqa: N802
    """A `T.macro` parameter annotation for a per-thread local array."""
    return Buffer(shape, canonical_dtype(dtype), scope="local")


def ceildiv(a, b, span=None):
    """Ceiling division for ints and TIR expressions (`b` must be positive when it is a constant; `span` is
    accepted for TileLang's signature and not used)."""
    from tvm import tirx

    bv = b.value if isinstance(b, tirx.IntImm) else b
    if type(bv) is int and bv <= 0:  # (`bool` is TVMScript's dtype here)
        raise ValueError(f"T.ceildiv: the divisor must be positive, got {b}")
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return tirx.floordiv(a + b - 1, b)
