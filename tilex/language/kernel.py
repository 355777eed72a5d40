"""`T.Kernel`: the launch frame of a tile program (grid of blocks x threads per block)."""
from __future__ import annotations

from tvm.tirx.script.builder import ir as _ir

from tilex.ir.visit import storage_sync
from tilex.language.options import constant, positive_extents

_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class Kernel:
    """`with T.Kernel(gx, gy, threads=128) as (bx, by):` opens blockIdx/threadIdx launch scopes.

    The frame yields the block indices (one Var for a 1-D grid, a tuple otherwise), like TileLang.
    `threads` is an int or a tuple of up to three ints (threadIdx.x/y/z).
    """

    def __init__(self, *grid, threads=None, prelude=None):
        if not grid:
            raise ValueError("T.Kernel needs at least one grid dimension")
        if len(grid) > 3:
            raise ValueError(f"T.Kernel supports up to 3 grid dimensions, got {len(grid)}")
        positive_extents("T.Kernel", "grid dimensions", grid)
        if threads is None:
            threads = 128  # TileLang's default
        threads = tuple(threads) if isinstance(threads, (tuple, list)) else (threads,)
        if not 1 <= len(threads) <= 3:
            raise ValueError(f"T.Kernel threads must have 1-3 dimensions, got {threads}")
        total = 1
        for t in threads:
            t = constant(t)
            if isinstance(t, bool) or not isinstance(t, int) or t <= 0:
                raise ValueError(f"T.Kernel threads must be positive ints, got {threads}")
            total *= t
        threads = tuple(int(constant(t)) for t in threads)
        if total > 1024:
            raise ValueError(f"T.Kernel: {total} threads per block exceeds the CUDA limit of 1024")
        if len(threads) == 3 and threads[2] > 64:
            raise ValueError(f"T.Kernel: threads[2] = {threads[2]} exceeds the CUDA limit of 64 for threadIdx.z")
        if prelude is not None:
            raise NotImplementedError(f"T.Kernel(prelude={prelude!r}) is not supported by tilex (leave prelude at its "
                                      f"default)")
        self.grid = grid
        self.threads = threads
        self._frames = []
        self.thread_vars = []

    def __enter__(self):
        block_vars = []
        for tag, ext in zip(_BLOCK_TAGS, self.grid):
            frame = _ir.launch_thread(tag, ext)
            block_vars.append(frame.__enter__())
            self._frames.append(frame)
        for tag, ext in zip(_THREAD_TAGS, self.threads):
            frame = _ir.launch_thread(tag, ext)
            self.thread_vars.append(frame.__enter__())
            self._frames.append(frame)
        _OPEN.append(self)
        return block_vars[0] if len(block_vars) == 1 else tuple(block_vars)

    def __exit__(self, *exc):
        _OPEN.remove(self)
        for frame in reversed(self._frames):
            frame.__exit__(*exc)
        self._frames = []
        self.thread_vars = []


#: the T.Kernel frames being parsed, innermost last
_OPEN: list = []


def get_thread_binding(dim=0):
    """The thread index (threadIdx.x for `dim` 0, .y, .z) of the enclosing T.Kernel, as in TileLang."""
    if not _OPEN:
        raise ValueError("T.get_thread_binding() is only valid inside `with T.Kernel(...)`")
    tv = _OPEN[-1].thread_vars
    if not 0 <= dim < len(tv):
        raise ValueError(f"T.get_thread_binding({dim}): the kernel has {len(tv)} thread dimension(s)")
    return tv[dim]


def sync_threads():
    """A barrier across the block (``__syncthreads()``), as in TileLang. Shared-memory dependencies get their
    barriers automatically; this orders what they do not cover, such as global writes before a flag."""
    return storage_sync().value
