"""Buffer allocation in tile programs: shared memory, register fragments, per-thread locals."""
from __future__ import annotations

from tvm import tirx
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
    """A per-thread scalar variable: ``acc = T.alloc_var("float32", 0.0)``, then ``acc = acc + x`` (TVMScript
    scalar; stored as a 1-element local buffer)."""
    var = _ir.alloc_scalar(dtype, scope="local")
    if init is not None:
        value = tirx.const(init, dtype) if isinstance(init, (int, float)) else init
        _ir.buffer_store(var.source if hasattr(var, "source") else var, value, [0])
    return var


def _shape(shape):
    return (shape,) if not isinstance(shape, (tuple, list)) else tuple(shape)
