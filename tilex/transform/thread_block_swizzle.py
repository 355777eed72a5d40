"""ThreadBlockSwizzle: rasterize the grid of blocks as ``T.use_swizzle(panel_size, order)`` asks.

Consumes: a PrimFunc whose launch scope (the ``thread_extent`` attributes T.Kernel opens) contains a
``tilex.use_swizzle(panel_size, order)`` marker statement (order 0 = "row", 1 = "column"). It may run at any
point of the tile passes; the pipeline runs it after LowerTileOps, so the tile operators are lowered while the
kernel's block variables are still known to lie in their grid ranges (a swizzled index is in range too, which
keeps their bounds checks folded away).
Produces: the same function without the marker, where ``blockIdx.x/y`` are bound to fresh hardware index
variables and the kernel's own block variables (``bx, by``) are defined at the top of the launch scope by
``Bind`` statements from the swizzled mapping below, so every use in the body sees swizzled indices.
``blockIdx.z`` is left alone; on a 1-d grid the marker is simply removed.

Mapping, order "row" (hardware indices ``hx, hy`` of a ``gx x gy`` grid, ``P = panel_size``)::

    lin   = hy * gx + hx                 # launch order: x fastest
    panel = lin // (P * gx)              # panels of P grid rows
    off   = lin %  (P * gx)
    h     = min(P, gy - panel * P)       # rows in this panel (fewer in a last, partial panel)
    by    = panel * P + off % h          # down the panel's rows first ...
    c     = off // h                     # ... then across the columns,
    bx    = c + (panel % 2) * (gx - 1 - 2 * c)   # = c on even panels, gx - 1 - c on odd ones

Panel ``p`` takes the launch indices ``[p * P * gx, p * P * gx + h * gx)`` and hands out each of its
``h x gx`` blocks once, so the mapping is a bijection of the grid. Order "column" exchanges the roles of x and y
(panels of ``P`` grid columns, ``bx`` fastest inside a panel); the launch order itself stays x-fastest.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.names import SWIZZLE_ORDERS, USE_SWIZZLE_OP
from tilex.ir.visit import is_op_call, mutate, seq_items, walk
from tilex.transform.kernel_scope import launch_chain


def _marker(stmt):
    """(panel_size, order name) if `stmt` is a use_swizzle marker, else None."""
    if isinstance(stmt, tirx.Evaluate) and is_op_call(stmt.value, USE_SWIZZLE_OP):
        panel, order = stmt.value.args
        return int(panel.value), SWIZZLE_ORDERS[int(order.value)]
    return None


def swizzled_block_index(hx, hy, gx, gy, panel_size, order="row"):
    """(bx, by) as expressions of the hardware block indices ``hx, hy`` of a ``gx x gy`` grid (module docstring).

    ``gx, gy`` may be ints or PrimExprs. The expressions are not simplified.
    """
    if order not in SWIZZLE_ORDERS:
        raise ValueError(f"swizzle order must be one of {SWIZZLE_ORDERS}, got {order!r}")
    dtype = hx.ty.dtype if hasattr(hx, "ty") else hx.dtype

    def c(x):
        return tirx.const(x, dtype) if isinstance(x, int) else x

    gx, gy, p = c(gx), c(gy), c(int(panel_size))
    lin = hy * gx + hx
    if order == "row":
        major, minor_extent = gy, gx  # panels cut across y; inside a panel y runs fastest
    else:
        major, minor_extent = gx, gy
    span = p * minor_extent
    panel = tirx.floordiv(lin, span)
    off = tirx.floormod(lin, span)
    height = tirx.min(p, major - panel * p)
    fast = panel * p + tirx.floormod(off, height)
    slow = tirx.floordiv(off, height)
    # serpentine: odd panels run backwards. Written as arithmetic rather than a select: nvcc turns a select here
    # into two copies of the kernel tail, and ptxas (CUDA 13.0) then hoisted an accumulator read above the
    # wgmma wait in one copy (wrong results measured on the H200)
    slow = slow + tirx.floormod(panel, 2) * (minor_extent - 1 - slow * 2)
    return (slow, fast) if order == "row" else (fast, slow)


def drop_markers(stmt):
    """`stmt` without its T.use_swizzle markers."""
    def on_seq(seq, m):
        items = [m.mutate(s) for s in seq.seq if _marker(s) is None]
        if not items:
            return tirx.Evaluate(0)
        return items[0] if len(items) == 1 else tirx.SeqStmt(items)

    def on_eval(node, m):
        return tirx.Evaluate(0) if _marker(node) is not None else node

    return mutate(stmt, [(tirx.SeqStmt, on_seq), (tirx.Evaluate, on_eval)])


def find_markers(stmt):
    """The (panel_size, order) of every T.use_swizzle marker in `stmt`."""
    found = []
    walk(stmt, (tirx.Evaluate, lambda n: found.append(_marker(n)) if _marker(n) else None))
    return found


def _rewrite_launch(attr, panel_size, order):
    chain = launch_chain(attr)
    ivs = {a.node.thread_tag: a for a in chain}
    body = drop_markers(chain[-1].body)
    if "blockIdx.x" not in ivs or "blockIdx.y" not in ivs:
        new_body = body  # 1-d grid: nothing to rasterize
        new_ivs = {}
    else:
        new_ivs, ranges = {}, {}
        for tag in ("blockIdx.x", "blockIdx.y"):
            a = ivs[tag]
            old = a.node
            hw = tirx.Var(tag.replace(".", "_"), old.var.ty.dtype)
            new_ivs[tag] = tirx.IterVar(old.dom, hw, old.iter_type, old.thread_tag)
            ranges[tag] = (hw, a.value)
        (hx, gx), (hy, gy) = ranges["blockIdx.x"], ranges["blockIdx.y"]
        bx_val, by_val = swizzled_block_index(hx, hy, gx, gy, panel_size, order)
        ana = tvm.sym.Analyzer()
        ana.bind(hx, tvm.ir.Range.from_min_extent(0, gx))
        ana.bind(hy, tvm.ir.Range.from_min_extent(0, gy))
        bx, by = ivs["blockIdx.x"].node.var, ivs["blockIdx.y"].node.var
        binds = [tirx.Bind(bx, ana.simplify(bx_val)), tirx.Bind(by, ana.simplify(by_val))]
        rest = seq_items(body)
        new_body = tirx.SeqStmt(binds + rest)
    for a in reversed(chain):
        iv = new_ivs.get(a.node.thread_tag, a.node)
        new_body = tirx.AttrStmt(iv, a.attr_key, a.value, new_body)
    return new_body


def thread_block_swizzle(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Apply the ``T.use_swizzle`` markers of `func` (see the module docstring); a function without one is
    returned unchanged."""
    markers = find_markers(func.body)
    if not markers:
        return func
    if len(set(markers)) > 1:
        raise ValueError(f"conflicting T.use_swizzle calls in one kernel: {sorted(set(markers))}")
    panel_size, order = markers[0]
    if panel_size == 0:  # T.use_swizzle(enable=False): the launch order
        return func.with_body(drop_markers(func.body))

    def on_attr(node, m):
        if node.attr_key != "thread_extent":
            body = m.mutate(node.body)
            return node if body.same_as(node.body) else tirx.AttrStmt(node.node, node.attr_key, node.value, body)
        if not find_markers(node):
            return node
        return _rewrite_launch(node, panel_size, order)

    body = mutate(func.body, (tirx.AttrStmt, on_attr))
    if find_markers(body):
        raise ValueError("T.use_swizzle must be called inside a T.Kernel launch scope")
    return func.with_body(body)

