"""GridFromPersistent: a ``T.Persistent`` loop whose tiles are independent of each other becomes the grid of blocks
it walks, so that tilex's own schedule applies to it as to any ``T.Kernel`` grid: TMA producer / wgmma consumer
pipelines, and tilex's persistent grid (PersistentTiles: the pipeline carried across tiles, clusters, stream-K).
Written by hand, the persistent loop hides the grid from those passes (its pipeline is not a top-level loop of the
kernel), and the program ran on the cp.async pipeline, 1.4x slower than the same GEMM written as a grid.

Consumes: a canonicalized tile program (language/canonicalize.py), in which T.Persistent's loop over waves carries
the ``tilex.persistent_tiles`` annotation ``[wave_size, index, *domain]`` and its body is the bindings of the tile
coordinates followed by the tile body under its guard (tiles inside the domain).
Produces: when the kernel qualifies, the kernel launched over the tile domain (``blockIdx.x`` over ``domain[0]``,
``.y`` over ``domain[1]``, ``.z`` over ``domain[2]``, each block index being the tile coordinate the loop bound) and
the tile body run once, unguarded; otherwise the loop as it was, without the annotation.

A kernel qualifies when its results cannot depend on which block runs which tile, or in which order:
- it is launched on ``blockIdx.x`` alone, ``wave_size`` blocks of it, the loop's ``index`` is that block index and
  nothing else reads it; the domain has one to three dimensions;
- its statements are buffer allocations, layout / rasterization annotations and the persistent loop;
- it does not synchronize itself (:func:`~tilex.transform.hopper.ws_decision.manual_synchronization`), uses no
  atomics and reads no global buffer it writes (tiles could then see each other's results);
- nothing is carried from one tile to the next: every buffer the kernel allocates is first met, in the tile body's
  order, by a tile operator that writes all of it without reading it (``T.clear`` / ``T.fill``, a ``T.copy``
  into it); a plain load or store first, or a write under a condition, keeps the loop.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.names import ANNOTATE_OP, PERSISTENT_TILES, REGION_OP, USE_SWIZZLE_OP
from tilex.ir.visit import BufferLoadNode, free_vars, is_op_call, map_nodes, seq_items, walk
from tilex.op.base import is_global
from tilex.op.region import READ, WRITE, Region
from tilex.transform.hopper.ws_decision import manual_synchronization
from tilex.transform.pipeline.analysis import accesses

#: the block indices the tile domain's dimensions become, in order
BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
#: kernel-level statements (calls) that may stand beside the persistent loop
ANNOTATIONS = (ANNOTATE_OP, USE_SWIZZLE_OP)


def grid_from_persistent(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The pass (module docstring)."""
    loops = []
    walk(func.body, (tirx.For, lambda lp: loops.append(lp) if PERSISTENT_TILES in lp.annotations else None))
    if not loops:
        return func
    grid = _as_grid(func.body, loops[0]) if len(loops) == 1 else None
    if grid is not None:
        return func.with_body(grid)
    return func.with_body(map_nodes(func.body, (tirx.For, _without_annotation)))


def _without_annotation(loop):
    if PERSISTENT_TILES not in loop.annotations:
        return loop
    annotations = {k: v for k, v in loop.annotations.items() if k != PERSISTENT_TILES}
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding, annotations,
                    span=loop.span)


def _as_grid(body, loop):
    """The kernel `body` launched over the tile domain of its persistent `loop`, or None if it does not qualify."""
    chain, node = [], body
    while isinstance(node, tirx.AttrStmt):
        chain.append(node)
        node = node.body
    launches = [a for a in chain if a.attr_key == "thread_extent"]
    blocks = [a for a in launches if a.node.thread_tag.startswith("blockIdx.")]
    if len(blocks) != 1 or blocks[0].node.thread_tag != "blockIdx.x":
        return None
    block = blocks[0]
    wave_size, index, *domain = loop.annotations[PERSISTENT_TILES]
    if not 1 <= len(domain) <= len(BLOCK_TAGS):
        return None
    if not (isinstance(index, tvm.ir.Var) and index.same_as(block.node.var)):
        return None
    ana = tvm.sym.Analyzer()
    if not ana.can_prove_equal(block.value, wave_size):
        return None
    items = seq_items(node)
    if not any(s.same_as(loop) for s in items) or not all(s.same_as(loop) or _kernel_level(s) for s in items):
        return None
    parts = seq_items(loop.body)
    binds, guard = parts[:-1], parts[-1]
    if len(binds) != len(domain) or not all(isinstance(b, tirx.Bind) for b in binds) \
            or not isinstance(guard, tirx.IfThenElse) or guard.else_case is not None:
        return None
    tile = guard.then_case
    if manual_synchronization(tile) is not None or _uses_atomics(tile) or _global_read_and_written(tile):
        return None
    allocated = [s.buffer for s in items if isinstance(s, tirx.AllocBuffer)]
    if not _each_written_whole_first(tile, allocated):
        return None
    rest = [s for s in items if not s.same_as(loop)] + [tile]
    if any(block.node.var in free_vars(s) for s in rest):
        return None
    kernel = rest[0] if len(rest) == 1 else tirx.SeqStmt(rest)
    for attr in reversed(chain):  # the launch chain again, the block index replaced by the domain's
        if attr.same_as(block):
            for tag, bind, extent in reversed(list(zip(BLOCK_TAGS, binds, domain))):
                iv = tirx.IterVar(tvm.ir.Range.from_min_extent(0, extent), bind.var, tirx.IterVar.ThreadIndex, tag)
                kernel = tirx.AttrStmt(iv, "thread_extent", extent, kernel)
        else:
            kernel = tirx.AttrStmt(attr.node, attr.attr_key, attr.value, kernel)
    return kernel


def _kernel_level(stmt) -> bool:
    """Whether `stmt` may stand beside the persistent loop: an allocation or an annotation."""
    if isinstance(stmt, (tirx.AllocBuffer, tirx.DeclBuffer)):
        return True
    return isinstance(stmt, tirx.Evaluate) and any(is_op_call(stmt.value, name) for name in ANNOTATIONS)


def _uses_atomics(stmt) -> bool:
    """Whether `stmt` calls an atomic: a tile operator or intrinsic named so, or a device function (``tilex::atomic_*``,
    ``atomicAdd``) called by name."""
    found = []

    def on_call(c):
        if not isinstance(c.op, tvm.ir.Op):
            return
        name = c.op.name
        if name in ("tirx.call_extern", "tirx.call_pure_extern") and c.args and isinstance(c.args[0], tvm.ir.StringImm):
            name = c.args[0].value
        if "atomic" in name.lower():
            found.append(c)

    walk(stmt, (tvm.ir.Call, on_call))
    return bool(found)


def _global_read_and_written(stmt) -> bool:
    """Whether some global buffer is both read and written in `stmt` (by tile operators or plain accesses)."""
    read, written = accesses(stmt)
    return any(is_global(b) and b in written for b in read)


def _each_written_whole_first(tile, buffers) -> bool:
    """Whether each of `buffers` is first met in `tile`, in program order, by a tile operator writing all of it
    without reading it (outside any condition)."""
    first = {}

    def meet(buf, whole_write):
        for b in buffers:
            if b.same_as(buf) and b not in first:
                first[b] = whole_write

    def visit(stmt, conditional):
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, conditional)
        elif isinstance(stmt, tirx.IfThenElse):
            _loads(stmt.condition, meet)
            visit(stmt.then_case, True)
            if stmt.else_case is not None:
                visit(stmt.else_case, True)
        elif isinstance(stmt, tirx.For):
            _loads(stmt.min, meet)
            _loads(stmt.extent, meet)
            visit(stmt.body, conditional)
        elif isinstance(stmt, (tirx.AttrStmt, tirx.LetStmt)):
            _loads(stmt.value, meet)
            visit(stmt.body, conditional)
        elif isinstance(stmt, tirx.Bind):
            _loads(stmt.value, meet)
        elif isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) and \
                any(is_op_call(a, REGION_OP) for a in stmt.value.args):
            regions = [a for a in stmt.value.args if is_op_call(a, REGION_OP)]
            for a in stmt.value.args:
                if not is_op_call(a, REGION_OP):
                    _loads(a, meet)
            for r in regions:  # reads first: an operator reading and writing a tile reads what was there
                if int(r.args[1].value) & READ:
                    meet(r.args[0].source, False)
                _loads_in_region(r, meet)
            for r in regions:
                if int(r.args[1].value) == WRITE:
                    meet(r.args[0].source, not conditional and Region.from_call(r).is_whole())
        else:  # plain statements: every load is a read, every store a partial write
            walk(stmt, [(BufferLoadNode, lambda n: meet(n.source, False)),
                        (tirx.BufferStore, lambda s: meet(s.buffer, False))])

    visit(tile, False)
    return all(first.get(b, True) for b in buffers)


def _loads(expr, meet):
    walk(expr, (BufferLoadNode, lambda n: meet(n.source, False)))


def _loads_in_region(region_call, meet):
    """Loads inside a region's corner indices and extents (a tile offset read from a buffer)."""
    for index in region_call.args[0].indices:
        _loads(index, meet)
    for extent in region_call.args[2:]:
        _loads(extent, meet)
