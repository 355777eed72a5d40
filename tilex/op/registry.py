"""Registry of tile operators: TVM op name -> Python class with `infer_layout` and `lower` hooks."""
from __future__ import annotations

import tvm
from tvm.ir import Op

from tilex.ir.names import register_intrinsic

_TILE_OPS: dict[str, type] = {}


def register_tile_op(name):
    """Class decorator: register a tile operator under the TVM op `name`."""

    def deco(cls):
        register_intrinsic(name)
        cls.op_name = name
        _TILE_OPS[name] = cls
        return cls

    return deco


def parse_tile_op(call):
    """Build the tile-operator object for a TIR Call, or None if the call is not a tile op."""
    if not isinstance(call, tvm.ir.Call) or not isinstance(call.op, Op):
        return None
    cls = _TILE_OPS.get(call.op.name)
    return cls.from_call(call) if cls is not None else None


def tile_op_names():
    return sorted(_TILE_OPS)
