"""Buffer allocation in tile programs: shared memory, register fragments, per-thread locals."""
from __future__ import annotations

from tvm.tirx.script.builder import ir as _ir

FRAGMENT_SCOPE = "local.fragment"


def alloc_shared(shape, dtype="float16", scope="shared.dyn"):
    """A tile in (dynamic) shared memory, visible to the whole block."""
    return _ir.alloc_buffer(_shape(shape), dtype, scope=scope)


def alloc_fragment(shape, dtype="float32", scope=FRAGMENT_SCOPE):
    """A block-level register tile: its elements are spread over the threads by an inferred Fragment layout."""
    return _ir.alloc_buffer(_shape(shape), dtype, scope=scope)


def alloc_local(shape, dtype="float32", scope="local"):
    """Per-thread registers: every thread has its own copy of the whole buffer."""
    return _ir.alloc_buffer(_shape(shape), dtype, scope=scope)


def alloc_var(dtype="float32", init=None):
    """A per-thread scalar variable (a 1-element local buffer); read and write it as ``x[0]``."""
    buf = _ir.alloc_buffer((1,), dtype, scope="local")
    if init is not None:
        _ir.buffer_store(buf, init, [0])
    return buf


def _shape(shape):
    return (shape,) if not isinstance(shape, (tuple, list)) else tuple(shape)
