"""`T.Kernel`: the launch frame of a tile program (grid of blocks x threads per block), the frames being parsed
(:func:`current_kernel`), statements that belong in the next kernel body (:func:`in_kernel`), and the block
barrier ``T.sync_threads``."""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import is_prim_expr
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as _ir

from tilex.ir import intrin
from tilex.ir.visit import dtype_of, storage_sync
from tilex.language.options import as_int, constant, positive_extents

_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class Kernel:
    """`with T.Kernel(gx, gy, threads=128) as (bx, by):` opens blockIdx/threadIdx launch scopes.

    The frame yields the block indices (one Var for a 1-D grid, a tuple otherwise), like TileLang.
    `threads` is an int or a tuple of up to three ints (threadIdx.x/y/z).
    `prelude` is CUDA text written before the module's kernels (as ``T.import_source(prelude)`` in the body).
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
        if prelude is not None and not isinstance(prelude, str):
            raise TypeError(f"T.Kernel: prelude must be a str of CUDA code, got {type(prelude).__name__}")
        self.prelude = prelude if prelude and prelude.strip() else None
        self.grid = grid
        self.threads = threads
        self._frames = []
        self.block_vars = []
        self.thread_vars = []
        self.rng_state = None  # the generator state of the latest T.rng_init (language/random.py)

    @property
    def num_threads(self) -> int:
        """Threads per block."""
        total = 1
        for t in self.threads:
            total *= t
        return total

    def __enter__(self):
        for tag, ext in zip(_BLOCK_TAGS, self.grid):
            frame = _ir.launch_thread(tag, ext)
            self.block_vars.append(frame.__enter__())
            self._frames.append(frame)
        for tag, ext in zip(_THREAD_TAGS, self.threads):
            frame = _ir.launch_thread(tag, ext)
            self.thread_vars.append(frame.__enter__())
            self._frames.append(frame)
        _OPEN.append(self)
        builder = IRBuilder.current()
        for owner, stmt in _PENDING:
            if owner.same_as(builder):
                _ir.evaluate(stmt.value)
        _PENDING.clear()
        if self.prelude is not None:
            _ir.evaluate(intrin.import_source(self.prelude).value)
        block_vars = self.block_vars
        return block_vars[0] if len(block_vars) == 1 else tuple(block_vars)

    def __exit__(self, *exc):
        _OPEN.remove(self)
        for frame in reversed(self._frames):
            frame.__exit__(*exc)
        self._frames = []
        self.block_vars = []
        self.thread_vars = []

    def block_index(self, dim: int):
        """blockIdx of dimension `dim` (0..2): the frame's variable, or 0 for a dimension the grid does not have."""
        return self.block_vars[dim] if dim < len(self.block_vars) else tirx.const(0, "int32")

    def thread_index(self, dim: int):
        """threadIdx of dimension `dim` (0..2): the frame's variable, or 0 for a dimension the block does not
        have (its extent is 1)."""
        return self.thread_vars[dim] if dim < len(self.thread_vars) else tirx.const(0, "int32")

    def linear_thread_index(self):
        """``threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y``."""
        index, stride = self.thread_vars[0], 1
        for dim in range(1, len(self.thread_vars)):
            stride *= self.threads[dim - 1]
            index = index + self.thread_vars[dim] * stride
        return index


#: the T.Kernel frames being parsed, innermost last
_OPEN: list = []
#: (IRBuilder, statement) written before any T.Kernel of the program being parsed: the next T.Kernel of that
#: program puts them first in its body (launch markers must be device code)
_PENDING: list = []


def current_kernel(api: str) -> Kernel:
    """The innermost T.Kernel being parsed; ValueError naming `api` outside one."""
    if not _OPEN:
        raise ValueError(f"{api} is only valid inside `with T.Kernel(...)`")
    return _OPEN[-1]


def in_kernel(stmt: tirx.Evaluate):
    """The call of `stmt` (a device statement: a launch or signature marker) as the expression a frontend
    function returns inside a T.Kernel; outside one (before ``with T.Kernel``, as TileLang allows for
    annotations) it is kept for the program's next T.Kernel, which writes it first in its body, and None is
    returned."""
    if _OPEN:
        return stmt.value
    _PENDING.append((IRBuilder.current(), stmt))
    return None


def launch_dim(api: str, dim) -> int:
    """`dim` (0, 1 or 2: x, y, z) checked; ValueError naming `api` otherwise."""
    d = as_int(api, "dim", dim)
    if not 0 <= d <= 2:
        raise ValueError(f"{api}: dim must be 0, 1 or 2 (x, y, z), got {d}")
    return d


def get_thread_binding(dim=0):
    """The thread index (threadIdx.x for `dim` 0, .y, .z) of the enclosing T.Kernel, as in TileLang; 0 for a
    dimension the block does not have (its extent is 1)."""
    api = f"T.get_thread_binding({dim})"
    return current_kernel(api).thread_index(launch_dim(api, dim))


#: the named barrier ids of the hardware (bar.sync 0..15); 0 is the one __syncthreads() uses
NAMED_BARRIERS = 16


def sync_threads(barrier_id=None, arrive_count=None):
    """A barrier across the block, as in TileLang.

    ``T.sync_threads()`` is ``__syncthreads()``. Shared-memory dependencies get their barriers automatically; this
    orders what they do not cover, such as global writes before a flag. ``T.sync_threads(id)`` waits on named
    barrier `id` (0..15) for every thread of the block (``bar.sync id``); ``T.sync_threads(id, count)`` waits
    until `count` threads (whole warps: a multiple of 32) have reached barrier `id` (``bar.sync id, count``), so
    the warps of one role meet while the others go on. Warp-specialized kernels use named barriers 1..3 themselves.
    """
    if barrier_id is None:
        if arrive_count is not None:
            raise TypeError("T.sync_threads: arrive_count needs a barrier_id (T.sync_threads(barrier_id, count))")
        return storage_sync().value
    api = "T.sync_threads"
    bar = integer_arg(api, "barrier_id", barrier_id)
    if isinstance(bar, int):
        bar = as_int(api, "barrier_id", bar, minimum=0, maximum=NAMED_BARRIERS - 1)
    if arrive_count is None:
        return intrin.bar_sync(bar).value
    count = integer_arg(api, "arrive_count", arrive_count)
    if isinstance(count, int):
        count = as_int(api, "arrive_count", count, minimum=32)
        if count % 32:
            raise ValueError(f"{api}: arrive_count must be a multiple of 32 (whole warps), got {count}")
        if _OPEN and count > _OPEN[-1].num_threads:
            raise ValueError(f"{api}: arrive_count {count} is more than the block's {_OPEN[-1].num_threads} "
                             f"threads")
    return intrin.named_barrier_wait(bar, count).value


def integer_arg(api: str, name: str, value):
    """`value` as a Python int when it is a constant (an ``IntImm`` included), else the integer expression
    itself; TypeError naming `api` and `name` for anything else (a bool, a float, a float expression)."""
    v = constant(value)
    if isinstance(v, bool) or isinstance(v, float):
        raise TypeError(f"{api}: {name} must be an int or an integer expression, got {value!r}")
    if isinstance(v, int):
        return v
    if is_prim_expr(value) and tvm.DataType(dtype_of(value)).type_code in (tvm.DataTypeCode.INT,
                                                                        tvm.DataTypeCode.UINT):
        return value
    raise TypeError(f"{api}: {name} must be an int or an integer expression, got {value!r}")
