"""Shared-memory accounting: the bytes a kernel's shared buffers take and what one block may use per arch."""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex._tir import walk

#: Opt-in shared memory per block (bytes) by compute capability ``(major, minor)``, from the CUDA programming
#: guide's table of technical specifications.
ARCH_SMEM_LIMITS = {
    (7, 0): 96 * 1024, (7, 5): 64 * 1024,
    (8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 7): 163 * 1024, (8, 9): 99 * 1024,
    (9, 0): 227 * 1024,
    (10, 0): 227 * 1024, (10, 3): 227 * 1024, (11, 0): 227 * 1024,
    (12, 0): 99 * 1024, (12, 1): 99 * 1024,
}


def arch_shared_memory_limit(arch: str) -> int | None:
    """Opt-in shared memory per block for an arch like ``"sm_90a"`` (``None`` if unknown)."""
    from tilex import env

    digits = env.normalize_arch(arch)[3:].rstrip("af")
    return ARCH_SMEM_LIMITS.get((int(digits[:-1]), int(digits[-1])))


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
