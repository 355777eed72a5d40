"""Small adapters over TVM 0.27's IR classes (names moved: BufferLoad is ir.TensorLoad, dtypes live on .ty)."""
from __future__ import annotations

import tvm
from tvm.ir.expr import TensorLoad as BufferLoadNode  # noqa: F401 - what tirx.BufferLoad(...) builds
from tvm.ir.expr import TensorRegion as BufferRegionNode  # noqa: F401 - what A[0:4, 0:8] evaluates to


def dtype_of(expr) -> str:
    """The dtype string of a PrimExpr or Buffer."""
    if hasattr(expr, "ty") and hasattr(expr.ty, "dtype"):
        return str(expr.ty.dtype)
    return str(expr.dtype)


def load_buffer(load):
    """The buffer a BufferLoad reads."""
    return load.source


def lanes(expr) -> int:
    return tvm.DataType(dtype_of(expr)).lanes


def bits(dtype) -> int:
    return tvm.DataType(str(dtype)).bits
