"""Reducers: TileLang's deferred reductions (``T.alloc_reducer``, ``T.reducer_init``, ``T.reducer_update``,
``T.finalize_reducer``).

A reducer is a fragment that the threads of a ``T.Parallel`` loop accumulate into at an index over some of the
loop's variables (a GEMV's ``o[i] += a[i, j] * x[j]``), each thread into its own replica; ``T.finalize_reducer``
combines the replicas (see :mod:`tilex.op.reducer`). Both of TileLang's forms are taken::

    r = T.alloc_reducer(M, "float32", replication="all")   # TileLang's first form: finalized in place
    T.clear(r)
    for i, j in T.Parallel(M, N):
        r[i] += a[i, j] * x[j]
    T.finalize_reducer(r)

    r = T.alloc_reducer(M, "float32", op="max")            # the second form: a starting value, a destination
    T.reducer_init(r, init)
    for i, j in T.Parallel(M, N):
        T.reducer_update(r[i], s[i, j])
    T.finalize_reducer(r, dst)

A reducer must start at its operation's identity in every replica (``T.clear`` for sum, ``T.fill`` with -inf for
max, or ``T.reducer_init``, whose `init` is combined once, at the finalize). ``batch`` of ``T.finalize_reducer`` is a
performance hint tilex does not need (every element is combined by one pair of barriers already) and is accepted.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from tilex.ir.visit import BufferLoadNode
from tilex.language.allocate import alloc_fragment
from tilex.language.dtypes import canonical_dtype
from tilex.language.options import as_int, no_annotations
from tilex.op.reducer import KINDS, finalize_call, reducer_combine, reducer_init_marker, reducer_marker

_BITWISE = ("bitand", "bitor", "bitxor")


def alloc_reducer(shape, dtype, op="sum", replication=None):
    """A reducer fragment of `shape` combining with `op` ("sum", "max", "min", "bitand", "bitor", "bitxor");
    `replication` ("all" / "none", TileLang's first form) is accepted: the replicas follow the loop that writes it."""
    if op not in KINDS:
        raise ValueError(f"T.alloc_reducer: op must be one of {KINDS}, got {op!r}")
    dt = canonical_dtype(dtype)
    if op in _BITWISE and not (dt.startswith(("int", "uint")) or dt == "bool"):
        raise TypeError(f"T.alloc_reducer: op '{op}' needs an integer dtype, got {dt}")
    if replication not in (None, "all", "none"):
        raise ValueError(f"T.alloc_reducer: replication must be None, 'all' or 'none', got {replication!r}")
    buf = alloc_fragment(shape, dt)
    _ir.evaluate(reducer_marker(buf, op).value)
    return buf


def _reducer(api, reducer):
    if not tirx.is_buffer_var(reducer):
        raise TypeError(f"{api}: expected a reducer from T.alloc_reducer, got {reducer!r}")
    return reducer


def reducer_init(reducer, init=None, annotations=None):
    """Start `reducer` at its operation's identity in every replica; `init` (a scalar) is combined into each
    element once, at ``T.finalize_reducer``."""
    no_annotations("T.reducer_init", annotations)
    reducer = _reducer("T.reducer_init", reducer)
    dt = str(reducer.dtype)
    if init is not None and not isinstance(init, tvm.ir.Expr):
        init = tirx.const(init, dt)
    elif init is not None and str(init.dtype) != dt:
        init = tirx.Cast(dt, init)
    return reducer_init_marker(reducer, init).value


def reducer_update(element, contribution, annotations=None):
    """``element`` (``r[i]`` of a reducer) combined with `contribution`, in this thread's replica."""
    no_annotations("T.reducer_update", annotations)
    if not isinstance(element, BufferLoadNode):
        raise TypeError(f"T.reducer_update: the first argument must be an element of a reducer, like r[i], got "
                        f"{element!r}")
    dt = str(element.source.dtype)
    value = contribution if isinstance(contribution, tvm.ir.Expr) else tirx.const(contribution, dt)
    if str(value.dtype) != dt:
        value = tirx.Cast(dt, value)
    _ir.buffer_store(element.source, reducer_combine(element, value), list(element.indices))


def finalize_reducer(reducer, dst=None, batch=1, annotations=None):
    """Combine the replicas of `reducer`: into `reducer` itself (every replica then holds the total), or into the
    fragment `dst` of the same shape and dtype, with T.reducer_init's starting value combined once."""
    api = "T.finalize_reducer"
    no_annotations(api, annotations)
    as_int(api, "batch", batch, minimum=1)
    reducer = _reducer(api, reducer)
    if dst is not None and not tirx.is_buffer_var(dst):
        raise TypeError(f"{api}: dst must be a fragment of the reducer's shape, got {dst!r}")
    return finalize_call(reducer, reducer if dst is None else dst)


__all__ = ["alloc_reducer", "reducer_init", "reducer_update", "finalize_reducer"]
