"""What the pipeline rewrites ask of a loop-body statement: its tile operator, the buffers it reads and writes, a
short description for errors; and the two edits they make: retargeting accesses to a stage of a multi-buffered
buffer, and marking a copy asynchronous."""
from __future__ import annotations

import contextlib
import contextvars

import tvm
import tvm_ffi
from tvm import tirx

from tilex.ir.names import NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE, REGION_OP
from tilex.ir.visit import BufferLoadNode, is_op_call, map_nodes, walk
from tilex.op.base import is_shared
from tilex.op.copy import CopyOp
from tilex.op.region import READ, WRITE, Region
from tilex.op.registry import parse_tile_op
from tilex.transform.op_collect import collect_views

PIPELINE_ANNOTATIONS = (NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE)


def tile_op(stmt):
    """The tile operator an ``Evaluate`` statement calls, else None."""
    if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call):
        return parse_tile_op(stmt.value)
    return None


def written_shared(stmt):
    """Shared buffers a statement writes (tile-op destinations and plain stores)."""
    out = set()

    def on_eval(node):
        op = parse_tile_op(node.value) if isinstance(node.value, tvm.ir.Call) else None
        if op is None:
            return
        if isinstance(op, CopyOp):
            out.add(op.dst.buffer)
        else:
            out.update(b for b in op.buffers()[-1:])  # gemm/fill/... write their last operand

    walk(stmt, [(tirx.Evaluate, on_eval), (tirx.BufferStore, lambda n: out.add(n.buffer))])
    return {b for b in out if is_shared(b)}


#: {fragment view: the buffer it views} of the kernel being pipelined (`viewing`): an access through a T.view is an
#: access of the registers it views, so a wgmma reading a fragment must not stay in flight while a view of it is
#: written
_VIEW_BASES = contextvars.ContextVar("tilex_view_bases", default={})


@contextlib.contextmanager
def viewing(body):
    """Within: `accesses` reports a fragment view's accesses as its base's (the views of `body`)."""
    token = _VIEW_BASES.set({op.view: op.base for _, op in collect_views(body)})
    try:
        yield
    finally:
        _VIEW_BASES.reset(token)


def _viewed(buf):
    bases = _VIEW_BASES.get()
    while buf in bases:
        buf = bases[buf]
    return buf


def accesses(stmt):
    """(buffers read, buffers written) by a statement: tile-op regions by their access mask, plain loads and
    stores otherwise (a region's own BufferLoad only names its buffer, it is not a read); a fragment view counts
    as the fragment it views (within `viewing`)."""
    reads, writes = set(), set()

    def on_call(c):
        if is_op_call(c, REGION_OP):
            load, mask = c.args[0], int(c.args[1].value)
            if mask & READ:
                reads.add(load.source)
            if mask & WRITE:
                writes.add(load.source)
            for i in [*load.indices, *c.args[2:]]:  # the tile's corner and extents may read buffers
                walk(i, (BufferLoadNode, lambda n: reads.add(n.source)))
            return tvm_ffi.WalkResult.SKIP
        return None

    walk(stmt, [(tvm.ir.Call, on_call), (BufferLoadNode, lambda n: reads.add(n.source)),
                (tirx.BufferStore, lambda n: writes.add(n.buffer))], order="pre")
    if _VIEW_BASES.get():
        return {_viewed(b) for b in reads}, {_viewed(b) for b in writes}
    return reads, writes


def write_counts(body) -> dict:
    """{buffer: how many statements of `body` write it} (plain stores and tile-operator regions written)."""
    counts = {}

    def count(buf):
        counts[buf] = counts.get(buf, 0) + 1

    def on_call(c):
        if is_op_call(c, REGION_OP) and int(c.args[1].value) & WRITE:
            count(c.args[0].source)

    walk(body, [(tirx.BufferStore, lambda n: count(n.buffer)), (tvm.ir.Call, on_call)])
    return counts


def describe(stmt):
    """A short description of a loop-body statement for error messages."""
    op = tile_op(stmt)
    if op is not None:
        return op.describe()
    if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL:
        written = sorted({b.name for b in accesses(stmt)[1]})
        return f"T.Parallel loop writing {', '.join(written) or 'nothing'}"
    text = " ".join(str(stmt).split())
    return text if len(text) <= 60 else text[:57] + "..."


def used_outside(root, loop):
    """Buffers the kernel body `root` uses outside `loop` (before or after it)."""
    used = set()

    def on_for(node):
        return tvm_ffi.WalkResult.SKIP if node.loop_var.same_as(loop.loop_var) else None

    walk(root, [(tirx.For, on_for), (BufferLoadNode, lambda n: used.add(n.source)),
                (tirx.BufferStore, lambda n: used.add(n.buffer))], order="pre")
    return used


def retarget(stmt, bufmap, stage):
    """Point every access/region of the buffers in `bufmap` at stage `stage` of their multi-buffered version
    (`stage`: one index for all, or a dict buffer -> index)."""

    def at(buf):
        return stage[buf] if isinstance(stage, dict) else stage

    def on_load(n):
        new = bufmap.get(n.source)
        if new is None:
            return n
        return tirx.BufferLoad(new, [at(n.source), *n.indices])

    def on_store(n):
        new = bufmap.get(n.buffer)
        if new is None:
            return n
        return tirx.BufferStore(new, n.value, [at(n.buffer), *n.indices])

    def on_call(n):
        if is_op_call(n, REGION_OP):
            load = n.args[0]
            new = bufmap.get(load.source)
            if new is not None:
                r = Region(new, [at(load.source), *load.indices], [1, *n.args[2:]])
                return r.to_call(int(n.args[1].value))
        return n

    # regions first (they contain loads of the old buffer that must not be rewritten on their own)
    stmt = map_nodes(stmt, (tvm.ir.Call, on_call), order="pre")
    return map_nodes(stmt, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store)], order="post")


def make_async(stmt):
    """The copy statement `stmt` as an asynchronous (cp.async) copy (its other flags, e.g. disable_tma, kept)."""
    call = stmt.value
    return tirx.Evaluate(tirx.call_intrin("handle", CopyOp.op_name, call.args[0], call.args[1], 1, *call.args[3:],
                                          span=call.span), span=stmt.span)  # errors name the user's line


def strip_annotations(loop):
    """`loop` without its pipeline annotations (it then runs serially, as written)."""
    ann = {key: v for key, v in loop.annotations.items() if key not in PIPELINE_ANNOTATIONS}
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding, ann)


def annotations_without_pipeline(loop):
    """The loop's annotations less the pipeline ones (what a rewritten loop keeps)."""
    return {key: v for key, v in loop.annotations.items() if key not in PIPELINE_ANNOTATIONS}
