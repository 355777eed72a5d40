"""`T.Kernel`: the launch frame of a tile program (grid of blocks x threads per block)."""
from __future__ import annotations

from tvm.tirx.script.builder import ir as _ir

_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class Kernel:
    """`with T.Kernel(gx, gy, threads=128) as (bx, by):` opens blockIdx/threadIdx launch scopes.

    The frame yields the block indices (one Var for a 1-D grid, a tuple otherwise), like TileLang.
    `threads` is an int or a tuple of up to three ints (threadIdx.x/y/z).
    """

    def __init__(self, *grid, threads=128, prelude=None):
        if not grid:
            raise ValueError("T.Kernel needs at least one grid dimension")
        if len(grid) > 3:
            raise ValueError(f"T.Kernel supports up to 3 grid dimensions, got {len(grid)}")
        if isinstance(threads, int):
            threads = (threads,)
        threads = tuple(threads)
        if not 1 <= len(threads) <= 3:
            raise ValueError(f"T.Kernel threads must have 1-3 dimensions, got {threads}")
        total = 1
        for t in threads:
            if not isinstance(t, int) or t <= 0:
                raise ValueError(f"T.Kernel threads must be positive ints, got {threads}")
            total *= t
        if total > 1024:
            raise ValueError(f"T.Kernel: {total} threads per block exceeds the CUDA limit of 1024")
        if prelude is not None:
            raise NotImplementedError("T.Kernel(prelude=...) is not supported yet")
        self.grid = grid
        self.threads = threads
        self._frames = []

    def __enter__(self):
        block_vars = []
        for tag, ext in zip(_BLOCK_TAGS, self.grid):
            frame = _ir.launch_thread(tag, ext)
            block_vars.append(frame.__enter__())
            self._frames.append(frame)
        for tag, ext in zip(_THREAD_TAGS, self.threads):
            frame = _ir.launch_thread(tag, ext)
            frame.__enter__()
            self._frames.append(frame)
        return block_vars[0] if len(block_vars) == 1 else tuple(block_vars)

    def __exit__(self, *exc):
        for frame in reversed(self._frames):
            frame.__exit__(*exc)
        self._frames = []
