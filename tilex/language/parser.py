"""`T.prim_func`: parse a tile program with TVMScript, then canonicalize tilex's frontend markers."""
from __future__ import annotations

from tvm.script import tirx as _tvm_T

from tilex.language.canonicalize import canonicalize


def prim_func(func=None, *, private=False, check_well_formed=False):
    """Decorator turning a Python function written with `tilex.language` into a TIR PrimFunc."""

    def deco(f):
        # the caller's frame is where closures (tile sizes, dtypes) live: let TVMScript capture them
        parsed = _tvm_T.prim_func(f, private=private, check_well_formed=check_well_formed)
        return canonicalize(parsed)

    if func is None:
        return deco
    return deco(func)


prim_func.dispatch_token = "tirx"
