"""GridSync (among TVM's passes, right after SplitHostDevice): kernels that call ``T.sync_grid`` are launched
cooperatively.

Consumes: a module after SplitHostDevice; its device kernels may call ``tilex::sync_grid`` (T.sync_grid: a barrier
across every thread of every block, ``cooperative_groups::this_grid().sync()`` in src/tilex/grid_sync.h).
Produces: each such kernel with TVM's launch tag ``tirx.use_cooperative_launch`` in its launch parameters -- TVM's
CUDA runtime then launches it with the driver's cooperative attribute: every block is resident at once, or the
launch fails (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) instead of hanging on blocks that never get a
multiprocessor -- and the ``#include`` of src/tilex/grid_sync.h (an ``import_source`` marker: cooperative_groups.h
roughly doubles the compile time of a small kernel, so only the kernels that need it include it). Other functions
are returned unchanged.

Checks (ValueError, at compile time):
* every thread of every block must reach each ``T.sync_grid``: one under a condition, or in a loop, that threads or
  blocks may run differently (tilex.transform.block_uniform over the whole grid: no thread or block index, no
  shared memory, no per-thread value) would never complete;
* a grid of constant size must fit the multiprocessors at once: at most as many blocks per multiprocessor as its
  threads, its shared memory and the hardware's block limit allow, times the multiprocessor count
  (tilex.ir.hardware.num_sms: the current GPU's when it is of the target arch). Registers, unknown until ptxas
  has run, are left to the driver's check at launch; so is a grid whose size is only known then.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.hardware import SMEM_PER_SM, SMEM_RESERVED_PER_BLOCK, num_sms
from tilex.ir.names import COOPERATIVE_LAUNCH, KERNEL_LAUNCH_PARAMS
from tilex.ir.shared_memory import block_footprint, shared_usage
from tilex.ir.source import add_location, span_of
from tilex.ir.visit import seq, walk
from tilex.transform.block_uniform import BlockUniformity

__all__ = ["GridSync", "MAX_THREADS_PER_SM", "MAX_BLOCKS_PER_SM", "max_resident_blocks"]

#: threads and blocks one multiprocessor holds at most (sm_80, sm_90, sm_100; smaller GPUs hold fewer, which the
#: driver's check at launch catches): an upper bound, so the compile-time check never refuses a grid that fits
MAX_THREADS_PER_SM = 2048
MAX_BLOCKS_PER_SM = 32


def _uses_grid_sync(body) -> bool:
    found = []
    walk(body, (tirx.Evaluate, lambda e: found.append(e) if intrin.is_call(e, intrin.SYNC_GRID) else None))
    return bool(found)


def _launch_extents(body) -> tuple[list, list]:
    """(block-index extents, thread-index extents) of the kernel body's launch."""
    blocks, threads = [], []

    def on_attr(node):
        if node.attr_key == "thread_extent":
            tag = node.node.thread_tag
            (blocks if tag.startswith("blockIdx") else threads).append(node.value)

    walk(body, (tirx.AttrStmt, on_attr))
    return blocks, threads


def _constant(extents) -> int | None:
    total = 1
    for e in extents:
        if not isinstance(e, tirx.IntImm):
            return None
        total *= int(e.value)
    return total


def max_resident_blocks(threads: int, shared_bytes: int, sms: int) -> int:
    """An upper bound on the blocks of `threads` threads and `shared_bytes` of shared memory that `sms`
    multiprocessors hold at once (registers not counted)."""
    per_sm = min(MAX_BLOCKS_PER_SM, MAX_THREADS_PER_SM // max(1, threads))
    if shared_bytes:
        per_sm = min(per_sm, SMEM_PER_SM // (shared_bytes + SMEM_RESERVED_PER_BLOCK))
    return per_sm * sms


def _check_reached_by_all(body, name: str):
    """ValueError when a T.sync_grid of `body` sits under a condition or in a loop that the threads or blocks of
    the grid may run differently."""
    uni = BlockUniformity(body, across_blocks=True)

    def fail(call, why):
        exc = ValueError(f"T.sync_grid in kernel '{name}' is {why}: every thread of every block must reach a grid "
                         f"barrier (threads or blocks that skip it leave the others waiting forever)")
        raise add_location(exc, span_of(call))

    def visit(stmt, why):
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, why)
        elif isinstance(stmt, tirx.IfThenElse):
            inner = why or (None if uni.uniform(stmt.condition) else
                            f"under the condition `{stmt.condition}`, which threads or blocks may evaluate differently")
            visit(stmt.then_case, inner)
            if stmt.else_case is not None:
                visit(stmt.else_case, inner)
        elif isinstance(stmt, tirx.For):
            visit(stmt.body, why or (f"in the loop over '{stmt.loop_var.name}', whose threads or blocks may run "
                                     f"different iterations" if uni.divergent_loop(stmt) else None))
        elif isinstance(stmt, tirx.While):
            visit(stmt.body, why or (None if uni.uniform(stmt.condition) else
                                     f"in the loop `while {stmt.condition}`, which threads or blocks may leave at "
                                     f"different iterations"))
        elif isinstance(stmt, tirx.Evaluate):
            if why and intrin.is_call(stmt, intrin.SYNC_GRID):
                fail(stmt, why)
        elif hasattr(stmt, "body") and isinstance(stmt.body, tirx.Stmt):
            visit(stmt.body, why)

    visit(body, None)


def _check_resident(func, name: str):
    """ValueError when the grid has a constant size larger than the multiprocessors hold at once."""
    blocks, threads = _launch_extents(func.body)
    grid, block = _constant(blocks), _constant(threads)
    if grid is None or block is None:
        return
    usage, _ = shared_usage(func.body)
    shared = block_footprint(usage["static"], usage["dynamic"])
    target = func.attrs["target"] if "target" in func.attrs else None
    arch = str(target.attrs["arch"]) if target is not None and "arch" in target.attrs else "sm_90a"
    sms = num_sms(arch)
    most = max_resident_blocks(block, shared, sms)
    if grid > most:
        raise ValueError(
            f"T.sync_grid in kernel '{name}': its grid of {grid} blocks cannot be resident at once, which a grid "
            f"barrier needs (the kernel is launched cooperatively): blocks of {block} threads and {shared} bytes of "
            f"shared memory fit at most {most // sms} per multiprocessor, {most} on the {sms} multiprocessors of "
            f"{arch}. Launch at most {most} blocks (a persistent grid: T.Kernel(num_sms * k) with a loop over the "
            f"tiles)")


def _with_cooperative_launch(func):
    params = list(func.attrs[KERNEL_LAUNCH_PARAMS]) if KERNEL_LAUNCH_PARAMS in func.attrs else []
    if COOPERATIVE_LAUNCH not in [str(p) for p in params]:
        func = func.with_attr(KERNEL_LAUNCH_PARAMS, [COOPERATIVE_LAUNCH] + [str(p) for p in params])
    return func.with_body(seq([intrin.grid_sync_include(), func.body]))


def _is_device_kernel(func) -> bool:
    return func.attrs is not None and KERNEL_LAUNCH_PARAMS in func.attrs


@tvm.transform.module_pass(opt_level=0, name="tilex.GridSync")
def GridSync(mod, ctx):  # noqa: N802
    out = None
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc) or not _is_device_kernel(func) or not _uses_grid_sync(func.body):
            continue
        name = gv.name_hint
        _check_reached_by_all(func.body, name)
        _check_resident(func, name)
        out = out or mod.clone()
        out.update_func(gv, _with_cooperative_launch(func))
    return out if out is not None else mod
