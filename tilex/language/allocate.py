"""Buffer allocation in tile programs: shared memory, register fragments, per-thread locals."""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from tilex.language.dtypes import canonical_dtype
from tilex.language.options import positive_extents, unsupported

FRAGMENT_SCOPE = "local.fragment"
SHARED_SCOPES = ("shared.dyn", "shared")
VAR_SCOPES = ("local.var", "local")


def alloc_shared(shape, dtype="float16", scope="shared.dyn"):
    """A tile in (dynamic) shared memory, visible to the whole block. A one-element tile (a block-wide scalar) is
    static shared memory: TVM 0.27's merge of the dynamic tiles fails on a one-element tile beside others."""
    if scope not in SHARED_SCOPES:
        unsupported("T.alloc_shared", "scope", scope, f"shared tiles live in one of {SHARED_SCOPES}")
    dims = _shape("T.alloc_shared", shape)
    if scope == "shared.dyn" and all(_is_one(d) for d in dims):
        scope = "shared"
    return _ir.alloc_buffer(dims, canonical_dtype(dtype), scope=scope)


def alloc_fragment(shape, dtype="float32", scope=FRAGMENT_SCOPE):
    """A block-level register tile: its elements are spread over the threads by an inferred Fragment layout.

    As in TileLang, `scope` is the buffer's storage scope: another scope allocates that kind of buffer instead --
    ``"local"`` per-thread registers (``T.alloc_local``: every thread its own copy of the whole buffer),
    ``"shared.dyn"`` / ``"shared"`` a shared tile (``T.alloc_shared``)."""
    api = "T.alloc_fragment"
    if scope == "local":
        return alloc_local(shape, dtype)
    if scope in SHARED_SCOPES:
        return alloc_shared(shape, dtype, scope)
    if scope != FRAGMENT_SCOPE:
        unsupported(api, "scope", scope, f"a fragment lives in '{FRAGMENT_SCOPE}' (or 'local', {SHARED_SCOPES} for "
                                         f"those buffers)")
    return _ir.alloc_buffer(_shape(api, shape), canonical_dtype(dtype), scope=scope)


def alloc_local(shape, dtype="float32", scope="local"):
    """Per-thread registers: every thread has its own copy of the whole buffer."""
    if scope != "local":
        unsupported("T.alloc_local", "scope", scope, "per-thread buffers live in 'local'")
    return _ir.alloc_buffer(_shape("T.alloc_local", shape), canonical_dtype(dtype), scope=scope)


def alloc_var(dtype="float32", *args, scope="local.var", init=None):
    """A per-thread scalar variable: ``acc = T.alloc_var("float32", 0.0)``, then ``acc = acc + x`` (TVMScript
    scalar; stored as a 1-element local buffer).

    As in TileLang, the positional arguments after `dtype` are ``init``, ``scope`` (a lone string), or
    ``(init, scope)``; `scope` is ``"local.var"`` (or ``"local"``).
    """
    if len(args) == 1:
        if isinstance(args[0], str):
            if scope != "local.var":
                raise TypeError("T.alloc_var: the scope is given twice (positionally and as scope=)")
            scope = args[0]
        elif init is not None:
            raise TypeError("T.alloc_var: the initial value is given twice (positionally and as init=)")
        else:
            init = args[0]
    elif len(args) == 2:
        if init is not None:
            raise TypeError("T.alloc_var: the initial value is given twice (positionally and as init=)")
        init, scope = args
    elif len(args) > 2:
        raise TypeError(f"T.alloc_var takes at most 3 positional arguments (dtype, init, scope), got {len(args) + 1}")
    if not isinstance(scope, str):
        raise TypeError(f"T.alloc_var: scope must be a str, got {scope!r}")
    if scope not in VAR_SCOPES:
        unsupported("T.alloc_var", "scope", scope, f"scalar variables live in one of {VAR_SCOPES}")
    dtype = canonical_dtype(dtype)
    var = _ir.alloc_scalar(dtype, scope="local")
    if init is not None:
        value = tirx.const(init, dtype) if isinstance(init, (int, float)) else init
        _ir.buffer_store(var.source if hasattr(var, "source") else var, value, [0])
    return var


def _is_one(extent) -> bool:
    return (isinstance(extent, int) and extent == 1) or getattr(extent, "value", None) == 1


def _shape(api, shape):
    shape = (shape,) if not isinstance(shape, (tuple, list)) else tuple(shape)
    if not shape:
        raise ValueError(f"{api}: the shape must have at least one dimension")
    positive_extents(api, "shape dimensions", shape)
    return shape


def view(buffer, shape=None, dtype=None):
    """The same bytes as another buffer, seen with a new shape and/or dtype: ``T.view(A, (n // 4,), "uint32")``
    reads a uint8 tensor four bytes at a time (TileLang's ``T.view``).

    `shape` defaults to `buffer`'s with its last dimension rescaled to the new element size; the view must cover
    exactly the bytes of `buffer`. Global tensors, shared tiles, per-thread local buffers and fragments can be
    viewed. A fragment's view keeps every thread's bits (`tilex.layout.reinterpret`): only its last dimension may
    change, and merged elements must be consecutive registers of one thread in the fragment's layout. A shared
    tile's view is the same bytes in the tile's layout (`tilex.op.view`: a swizzle the tile has as a T.gemm operand
    is followed; elements merged into a wider one must lie side by side in it)."""
    scope = str(buffer.scope())
    if scope not in ("global", "", "local", "local.fragment") + SHARED_SCOPES:
        raise NotImplementedError(f"T.view of '{buffer.name}' in scope '{scope}': only global tensors, shared tiles, "
                                  f"T.alloc_local buffers and fragments can be viewed")
    old = tvm.DataType(str(buffer.dtype))
    new = tvm.DataType(str(canonical_dtype(dtype))) if dtype is not None else old
    old_shape = [_static_dim(d, buffer.name) for d in buffer.shape]
    if shape is None:
        last = old_shape[-1] * old.bits * old.lanes
        if last % (new.bits * new.lanes):
            raise ValueError(f"T.view: the last dimension of '{buffer.name}' ({old_shape[-1]} x {old}) is not a whole "
                             f"number of {new} elements; give the view's shape")
        shape = old_shape[:-1] + [last // (new.bits * new.lanes)]
    shape = list(_shape("T.view", shape))
    old_bits, new_bits = old.bits * old.lanes, new.bits * new.lanes
    for d in old_shape:
        old_bits *= d
    for d in shape:
        new_bits *= _static_dim(d, "the view")
    if old_bits != new_bits:
        raise ValueError(f"T.view: '{buffer.name}' holds {old_bits // 8} bytes ({old_shape} x {old}) but the view "
                         f"{shape} x {new} would cover {new_bits // 8}")
    if scope == "local.fragment" and [_static_dim(d, "the view") for d in shape[:-1]] != old_shape[:-1]:
        raise ValueError(f"T.view of fragment '{buffer.name}' {old_shape} as {shape}: a fragment's view keeps every "
                         f"dimension but the last (each thread keeps its bits)")
    return _ir.decl_buffer(shape, str(new), data=buffer.data, scope=scope or "global")


def _static_dim(d, what):
    if isinstance(d, int):
        return d
    if isinstance(d, tirx.IntImm):
        return int(d.value)
    raise ValueError(f"T.view: {what} must have constant dimensions, got {d}")


def reshape(src, shape):
    """The same elements as `src` seen with another shape, without a copy (TileLang's ``T.reshape``): row-major
    order is kept, so ``T.reshape(A, (n // m, m))[i, j]`` is ``A[i * m + j]``. The element counts must be equal
    (symbolic dimensions of a global tensor where TVM's analyzer proves it).

    Global tensors, per-thread local buffers and fragments take any shape. A fragment's reshape is the same
    registers: each element stays in its thread and register, and layout inference derives either layout from the
    other (`tilex.op.view`), so ``s3 = T.reshape(s, (m, h, d))`` of a gemm's accumulator ``s`` (m, h * d) can be
    written and reduced per ``h``. A shared tile's reshape is its elements where the tile's layout (a swizzle, or
    row-major) puts them (`tilex.op.view`); its shape must be constant."""
    api = "T.reshape"
    if not tirx.is_buffer_var(src):
        raise TypeError(f"{api} expects a buffer, got {src!r}")
    shape = _shape(api, shape)
    scope = str(src.scope())
    count, want = 1, 1
    for d in src.shape:
        count = count * d
    for d in shape:
        want = want * d
    if not tvm.sym.Analyzer().can_prove_equal(count, want):
        raise ValueError(f"{api}: '{src.name}' {list(src.shape)} has {count} elements but the shape {list(shape)} "
                         f"has {want}")
    if scope in SHARED_SCOPES:
        shape = tuple(_static_dim(d, f"{api} of shared tile '{src.name}': the shape") for d in shape)
    if scope == FRAGMENT_SCOPE:
        shape = tuple(_static_dim(d, f"{api} of fragment '{src.name}': the shape") for d in shape)
        if list(shape) == [_static_dim(d, src.name) for d in src.shape]:
            return view(src)
    return _ir.decl_buffer(shape, str(src.dtype), data=src.data, scope=scope or "global")
