"""Block rasterization: ``T.use_swizzle``.

It only leaves a ``tilex.use_swizzle`` marker statement in the body; ``tilex.transform.thread_block_swizzle`` (or,
for a persistent grid, ``tilex.transform.hopper.persistent``) turns it into the remapping of the kernel's block
indices.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from tilex.ir.names import SWIZZLE_ORDERS, USE_SWIZZLE_OP
from tilex.language.options import as_bool

__all__ = ["use_swizzle"]


def use_swizzle(panel_size: int, order: str = "row", enable: bool = True):
    """Rasterize the 2-d grid of blocks in panels so that blocks running at the same time share tiles in L2.

    Write it inside a ``T.Kernel`` body (usually as its first statement). ``blockIdx.x/y`` stay the hardware
    indices; the kernel's block variables (``bx, by``) become a permutation of the grid:

    * ``order="row"``: the grid is cut into panels of ``panel_size`` grid rows (``by`` values); blocks are
      launched panel after panel, and inside a panel column by column (``by`` fastest), alternating the
      column direction from one panel to the next;
    * ``order="column"``: the same with the roles of x and y exchanged (panels of ``panel_size`` grid columns).

    A last panel with fewer rows (columns) is traversed the same way, so every block index is produced exactly
    once. ``enable=False`` keeps the launch order; on a 1-d grid the swizzle is the identity. A kernel without
    ``T.use_swizzle`` gets the panel tilex chooses (``tilex.transform.rasterization``): calling it, with
    ``enable=False`` too, pins the choice.
    """
    if order == "mlx":
        raise NotImplementedError("T.use_swizzle(order='mlx') is not supported by tilex (use 'row' or 'column')")
    if order not in SWIZZLE_ORDERS:
        raise ValueError(f"T.use_swizzle: order must be one of {SWIZZLE_ORDERS}, got {order!r}")
    if isinstance(panel_size, tirx.IntImm):
        panel_size = int(panel_size.value)
    if isinstance(panel_size, (bool, np.bool_)) or not isinstance(panel_size, (int, np.integer)):
        raise TypeError(f"T.use_swizzle: panel_size must be an int, got {panel_size!r}")
    panel = int(panel_size)
    if panel < 1:
        raise ValueError(f"T.use_swizzle: panel_size must be positive, got {panel}")
    if not as_bool("T.use_swizzle", "enable", enable):
        panel = 0  # the launch order, pinned: tilex chooses no rasterization of its own
    return tirx.call_intrin("void", USE_SWIZZLE_OP, panel, SWIZZLE_ORDERS.index(order))
