"""Shared-memory accounting: the bytes a kernel's shared buffers take."""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.visit import walk


def buffer_bits(buf) -> int | None:
    """Bits a buffer holds (``None`` when its shape is not constant)."""
    n = 1
    for d in buf.shape:
        try:
            n *= int(d)
        except (TypeError, ValueError):
            return None
    dt = tvm.DataType(str(buf.dtype))
    return n * dt.bits * dt.lanes


def buffer_bytes(buf) -> int | None:
    bits = buffer_bits(buf)
    return None if bits is None else (bits + 7) // 8


def shared_usage(stmt):
    """(``{"dynamic": bytes, "static": bytes}`` of the ``shared.dyn`` / ``shared`` buffers allocated in `stmt`,
    names of those whose shape is not constant)."""
    usage = {"dynamic": 0, "static": 0}
    unknown = []

    def on_alloc(node):
        buf = node.buffer
        scope = str(buf.scope())
        if not scope.startswith("shared"):
            return
        b = buffer_bytes(buf)
        if b is None:
            unknown.append(buf.name)
        else:
            usage["dynamic" if scope == "shared.dyn" else "static"] += b

    walk(stmt, (tirx.AllocBuffer, on_alloc))
    return usage, unknown


def block_footprint(static: int, dynamic: int) -> int:
    """Shared memory bytes a block takes: its static part, then the dynamic part on a 1024-byte boundary
    (`tilex.engine.nvcc.align_dynamic_shared`)."""
    if static and dynamic:
        static = (static + 1023) // 1024 * 1024
    return static + dynamic
