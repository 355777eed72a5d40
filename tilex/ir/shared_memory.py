"""Shared-memory accounting: the bytes a kernel's shared buffers take, and the report of a block whose shared memory
does not fit (its largest tiles, what tilex added to the tiles the program declared)."""
from __future__ import annotations

import contextlib
import contextvars

import tvm
from tvm import tirx

from tilex.ir.names import SHARED_USED_BYTES
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


def used_bytes(alloc) -> int | None:
    """The bytes the tile of AllocBuffer statement `alloc` uses: its buffer's, or less where LowerTileOps padded it
    to whole KB (the ``tilex.used_bytes`` annotation); ``None`` when its shape is not constant."""
    used = alloc.annotations.get(SHARED_USED_BYTES) if alloc.annotations is not None else None
    return int(used) if used is not None else buffer_bytes(alloc.buffer)


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


# ---- the report of a block whose shared memory does not fit ---------------------------------------------------------

#: how every such report starts (``tilex.engine.build`` finds it in TVM's error and gives it back as a ValueError)
SHARED_ERROR = "tilex: shared memory"

#: tiles tilex allocates itself, by the name it gives them, and why
_ADDED = (("red_ws", "cross-warp reduction workspace"), ("scan_ws", "scan workspace"),
          ("_exchange", "layout conversion through shared memory"),
          ("_stage", "staging tile of a TMA store / reduction"), ("stage", "staged epilogue tile"),
          ("tma_full", "TMA pipeline mbarriers"), ("tma_empty", "TMA pipeline mbarriers"))

#: smaller shared arrays (mbarriers) are left out of the report
_LISTED = 256

_DECLARED = contextvars.ContextVar("tilex_declared_tiles", default=None)


@contextlib.contextmanager
def declared_tiles(func):
    """While `func` (a tile program, as written) is lowered: the bytes of the shared tiles and the names of the
    fragments its author declared, which :func:`shortfall_message` compares with the tiles the kernel ended up
    with (pipeline stages, padding, tiles tilex added)."""
    shared, fragments = {}, set()

    def on_alloc(node):
        buf = node.buffer
        scope = str(buf.scope())
        if scope.startswith("shared"):
            shared[buf.name] = buffer_bytes(buf)
        elif scope == "local.fragment":
            fragments.add(buf.name)

    walk(func.body, (tirx.AllocBuffer, on_alloc))
    token = _DECLARED.set((shared, fragments))
    try:
        yield
    finally:
        _DECLARED.reset(token)


def _kb(nbytes: int) -> str:
    return f"{nbytes / 1024:.1f} KB" if nbytes >= 1024 else f"{nbytes} B"


def _origin(name: str, nbytes: int) -> tuple[bool, str]:
    """(whether tilex added to what the program declared, how) for a lowered tile of `nbytes` named `name`."""
    known = _DECLARED.get()
    shared, fragments = known or ({}, set())
    declared = shared.get(name)
    if declared:
        for stages in range(1, 9):
            if stages * declared == nbytes:
                return stages > 1, f"{stages} pipeline stages of {_kb(declared)}" if stages > 1 else ""
        for stages in range(1, 9):
            if (stages * declared + 1023) // 1024 * 1024 == nbytes:
                what = f"{stages} pipeline stages of {_kb(declared)}" if stages > 1 else _kb(declared)
                return True, f"{what}, padded to whole KB beside 1 KB-aligned swizzled tiles"
        return False, ""
    if name in fragments:
        return True, "a fragment tilex carries through shared memory"
    for suffix, what in _ADDED:
        if name.endswith(suffix):
            return True, what
    return known is not None, ""  # not in the program as written: tilex's


def shortfall_message(total: int, limit: int, arch: int, tiles, shared_total: int | None = None,
                      why_not_shared: str = "") -> str:
    """The error for a block whose shared memory (`total` bytes, 1 KB alignment pad included) exceeds `limit`:
    the first line says so; the next ones list the largest tiles (`tiles`: (name, bytes) of every shared
    allocation), what tilex added to the tiles the program declared (pipeline stages, padding, workspaces, staging
    tiles), and, given `shared_total`, what letting tiles whose lifetimes do not overlap share memory still needs
    (or, given `why_not_shared`, why they could not)."""
    lines = [f"{SHARED_ERROR} of one block is {total} bytes ({total / 1024:.1f} KB), more than the {limit} bytes an "
             f"sm_{arch} multiprocessor offers; use fewer pipeline stages or smaller tiles"]
    tiles = sorted((t for t in tiles if t[1] >= _LISTED), key=lambda t: -t[1])
    if tiles:
        largest = [f"{name} {_kb(n)}" for name, n in tiles[:6]]
        more = f" (+{len(tiles) - 6} more)" if len(tiles) > 6 else ""
        lines.append(f"  largest tiles: {', '.join(largest)}{more}")
        added = {}
        for name, n in tiles:
            is_added, what = _origin(name, n)
            if is_added:
                added[(name, n, what)] = added.get((name, n, what), 0) + 1
        if added:
            items = [f"{name} {_kb(n)}{f' x{k}' if k > 1 else ''}{f' ({what})' if what else ''}"
                     for (name, n, what), k in added.items()]
            lines.append(f"  added by tilex: {'; '.join(items)}")
    if shared_total is not None:
        lines.append(f"  with tiles whose lifetimes do not overlap sharing memory: still {shared_total} bytes "
                     f"({shared_total / 1024:.1f} KB)")
    elif why_not_shared:
        lines.append(f"  tiles sharing memory: not here, {why_not_shared}")
    return "\n".join(lines)


def shortfall_report(error_text: str) -> str:
    """The :func:`shortfall_message` inside `error_text` (an error TVM's pass manager wrapped: its traceback
    around the message dropped)."""
    lines = error_text[error_text.index(SHARED_ERROR):].splitlines()
    report = [lines[0]]
    for line in lines[1:]:
        if not line.startswith("  ") or line.startswith("  File"):
            break
        report.append(line)
    return "\n".join(report)
