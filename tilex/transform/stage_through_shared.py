"""StageThroughShared (tile level, after RegisterOperand, before InjectSoftwarePipeline): a register fragment whose
operators want different layouts, and that only carries a tile from the one operator writing it to the ones
reading it, becomes a shared tile.

Consumes: a tile program. A trial layout inference finds the conflicts (`tilex.transform.layout_inference`); a
conflicted fragment is staged when one operator writes it, every operator using it takes a shared operand as well
(copies, T.Parallel loops, a gemm's A or B) and its two layouts put elements in different threads.
Produces: the program with each such fragment allocated in shared memory instead, before pipelining, so that a
copy from global memory into it is pipelined like any shared tile (a gemm lays it out, or SwizzleSharedTiles
swizzles it against bank conflicts). One LayoutConversionWarning per staged fragment.

Why: the conflict's other remedy, converting the fragment around one operator (what LayoutInference does for the
conflicts left), stores and loads the tile through shared memory on top of the register traffic; staging does only
the shared-memory part, as a user writing the program by hand would (the three programs of
examples/layout_conflicts.py; their timings are in benchmarks/README.md). Conflicts involving pinned layouts, views
or accumulators are left to LayoutInference.
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir.source import warn_at
from tilex.ir.visit import substitute
from tilex.layout.convert import in_same_threads
from tilex.op.base import LayoutConversionWarning
from tilex.transform.kernel_scope import kernel_info
from tilex.transform.layout_inference import infer_layouts, pinned_layouts
from tilex.transform.op_collect import collect_tile_ops, collect_views


def stage_through_shared(func, target):
    """The pass (see the module docstring); `func` unchanged when no fragment qualifies."""
    info = kernel_info(func)
    if info is None:
        return func
    found = collect_tile_ops(func.body)
    if not found:
        return func
    views = collect_views(func.body)
    pinned = pinned_layouts(func.body)
    conflicts = []
    try:
        infer_layouts([op for _, op in found] + [op for _, op in views], info.threads, target=target,
                      pinned=pinned, conflicts=conflicts, stmts={id(op): stmt for stmt, op in found})
    except (ValueError, TypeError, NotImplementedError):
        return func  # LayoutInference reports the program's error where it belongs
    viewed = {b for _, v in views for b in v.buffers()}
    users = {}
    for _, op in found:
        for b in op.buffers():
            users.setdefault(b, []).append(op)
    staged = {}
    for c in conflicts:
        b = c.buffer
        if b in staged or b in pinned or b in viewed or _moves_in_registers(c):
            continue
        ops = users.get(b, [])
        if sum(1 for op in ops if op.reads_writes(b)[1]) != 1 or not all(op.takes_shared(b) for op in ops):
            continue
        staged[b] = (tirx.decl_buffer(list(b.shape), str(b.dtype), b.name, scope="shared.dyn"), c)
    if not staged:
        return func
    for b, (_, c) in staged.items():
        warn_at(f"tilex: layout conflict on fragment '{b.name}': {c.want_from} needs {c.want}, but {c.have_from} "
                f"gives it {c.have}; '{b.name}' is staged through shared memory instead of registers",
                LayoutConversionWarning, c.span)
    return func.with_body(substitute(func.body, {b: tile for b, (tile, _) in staged.items()}))


def _moves_in_registers(c):
    """Whether every conversion the conflict needs (in before its operator reads, out after it writes) keeps each
    element in its thread."""
    reads, writes = c.op.reads_writes(c.buffer)
    return (not reads or in_same_threads(c.want, c.have)) and (not writes or in_same_threads(c.have, c.want))
