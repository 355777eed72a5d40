"""Buffer annotations in TileLang's proxy style: objects that are both called and subscripted.

``A: T.Tensor((M, N), T.float16)`` and ``A: T.Tensor[(M, N), T.float16]`` declare the same kernel parameter;
``T.StridedTensor((M, N), (ld, 1), dtype)`` one with explicit strides; ``T.SharedBuffer`` / ``T.FragmentBuffer`` /
``T.LocalBuffer`` the tiles a ``T.macro`` takes. Each builds TVMScript's ``T.Buffer`` in its scope, the dtype
going through :func:`~tilex.language.dtypes.canonical_dtype` (names, dtype objects, torch / numpy dtypes).
"""
from __future__ import annotations

from tvm.script.ir_builder import IRBuilder
from tvm.script.tirx import Buffer, decl_buffer

from tilex.language.dtypes import canonical_dtype, is_dtype_like


class TensorProxy:
    """``T.Tensor(shape, dtype="float32", ...)`` / ``T.Tensor[shape, dtype]``: a buffer annotation in `scope`
    (extra arguments are T.Buffer's: ``data``, ``strides``, ``elem_offset``, ``scope``, ...)."""

    def __init__(self, api: str, scope: str | None = None):
        self.api = api
        self.scope = scope

    def __call__(self, shape, dtype="float32", *args, **kwargs):
        if self.scope is not None and not (len(args) >= 5 or "scope" in kwargs):  # scope: T.Buffer's 7th argument
            kwargs["scope"] = self.scope
        if (args[0] if args else kwargs.get("data")) is not None and IRBuilder.is_in_scope():
            # in a program body, a tensor over existing data (`T.Tensor(shape, dtype, A.data)`, TileLang's
            # reshaped view) is a declaration, which TVM 0.27 needs (T.Buffer alone leaves it undeclared)
            return decl_buffer(_shape(shape), canonical_dtype(dtype), *args, **kwargs)
        return Buffer(_shape(shape), canonical_dtype(dtype), *args, **kwargs)

    def __getitem__(self, keys):
        """``[shape]``, ``[d0, d1, ...]`` (the shape alone) or ``[shape, dtype, ...]`` (the call's arguments)."""
        if not isinstance(keys, tuple):
            return self(keys)
        if any(isinstance(k, (tuple, list)) or is_dtype_like(k) for k in keys):
            return self(*keys)
        return self(keys)

    def __repr__(self):
        return f"T.{self.api}"


class StridedTensorProxy(TensorProxy):
    """``T.StridedTensor(shape, strides, dtype="float32")`` / ``T.StridedTensor[shape, strides, dtype]``: a global
    tensor whose dimension d steps ``strides[d]`` elements (a slice of a larger tensor, a transposed view)."""

    def __call__(self, shape, strides, dtype="float32", **kwargs):
        shape, strides = _shape(shape), _shape(strides)
        if len(shape) != len(strides):
            raise ValueError(f"T.{self.api}: shape {list(shape)} and strides {list(strides)} have different ranks")
        return super().__call__(shape, dtype, strides=strides, **kwargs)

    def __getitem__(self, keys):
        if not isinstance(keys, tuple) or len(keys) < 2 or not all(isinstance(k, (tuple, list)) for k in keys[:2]):
            raise TypeError(f"T.{self.api}[shape, strides, dtype]: the shape and the strides are both needed, as "
                            f"tuples; got {keys!r}")
        return self(*keys)


def _shape(shape):
    return tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)


Tensor = TensorProxy("Tensor")
StridedTensor = StridedTensorProxy("StridedTensor")
SharedBuffer = TensorProxy("SharedBuffer", "shared.dyn")
FragmentBuffer = TensorProxy("FragmentBuffer", "local.fragment")
LocalBuffer = TensorProxy("LocalBuffer", "local")
