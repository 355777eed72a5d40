"""Buffer annotations in TileLang's proxy style: objects that are both called and subscripted.

``A: T.Tensor((M, N), T.float16)`` and ``A: T.Tensor[(M, N), T.float16]`` declare the same kernel parameter;
``T.StridedTensor((M, N), (ld, 1), dtype)`` one with explicit strides; ``T.SharedBuffer`` / ``T.FragmentBuffer`` /
``T.LocalBuffer`` the tiles a ``T.macro`` takes. Each builds TVMScript's ``T.Buffer`` in its scope, the dtype
going through :func:`~tilex.language.dtypes.canonical_dtype` (names, dtype objects, torch / numpy dtypes).

Pointer tables: ``T.Tensor([n], T.ptr)`` is a tensor of ``n`` device addresses (int64, ``tensor.data_ptr()``
values), and ``T.make_tensor(addr, shape, dtype)`` the tensor at one of them, as in TileLang.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.tirx import Buffer, bind, decl_buffer, handle

from tilex.ir.visit import dtype_of

from tilex.language.dtypes import canonical_dtype, is_dtype_like


class TensorProxy:
    """``T.Tensor(shape, dtype="float32", ...)`` / ``T.Tensor[shape, dtype]``: a buffer annotation in `scope`
    (extra arguments are T.Buffer's: ``data``, ``strides``, ``elem_offset``, ``scope``, ...)."""

    def __init__(self, api: str, scope: str | None = None):
        self.api = api
        self.scope = scope

    def __call__(self, shape, dtype="float32", *args, **kwargs):
        dtype = _storage_dtype(dtype)
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
        shape, strides = _shape(shape), _dims(strides)
        if any(isinstance(d, tirx.IntImm) and dtype_of(d) == "int64" for d in shape):
            strides = tuple(tirx.IntImm("int64", int(d)) if _is_int(d) else d for d in strides)
        if len(shape) != len(strides):
            raise ValueError(f"T.{self.api}: shape {list(shape)} and strides {list(strides)} have different ranks")
        return super().__call__(shape, dtype, strides=strides, **kwargs)

    def __getitem__(self, keys):
        if not isinstance(keys, tuple) or len(keys) < 2 or not all(isinstance(k, (tuple, list)) for k in keys[:2]):
            raise TypeError(f"T.{self.api}[shape, strides, dtype]: the shape and the strides are both needed, as "
                            f"tuples; got {keys!r}")
        return self(*keys)


#: the most elements a tensor may hold with int32 extents: past it, its flattened offsets need int64
_INT32_ELEMENTS = 2 ** 31 - 1


def _dims(dims):
    return tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)


def _is_int(d) -> bool:
    return isinstance(d, (int, tirx.IntImm)) and not isinstance(d, bool)


def _shape(shape):
    """`shape` as a tuple; constant extents whose product exceeds int32 (a 65536 x 65536 tensor) as int64, so that
    the tensor's flattened offsets are computed in int64 (TVM's FlattenBuffer multiplies extents in their type)."""
    dims = _dims(shape)
    if dims and all(_is_int(d) for d in dims):
        count = 1
        for d in dims:
            count *= int(d)
        if count > _INT32_ELEMENTS:
            return tuple(tirx.IntImm("int64", int(d)) for d in dims)
    return dims


def ptr(dtype=None, storage_scope="global", *, is_size_var=False):
    """A pointer variable (TVMScript's ``T.handle``): ``T.ptr()`` an opaque one, ``T.ptr("float16")`` one to
    float16 data in `storage_scope`. As a tensor's dtype, ``T.Tensor([n], T.ptr)``, it stands for device addresses,
    stored as int64 (what ``tensor.data_ptr()`` gives), that ``T.make_tensor`` turns back into tensors."""
    if is_size_var:
        raise NotImplementedError("T.ptr(is_size_var=True) is not supported by tilex: a pointer is not a size")
    return handle(None if dtype is None else str(canonical_dtype(dtype)), storage_scope)


def _storage_dtype(dtype):
    """The dtype a tensor of `dtype` stores: int64 addresses for ``T.ptr``."""
    return "int64" if dtype is ptr else dtype


def make_tensor(ptr, shape, dtype="float32", strides=None):  # noqa: A002 - TileLang's parameter name
    """The global tensor of `shape` and `dtype` (row-major, or `strides`) whose data starts at `ptr`: a device address
    (an int64 or uint64 expression, such as an element of a ``T.Tensor([n], T.ptr)`` pointer table) or a pointer
    expression / variable. Written in a program body, as in TileLang::

        A = T.make_tensor(A_ptrs[g], (M, K), T.float16)

    The address is read once, where this is written; the tensor is then used like a kernel parameter (its accesses
    are not bounds-checked against the memory behind the address)."""
    api = "T.make_tensor"
    if not IRBuilder.is_in_scope():
        raise ValueError(f"{api} is only valid in a program body (it reads the address where it is written)")
    if not tvm.ir.is_prim_expr(ptr):
        raise TypeError(f"{api}: expected an address (an int64 expression such as A_ptrs[i]) or a pointer, got "
                        f"{ptr!r}")
    dtype = canonical_dtype(_storage_dtype(dtype))
    source = dtype_of(ptr)
    if source not in ("int64", "uint64", "handle"):
        raise TypeError(f"{api}: an address is a 64-bit integer (int64 or uint64) or a pointer, got {source} {ptr}")
    if strides is not None:
        strides = _dims(strides)
        if len(strides) != len(_shape(shape)):
            raise ValueError(f"{api}: shape {list(_shape(shape))} and strides {list(strides)} have different ranks")
    pointer = tvm.ir.PointerType(tvm.ir.PrimType(str(dtype)), "global")
    data = bind(tirx.reinterpret(pointer, ptr), var=tirx.Var("tensor_ptr", pointer))
    return decl_buffer(_shape(shape), dtype, data, strides)


Tensor = TensorProxy("Tensor")
StridedTensor = StridedTensorProxy("StridedTensor")
SharedBuffer = TensorProxy("SharedBuffer", "shared.dyn")
FragmentBuffer = TensorProxy("FragmentBuffer", "local.fragment")
LocalBuffer = TensorProxy("LocalBuffer", "local")


def make_tensor_from_addr(addr, shape, dtype="float32", strides=None, storage_scope="global"):
    """``T.make_tensor`` of an address (TileLang's spelling with the storage scope); only global memory."""
    if storage_scope != "global":
        raise NotImplementedError(f"T.make_tensor_from_addr(storage_scope={storage_scope!r}) is not supported by "
                                  f"tilex: tensors made from addresses are global memory")
    return make_tensor(addr, shape, dtype, strides)
