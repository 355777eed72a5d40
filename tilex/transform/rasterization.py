"""ChooseRasterization (tile level, after StageEpilogue, before LayoutInference): a kernel without a
``T.use_swizzle`` gets the rasterization panel that makes the blocks running at the same time read the fewest
bytes.

Consumes: a tile program after pipelining, whose 2-d static grid has more blocks than run at once. A
``T.use_swizzle`` marker (``enable=False`` leaves one of panel 0) pins the user's choice and the pass does nothing.
Produces: the program with a ``tilex.use_swizzle(P, "row")`` marker at the top of its launch scope (consumed by
ThreadBlockSwizzle, or by PersistentTiles on a persistent grid) and the function attribute ``tilex.rasterization``
saying why; unchanged when rasterizing does not pay.

The rule: the tile operators' global reads split into bytes per block that depend on ``by`` only (``a``: the A
tile of a GEMM) and on ``bx`` only (``b``: the B tile). ``W`` blocks run at once (multiprocessors x resident blocks
per multiprocessor, `occupancy`); in panels of ``P`` grid rows a wave covers about ``P`` rows and ``W / P`` columns
and reads ``P * a + (W / P) * b``, least at ``P = sqrt(W * b / a)``. P is rounded to an even count (clusters pair
rows) between 2 and the grid's height; a panel as high as the grid is the launch order already.
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.ir import Op

from tilex.ir.names import RASTERIZATION_ATTR, REGION_OP, USE_SWIZZLE_OP
from tilex.ir.visit import free_vars, seq_items, walk
from tilex.op.base import is_global
from tilex.op.region import READ
from tilex.transform.hopper.occupancy import multiprocessors, tile_program_blocks_per_sm
from tilex.transform.hopper.ws_decision import has_ws_producer
from tilex.transform.kernel_scope import kernel_info, outer_launch_chain, with_launch_items
from tilex.transform.thread_block_swizzle import find_markers


def choose_rasterization(func, target):
    """The pass (see the module docstring); `func` unchanged when it does not apply."""
    info = kernel_info(func)
    chain = outer_launch_chain(func.body)
    if info is None or chain is None or find_markers(func.body):
        return func
    grid = {a.node.thread_tag: a for a in chain if a.node.thread_tag.startswith("blockIdx")}
    if set(grid) != {"blockIdx.x", "blockIdx.y"} or not all(isinstance(a.value, tirx.IntImm) for a in grid.values()):
        return func
    gx, gy = (int(grid[t].value.value) for t in ("blockIdx.x", "blockIdx.y"))
    a, b = _bytes_by_axis(func.body, grid["blockIdx.x"].node.var, grid["blockIdx.y"].node.var)
    if not a or not b:
        return func
    items = seq_items(chain[-1].body)
    per_sm = (tile_program_blocks_per_sm(func.body, info.threads) or 1) if has_ws_producer(items) else 1
    wave = multiprocessors(target) * per_sm
    if gx * gy <= wave:
        return func
    panel = max(2, 2 * round(math.sqrt(wave * b / a) / 2))
    if panel >= gy:
        return func
    marker = tirx.Evaluate(tirx.call_intrin("void", USE_SWIZZLE_OP, panel, 0))
    note = (f"panel {panel} (row): {wave} blocks at once read {a} bytes per grid row and {b} per grid column "
            f"of a {gx} x {gy} grid")
    return with_launch_items(func, chain, [marker] + items).with_attr(RASTERIZATION_ATTR, note)


def _bytes_by_axis(body, bx, by):
    """(bytes of the global tiles read that depend on `by` only, on `bx` only), over every tile operator."""
    totals = {"y": 0, "x": 0}
    region = Op.get(REGION_OP)

    def on_call(call):
        if not call.op.same_as(region) or not int(call.args[1].value) & READ:
            return
        load = call.args[0]
        buf = load.source
        if not is_global(buf):
            return
        used = set()
        for m in load.indices:
            used |= free_vars(m)
        on_x, on_y = bx in used, by in used
        if on_x == on_y:
            return
        n = 1
        for e in call.args[2:]:
            if not isinstance(e, tirx.IntImm):
                return
            n *= int(e.value)
        totals["x" if on_x else "y"] += n * tvm.DataType(str(buf.dtype)).bits // 8

    walk(body, (tvm.ir.Call, on_call))
    return totals["y"], totals["x"]
