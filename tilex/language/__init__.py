"""`import tilex.language as T`: the TileLang-style frontend (TVMScript's `T` plus tile-level constructs)."""
# ruff: noqa: F401,F403
from tvm.script.tirx import *  # the TVMScript surface: dtypes, math, T.serial, T.if_then_else, ...
from tvm.script.tirx import Buffer

from tilex.language.atomic import atomic_add, atomic_max, atomic_min
from tilex.language.layouts import Fragment, Layout, annotate_layout, make_swizzled_layout
from tilex.language.allocate import alloc_fragment, alloc_local, alloc_shared, alloc_var
from tilex.language.debug import print  # noqa: A004 - T.print, as in TileLang
from tilex.language.kernel import Kernel
from tilex.language.rasterize import use_swizzle
from tilex.language.loop import Parallel, Pipelined
from tilex.language.parser import prim_func
from tilex.language.tileop import (GemmWarpPolicy, clear, copy, fill, gemm, reduce, reduce_abssum, reduce_absmax,
                                   reduce_max, reduce_min, reduce_sum)

Tensor = Buffer  # TileLang spells parameter annotations T.Tensor


def ceildiv(a, b):
    """Ceiling division for ints and TIR expressions."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    from tvm import tirx

    return tirx.floordiv(a + b - 1, b)
