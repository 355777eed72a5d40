"""Shapes of Relax tensors as the offload patterns read them: static sizes, row counts of matrix views, and the
reshapes to and from those views."""
from __future__ import annotations

from tvm import relax, tirx

__all__ = ["static", "shape", "static_shape", "prod", "rows", "rows_arg", "flat", "unflat", "dims_key",
           "is_transpose"]


def static(e):
    return int(e) if isinstance(e, tirx.IntImm) else None


def shape(ty):
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not hasattr(ty.shape, "values"):
        return None
    return list(ty.shape.values)


def static_shape(ty):
    """The dimensions of a tensor type as ints when all are static, else None."""
    dims = shape(ty)
    if dims is None or any(static(d) is None for d in dims):
        return None
    return [static(d) for d in dims]


def prod(dims):
    """The product of `dims`: an int when all are static, else a PrimExpr."""
    if all(static(d) is not None for d in dims):
        m = 1
        for d in dims:
            m *= static(d)
        return m
    m = 1
    for d in dims:
        m = m * d
    return m


def rows(dims):
    """The product of all but the last axis: an int when static, else a PrimExpr."""
    return prod(dims[:-1])


def rows_arg(m):
    """The row count a program is built for: `m` when static, else a symbolic size."""
    return m if isinstance(m, int) else tirx.Var("m", "int32")


def flat(x, xd, m, last):
    """`x` (dimensions `xd`) as an (m, last) matrix."""
    return x if len(xd) == 2 else relax.op.reshape(x, relax.ShapeExpr([m, last]))


def unflat(out, xd, n):
    """A (rows, n) result back in the leading dimensions of `xd`."""
    return out if len(xd) == 2 else relax.op.reshape(out, relax.ShapeExpr(list(xd[:-1]) + [n]))


def dims_key(dims):
    """Dimensions comparable across int / IntImm / symbolic spellings."""
    out = []
    for d in dims:
        v = d if isinstance(d, int) else static(d)
        out.append(v if v is not None else str(d))
    return out


def is_transpose(call):
    """Whether a ``permute_dims`` call transposes a matrix (no axes given, or (1, 0))."""
    axes = call.attrs.axes
    return axes is None or [int(a) for a in axes] == [1, 0]
