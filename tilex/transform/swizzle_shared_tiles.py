"""SwizzleSharedTiles (in place of a plain LowerTileOps call): shared tiles that only plain loads and stores touch
get the swizzle under which the bank-conflict model finds the fewest conflicts.

Consumes: a PrimFunc annotated by LayoutInference.
Produces: the function lowered by LowerTileOps. When a shared tile has no layout of its own (row-major: no gemm,
TMA or T.annotate_layout laid it out), only T.Parallel loops and copies without cp.async touch it, and the model
(`tilex.layout.banks.bank_conflicts`, on warp 0 of the lowered code) counts conflicts on it that some
``Swizzle<B, M, S>`` lessens, the function is lowered again with that swizzle as the tile's layout (kept only when
the model agrees it helps; ``tilex.disable_bank_swizzle`` turns this off). Why there: the swizzle depends on the
accesses the lowering chose (vector widths, thread order), which exist only after it.
"""
from __future__ import annotations

import tvm

from tilex import config
from tilex.ir.names import LAYOUT_MAP_ATTR
from tilex.layout.banks import bank_conflicts
from tilex.layout.codec import encode
from tilex.op.base import is_shared
from tilex.op.copy import CopyOp
from tilex.op.parallel import ParallelOp
from tilex.transform.lower_tile_ops import lower_tile_ops
from tilex.transform.op_collect import collect_tile_ops, collect_views


def lower_with_swizzles(func, target=None):
    """The pass (see the module docstring)."""
    lowered = lower_tile_ops(func, target)
    if config.get("disable_bank_swizzle", False):
        return lowered
    tiles = _plain_tiles(func)
    if not tiles:
        return lowered
    report = bank_conflicts(lowered)
    chosen = {}
    for name, r in report.items():
        buf = tiles.get(name)
        if buf is not None and r["swizzle"].bits and r["after"] < r["ld"] + r["st"]:
            elem = tvm.DataType(str(buf.dtype)).bits // 8
            try:
                chosen[buf] = r["swizzle"].layout(buf.shape, elem)
            except ValueError:
                continue  # the tile is not a whole number of the swizzle's blocks
    if not chosen:
        return lowered
    layouts = dict(func.attrs[LAYOUT_MAP_ATTR]) if LAYOUT_MAP_ATTR in func.attrs else {}
    layouts.update({b: encode(lay) for b, lay in chosen.items()})
    swizzled = lower_tile_ops(func.with_attr(LAYOUT_MAP_ATTR, layouts), target)
    after = bank_conflicts(swizzled)
    before_total = sum(report[b.name]["ld"] + report[b.name]["st"] for b in chosen)
    after_total = sum(after[b.name]["ld"] + after[b.name]["st"] for b in chosen if b.name in after)
    return swizzled if after_total < before_total else lowered


def _plain_tiles(func):
    """{name: buffer} of the shared tiles without a layout that only T.Parallel loops and synchronous copies use
    (named uniquely: the model reports by name), T.view-ed tiles and their views left out."""
    laid = set(func.attrs[LAYOUT_MAP_ATTR].keys()) if func.attrs is not None and LAYOUT_MAP_ATTR in func.attrs \
        else set()
    laid |= {b for _, view in collect_views(func.body) for b in view.buffers()}  # one layout for a tile and its views
    users = {}
    for _, op in collect_tile_ops(func.body):
        for b in op.buffers():
            if is_shared(b):
                users.setdefault(b, []).append(op)
    names = {}
    for b, ops in users.items():
        names.setdefault(b.name, []).append(b)
    out = {}
    for b, ops in users.items():
        plain = all(isinstance(op, ParallelOp) or (isinstance(op, CopyOp) and not op.is_async) for op in ops)
        if plain and b not in laid and len(names[b.name]) == 1 and len(b.shape) >= 1:
            out[b.name] = b
    return out
