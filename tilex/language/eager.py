"""`T.const` and `T.empty`: the declarations of an eager ``@tilex.jit`` function (TileLang's eager style).

An eager function declares its problem sizes and its outputs in its body, before its kernel::

    @tilex.jit
    def matmul(A, B, block_M, block_N, block_K, dtype="float16"):
        M, N, K = T.const("M, N, K")        # sizes bound from the shapes of the tensors passed as A and B
        A: T.Tensor((M, K), dtype)           # A and B are tensor parameters
        B: T.Tensor((K, N), dtype)
        C = T.empty((M, N), dtype)           # an output: allocated by the kernel and returned
        with T.Kernel(...) as (bx, by):
            ...
        return C

``tilex.jit.eager`` runs those declarations as Python inside an :class:`EagerScope` (:func:`eager_scope`): the
scope answers ``T.const`` (placeholder variables while the function's shape is first read, then the values bound
for one compilation) and records the ``T.empty`` outputs in the order they are declared. Outside that scope both
raise a ``TypeError``: they mean nothing in a ``T.prim_func`` body or in plain Python.
"""
from __future__ import annotations

import re
import sys
import threading

from tvm import tirx
from tvm.ir import is_prim_expr
from tvm.script.tirx import Buffer

from tilex.language.dtypes import canonical_dtype

__all__ = ["const", "empty", "OutTensor", "EagerScope", "eager_scope", "current_scope"]

_local = threading.local()
_NAME_SPLIT = re.compile(r"\s*,\s*|\s+")


class OutTensor:
    """An output declared with ``T.empty(shape, dtype)``: the kernel allocates it and returns it."""

    __slots__ = ("shape", "dtype", "line")

    def __init__(self, shape, dtype, line=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.line = line  # (file, line) of the T.empty call, for messages

    def as_buffer(self) -> tirx.Buffer:
        """The output's parameter type (what ``T.Tensor(shape, dtype)`` gives)."""
        return Buffer(self.shape, self.dtype)

    def __repr__(self):
        return f"T.empty({self.shape}, {self.dtype!r})"


class EagerScope:
    """What ``T.const`` and ``T.empty`` consult while an eager function's declarations run.

    ``values`` is None while the function is first read: ``T.const`` then gives a placeholder ``tirx.Var`` per name
    (``consts``), from which the caller learns which tensor dimension binds each name. Otherwise ``values`` maps
    every name to the value bound for this compilation, and ``T.const`` gives those. ``outputs`` lists the
    ``T.empty`` outputs in declaration order; ``const_lines`` where each name was declared ((file, line))."""

    def __init__(self, values: dict | None = None):
        self.values = values
        self.consts: dict[str, tirx.Var] = {}
        self.const_lines: dict[str, tuple] = {}
        self.outputs: list[OutTensor] = []

    def const(self, names: list[str], dtype: str, where):
        out = []
        for name in names:
            self.const_lines.setdefault(name, where)
            if name not in self.consts:
                self.consts[name] = tirx.Var(name, dtype)
            if self.values is None:
                out.append(self.consts[name])
            elif name in self.values:
                out.append(self.values[name])
            else:
                raise ValueError(f"T.const '{name}' has no value: pass {name}=... as a keyword, or the tensors "
                                 "whose annotations have it as a dimension")
        return out

    def add_output(self, out: OutTensor) -> OutTensor:
        self.outputs.append(out)
        return out


class eager_scope:  # noqa: N801 - used as `with eager_scope(scope):`
    """Make `scope` the one ``T.const`` / ``T.empty`` answer to in this thread while the block runs."""

    def __init__(self, scope: EagerScope):
        self.scope = scope
        self.saved = None

    def __enter__(self) -> EagerScope:
        self.saved = getattr(_local, "scope", None)
        _local.scope = self.scope
        return self.scope

    def __exit__(self, *exc):
        _local.scope = self.saved


def current_scope() -> EagerScope | None:
    """The scope of the eager function whose declarations are running in this thread, if any."""
    return getattr(_local, "scope", None)


def _caller_location():
    """(file, line) of the statement that called T.const / T.empty (two frames up)."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return None
    return (frame.f_code.co_filename, frame.f_lineno)


def _outside(what: str) -> TypeError:
    return TypeError(f"{what} declares part of an eager @tilex.jit function and works only there, in the "
                     "statements before its first `with T.Kernel(...)`")


def const(name: str, dtype: str = "int32"):
    """Problem sizes of an eager ``@tilex.jit`` function: ``M, N, K = T.const("M, N, K")`` (names separated by
    commas or spaces; one name gives one value, several a tuple).

    Each name takes its value from the dimension of a tensor argument that the name is in its annotation
    (``A: T.Tensor((M, K), dtype)``), or from a keyword of the same name (``matmul.compile(M=1024, ...)``); every
    distinct combination of values is its own compiled kernel, in which the sizes are constants. ``dtype``
    (``"int32"`` or ``"int64"``) is the type of the name while the function's shape is read. Raises ``TypeError``
    outside an eager function's declarations and ``ValueError`` for a malformed name list."""
    scope = current_scope()
    if scope is None:
        raise _outside("T.const")
    if not isinstance(name, str):
        raise TypeError(f"T.const: the names are one string, e.g. T.const(\"M, N\"), got {type(name).__name__}")
    names = [n for n in _NAME_SPLIT.split(name.strip()) if n]
    if not names or not all(n.isidentifier() for n in names):
        raise ValueError(f"T.const: expected identifiers separated by commas or spaces, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"T.const: a name is repeated in {name!r}")
    dtype = _dtype_name(canonical_dtype(dtype))
    if dtype not in ("int32", "int64"):
        raise ValueError(f"T.const: a size is int32 or int64, got {dtype}")
    values = scope.const(names, dtype, _caller_location())
    return values[0] if len(values) == 1 else tuple(values)


def empty(*shape, dtype="float32"):
    """An output of an eager ``@tilex.jit`` function: ``C = T.empty((M, N), dtype)`` (also
    ``T.empty((M, N), dtype=...)`` and ``T.empty(M, N, dtype=...)``). The function returns it (``return C``, or
    ``return C, D`` for several); the compiled kernel allocates it on each call and returns it. Raises
    ``TypeError`` outside an eager function's declarations or for a malformed shape."""
    scope = current_scope()
    if scope is None:
        raise _outside("T.empty")
    if shape and isinstance(shape[0], (tuple, list)):
        if len(shape) > 2:
            raise TypeError(f"T.empty: expected (shape, dtype), got {len(shape)} positional arguments")
        if len(shape) == 2:
            dtype = shape[1]
        dims = tuple(shape[0])
    else:
        dims = shape
    if not dims:
        raise TypeError("T.empty: the shape has no dimensions")
    dims = tuple(_dimension(d, dims) for d in dims)
    return scope.add_output(OutTensor(dims, canonical_dtype(dtype), _caller_location()))


def _dimension(d, dims):
    if is_prim_expr(d):
        return d
    if isinstance(d, bool) or not hasattr(d, "__index__"):
        raise TypeError(f"T.empty: dimensions are ints or size expressions, got {d!r} in {tuple(dims)}")
    if d.__index__() < 0:
        raise ValueError(f"T.empty: a dimension is negative in {tuple(dims)}")
    return d.__index__()


def _dtype_name(dtype) -> str:
    """A dtype's name: TVMScript's dtype constructors (``T.int32``) carry it in ``_dtype_str``."""
    return getattr(dtype, "_dtype_str", None) or str(dtype)
