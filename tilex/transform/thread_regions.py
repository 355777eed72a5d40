"""Thread regions: the parts of a kernel that only some of its threads run, as a program that splits its block
itself writes them: ``with T.ws(1):`` (warp group 1: threads 128..255) or ``if tx < 128: ... elif tx < 256: ...``.

Such a region runs its tile operators on its own threads (a T.gemm in ``T.ws(0)`` of a 256-thread block is a
one-warpgroup gemm, a fragment it uses is spread over those 128 threads), and its barriers are named barriers over
its threads: a ``__syncthreads()`` that the other threads never reach would deadlock.

MarkThreadRegions (tile level, before pipelining; ``mark_thread_regions``)
  Consumes: a tile program. ``T.ws`` regions already carry a ``tilex.thread_range`` attribute (the frontend writes
  it); a branch of an ``if`` whose condition restricts the thread index to an interval of threads (compared with
  constants: ``tx < 128``, ``tx >= 128 and tx < 256``, ``tx // 128 == 1``; the ``else`` of such a test, within the
  threads of the enclosing region) is a region when it holds tile operators or block barriers.
  Produces: the same program with each such branch inside a ``tilex.thread_range`` attribute (node: its first
  thread, value: its thread count). A tile operator under a condition on the thread index whose threads are not an
  interval (``tx % 2 == 0``, ``tx < n`` for a run-time n) is a TileOpError: it has no thread count to run on.

What reads the attributes:
  * LayoutInference asks each operator for layouts with its region's thread count (:func:`op_ranges`), and refuses
    a fragment used on two different thread ranges (its registers live in one set of threads);
  * LowerTileOps lowers a region's operators with the thread index counted from the region's first thread
    (:func:`region_thread`), and completes their TMA stores before the region ends (:func:`complete_bulk_stores`:
    the thread that issues them may not be one the rest of the kernel's waits know about);
  * ThreadSync plans barriers region by region (:func:`sync_regions`): a region's body on its own, its barriers
    then named barriers over its threads (``bar.sync id, count``, one id per thread range); the statements around
    the regions with each region seen as one statement that reads and writes the shared tiles its body touches
    (a conflict between them is a block barrier before the region, which every thread reaches), each such barrier
    preceded by a proxy fence (a region's MMAs or TMA stores may read what other threads wrote there).
"""
from __future__ import annotations

from contextlib import contextmanager

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx import op as tirx_op

from tilex.ir import intrin
from tilex.ir.names import KEEP_ALIVE_OP, THREAD_RANGE
from tilex.ir.source import add_location, span_of
from tilex.ir.visit import (BufferLoadNode, dtype_of, free_vars, is_op_call, is_sync, map_nodes, mutate, seq_items,
                            substitute, walk)
from tilex.op.base import TileOpError
from tilex.op.registry import parse_tile_op
from tilex.transform.kernel_scope import kernel_info, outer_launch_chain, with_launch_items

#: the threads of a condition on the thread index are not one interval
NOT_AN_INTERVAL = "not an interval"
#: named barrier ids the regions may use (0 is __syncthreads')
FIRST_BARRIER_ID, LAST_BARRIER_ID = 1, 15

_PLACEHOLDER = "tilex_thread_region"  # a hidden region while the statements around it are planned
_SCOPE = "tilex.sync_scope"  # the statements ThreadSync plans inside a stand-in kernel
_SKIP = tvm_ffi.WalkResult.SKIP


# ---- the attribute ------------------------------------------------------------------------------------------------
def thread_range_attr(lo: int, hi: int, body):
    """``body`` as a region of the threads [lo, hi)."""
    return tirx.AttrStmt(tirx.const(lo, "int32"), THREAD_RANGE, tirx.const(hi - lo, "int32"), body)


def is_region(node) -> bool:
    return isinstance(node, tirx.AttrStmt) and node.attr_key == THREAD_RANGE


def range_of(attr) -> tuple[int, int]:
    """(first thread, end) of a ``tilex.thread_range`` attribute."""
    lo = int(attr.node.value)
    return lo, lo + int(attr.value.value)


def has_regions(body) -> bool:
    found = []
    walk(body, (tirx.AttrStmt, lambda a: found.append(a) if is_region(a) else None))
    return bool(found)


def outermost_regions(body) -> list:
    """The region attributes of `body` that no other region of `body` contains, in program order."""
    out = []

    def on_attr(a):
        if is_region(a):
            out.append(a)
            return _SKIP
        return None

    walk(body, (tirx.AttrStmt, on_attr), order="pre")
    return out



# ---- which threads a condition keeps --------------------------------------------------------------------------------
def _conjuncts(e):
    if isinstance(e, tirx.And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def thread_interval(cond, tx, lo: int, hi: int):
    """The threads of [lo, hi) for which `cond` holds, as (first, end): None when `cond` does not read the thread
    index `tx` (every thread or none takes the branch), :data:`NOT_AN_INTERVAL` when they are no interval or
    depend on other values too. Parts of a conjunction that do not read `tx` (``tx < 128 and k > 0``) are uniform
    over the block and leave the interval as it is."""
    a = tvm.sym.Analyzer()
    cond = a.simplify(cond)
    parts = [c for c in _conjuncts(cond) if any(v.same_as(tx) for v in free_vars(c))]
    if not parts:
        return None
    if any(any(not v.same_as(tx) for v in free_vars(c)) for c in parts):
        return NOT_AN_INTERVAL
    test = parts[0]
    for c in parts[1:]:
        test = tirx.And(test, c)
    a.bind(tx, tvm.ir.Range(lo, hi), allow_override=True)
    with a.constraint_scope(test):
        b = a.const_int_bound(tx)
    first, end = max(lo, int(b.min_value)), min(hi, int(b.max_value) + 1)
    if first < end:
        exact = tvm.sym.Analyzer()
        exact.bind(tx, tvm.ir.Range(first, end))
        if exact.can_prove(test):
            return first, end
    kept = [k for k in range(lo, hi) if _holds(a, test, tx, k)]  # at most 1024 threads
    if not kept:
        return lo, lo
    if kept[-1] - kept[0] + 1 != len(kept):
        return NOT_AN_INTERVAL
    return kept[0], kept[-1] + 1


def _holds(analyzer, test, tx, k) -> bool:
    v = analyzer.simplify(substitute(test, {tx: tirx.const(k, dtype_of(tx))}))
    if not isinstance(v, tirx.IntImm):
        raise TileOpError(f"internal: cannot evaluate the thread condition {test} at thread {k}")
    return bool(v.value)


# ---- MarkThreadRegions ----------------------------------------------------------------------------------------------
def _has_tile_work_or_sync(body) -> bool:
    found = []

    def on_eval(node):
        if is_sync(node) or (isinstance(node.value, tvm.ir.Call) and _is_tile_op(node.value)):
            found.append(node)

    def on_for(node):
        if node.kind == tirx.ForKind.PARALLEL:
            found.append(node)

    walk(body, [(tirx.Evaluate, on_eval), (tirx.For, on_for)])
    return bool(found)


def _is_tile_op(call) -> bool:
    try:
        return parse_tile_op(call) is not None
    except Exception:  # noqa: BLE001 - a malformed tile op is still a tile op (reported where it is lowered)
        return True


def mark_thread_regions(func, wanted=_has_tile_work_or_sync):
    """MarkThreadRegions (module docstring): branches on the thread index for which `wanted(branch)` holds (tile
    operators or barriers) become ``tilex.thread_range`` regions. A kernel without a 1-d thread block is returned
    as it is."""
    info = kernel_info(func)
    if info is None:
        return func
    tx, threads = info.thread_var, info.threads

    def branch(stmt, cond, rng):
        if stmt is None:
            return None
        if is_region(stmt):
            return visit(stmt, rng)
        got = thread_interval(cond, tx, *rng)
        if got is None:
            return visit(stmt, rng)
        needed = wanted(stmt)
        if got == NOT_AN_INTERVAL:
            if needed and _has_tile_work_or_sync(stmt):
                raise TileOpError(f"tile operators or barriers under the condition {cond} on the thread index: the "
                                  f"threads that run them must be one interval (tx < 128, tx >= 128 and tx < 256, "
                                  f"...) so that they can be spread over them")
            return visit(stmt, rng)
        if got[0] >= got[1] or not needed or got == tuple(rng):
            return visit(stmt, got if got[0] < got[1] else rng)
        return thread_range_attr(got[0], got[1], visit(stmt, got))

    def visit(stmt, rng):
        def on_if(node, m):
            then_case = branch(node.then_case, node.condition, rng)
            else_case = branch(node.else_case, tirx.Not(node.condition), rng)
            if then_case.same_as(node.then_case) and (else_case is None or else_case.same_as(node.else_case)):
                return node
            return tirx.IfThenElse(node.condition, then_case, else_case, span=node.span)

        def on_attr(node, m):
            if not is_region(node):
                body = m.mutate(node.body)
                return node if body.same_as(node.body) else tirx.AttrStmt(node.node, node.attr_key, node.value, body)
            inner = range_of(node)
            if not (rng[0] <= inner[0] and inner[1] <= rng[1]):
                raise TileOpError(f"a region of threads [{inner[0]}, {inner[1]}) inside one of threads "
                                  f"[{rng[0]}, {rng[1]}): no thread runs it")
            return tirx.AttrStmt(node.node, node.attr_key, node.value, visit(node.body, inner))

        return mutate(stmt, [(tirx.IfThenElse, on_if), (tirx.AttrStmt, on_attr)])

    body = visit(func.body, (0, threads))
    return func if body.same_as(func.body) else func.with_body(body)


# ---- LayoutInference ------------------------------------------------------------------------------------------------
def op_ranges(body) -> dict:
    """{statement: (first thread, end)} of the statements inside regions (a tile operator's Evaluate, a T.Parallel
    nest, ...), from the innermost region around each; statements outside every region are not in it."""
    out = {}

    def visit(stmt, rng):
        for attr in outermost_regions(stmt):
            inner = range_of(attr)
            on_node = _setter(out, inner)
            walk(attr.body, [(tirx.Evaluate, on_node), (tirx.For, on_node)])
            visit(attr.body, inner)

    visit(body, None)
    return out


def _setter(out, value):
    def on_node(n):
        out[n] = value

    return on_node


# ---- LowerTileOps ---------------------------------------------------------------------------------------------------
@contextmanager
def region_thread(ctx, attr, block_thread):
    """Inside the region `attr`: ``ctx.thread_var`` is a fresh var counting the region's threads from 0 and
    ``ctx.threads`` their count. Yields a function that turns the lowered body into the block's terms (the var
    becomes ``threadIdx.x - first``)."""
    lo, hi = range_of(attr)
    saved = ctx.thread_var, ctx.threads
    local = tirx.Var(f"tid_r{lo}", dtype_of(block_thread))
    ctx.thread_var, ctx.threads = local, hi - lo
    ctx.analyzer.bind(local, tvm.ir.Range(0, hi - lo), allow_override=True)
    try:
        yield lambda stmt: substitute(stmt, {local: block_thread - lo if lo else block_thread})
    finally:
        ctx.thread_var, ctx.threads = saved


def complete_bulk_stores(stmt):
    """`stmt` with every bulk group it commits (a TMA store of a tile operator, issued under a condition on the
    thread) waited for by its issuing thread right after the commit, before the shared tile may change."""
    def on_if(node):
        last = seq_items(node.then_case)[-1] if node.then_case is not None else None
        if last is not None and intrin.is_call(last, intrin.BULK_COMMIT):
            return tirx.IfThenElse(node.condition, tirx.SeqStmt([node.then_case, intrin.bulk_wait_read(0)]),
                                   node.else_case)
        return node

    return map_nodes(stmt, (tirx.IfThenElse, on_if))


# ---- ThreadSync -----------------------------------------------------------------------------------------------------
def _shared(buf) -> bool:
    return str(buf.scope()).startswith("shared")


def _accesses(body):
    """{shared buffer: rw mask} that TVM's ThreadSync would see in `body` (loads, stores, access pointers; not
    ``address_of``, which it does not count)."""
    masks = {}

    def add(buf, m):
        if tirx.is_buffer_var(buf) and _shared(buf):
            masks[buf] = masks.get(buf, 0) | m

    def on_call(c):
        if is_op_call(c, "tirx.tvm_access_ptr"):
            mask = c.args[4]
            m = int(mask.value) if isinstance(mask, tirx.IntImm) else 3
            if m:
                walk(c.args[1], (tvm.ir.Var, lambda v: add(v, m)))
        if is_op_call(c, "tirx.address_of"):
            return _SKIP
        return None

    walk(body, [(tvm.ir.Call, on_call), (BufferLoadNode, lambda n: add(n.source, 1)),
                (tirx.BufferStore, lambda n: add(n.buffer, 2))], order="pre")
    return masks


def _summary(index, body):
    """The stand-in of a region while the statements around it are planned: one statement accessing, as a whole,
    every shared buffer the region reads or writes."""
    ptrs = []
    for buf, m in _accesses(body).items():
        size = 1
        for s in buf.shape:
            size = size * s
        ptrs.append(tirx_op.tvm_access_ptr(tirx_op.type_annotation(str(buf.dtype)), buf.data, 0, size, m))
    return tirx.Evaluate(tirx.call_extern("void", _PLACEHOLDER, tirx.const(index, "int32"), *ptrs))


def _placeholder_index(stmt):
    name = intrin.name_of(stmt)
    return int(stmt.value.args[1].value) if name == _PLACEHOLDER else None


class _BarrierIds:
    """Named barrier ids for thread ranges: one per range, skipping the ids the kernel uses itself."""

    def __init__(self, body):
        self.taken = set()

        def on_call(c):
            for name in (intrin.NAMED_BARRIER_WAIT, intrin.NAMED_BARRIER_ARRIVE, intrin.BAR_SYNC):
                if intrin.is_call(c, name) and isinstance(c.args[1], tirx.IntImm):
                    self.taken.add(int(c.args[1].value))
            if intrin.is_call(c, intrin.NAMED_BARRIER_SYNC):
                self.taken.add(1)

        walk(body, (tvm.ir.Call, on_call))
        self.ids = {}

    def get(self, rng):
        if rng not in self.ids:
            used = self.taken | set(self.ids.values())
            free = [i for i in range(FIRST_BARRIER_ID, LAST_BARRIER_ID + 1) if i not in used]
            if not free:
                raise ValueError(f"ThreadSync: the regions of this kernel need more named barriers than the 15 the "
                                 f"hardware has (ids in use: {sorted(used)})")
            self.ids[rng] = free[0]
        return self.ids[rng]


def _fenced_syncs(stmt):
    """Every block barrier directly in `stmt`'s statement lists preceded by a proxy fence (once)."""
    def on_seq(node):
        items, out = list(node.seq), []
        for s in items:
            if is_sync(s) and not (out and intrin.is_call(out[-1], intrin.FENCE_PROXY_ASYNC)):
                out.append(intrin.fence_proxy_async())
            out.append(s)
        return node if len(out) == len(items) else tirx.SeqStmt(out)

    if is_sync(stmt):
        return tirx.SeqStmt([intrin.fence_proxy_async(), stmt])
    return map_nodes(stmt, (tirx.SeqStmt, on_seq))


def _named(stmt, rng, ids, block):
    """`stmt`'s block barriers as named barriers over the threads `rng` (kept when `rng` is the whole block)."""
    lo, hi = rng
    if (lo, hi) == (0, block):
        return stmt
    syncs = []
    walk(stmt, (tirx.Evaluate, lambda e: syncs.append(e) if is_sync(e) else None))
    if not syncs:
        return stmt
    if (hi - lo) % 32:
        raise ValueError(f"ThreadSync: the threads [{lo}, {hi}) of a region need a barrier among themselves, but "
                         f"a named barrier counts whole warps ({hi - lo} threads is not a multiple of 32)")
    bar = ids.get((lo, hi))
    return map_nodes(stmt, (tirx.Evaluate, lambda e: intrin.named_barrier_wait(bar, hi - lo) if is_sync(e) else e))


def sync_regions(func, plan):
    """ThreadSync of a kernel with regions (module docstring); `plan(func)` is the plain planner (TVM's
    ThreadSync as tilex runs it), applied to stand-in kernels: the kernel's allocations, then the statements to
    plan."""
    info = kernel_info(func)
    chain = outer_launch_chain(func.body)
    if info is None or chain is None:
        return plan(func)
    block = info.threads
    items = seq_items(chain[-1].body)
    allocs = [s for s in items if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer))]
    # the stand-in kernels also keep the tiles apart (tilex.transform.shared_tiles), so they are planned one by one
    prefix = allocs + [s for s in items if isinstance(s, tirx.Evaluate) and is_op_call(s.value, KEEP_ALIVE_OP)]
    ids = _BarrierIds(func.body)

    def run(body):
        scoped = tirx.AttrStmt(tirx.const(0, "int32"), _SCOPE, tirx.const(0, "int32"), body)
        planned = plan(with_launch_items(func, chain, prefix + [scoped]))
        found = []
        walk(planned.body, (tirx.AttrStmt, lambda a: found.append(a) if a.attr_key == _SCOPE else None))
        return found[0].body

    def process(body, rng):
        regions = outermost_regions(body)
        if not regions:
            return _named(run(body), rng, ids, block)
        done = [tirx.AttrStmt(a.node, a.attr_key, a.value, process(a.body, range_of(a))) for a in regions]
        index = {a: i for i, a in enumerate(regions)}
        hidden = map_nodes(body, (tirx.AttrStmt, lambda a: _summary(index[a], a.body) if a in index else a),
                           order="pre")
        planned = _fenced_syncs(run(hidden))
        planned = _named(planned, rng, ids, block)

        def back(ev):
            i = _placeholder_index(ev)
            return done[i] if i is not None else ev

        return map_nodes(planned, (tirx.Evaluate, back))

    rest = [s for s in items if not isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer))]
    body = process(tirx.SeqStmt(rest) if len(rest) > 1 else rest[0], (0, block))
    return with_launch_items(func, chain, allocs + seq_items(body))



def op_threads(body, found, threads) -> dict:
    """{id(op): thread count} of the tile operators `found` in `body` ([(statement, op)], `collect_tile_ops`) that
    run in a region (the others run on the whole block of `threads`). A fragment used on two different thread
    ranges is a TileOpError: its registers belong to one set of threads."""
    ranges = op_ranges(body)
    owners = {}
    for stmt, op in found:
        rng = ranges.get(stmt, (0, threads))
        for b in op.buffers():
            if str(b.scope()) != "local.fragment":
                continue
            have = owners.setdefault(b, (rng, op))
            if have[0] != rng:
                raise add_location(TileOpError(
                    f"fragment '{b.name}' is used on threads [{have[0][0]}, {have[0][1]}) by {have[1].describe()} and "
                    f"on threads [{rng[0]}, {rng[1]}) by {op.describe()}: a fragment's registers belong to the "
                    f"threads of one region (pass values between regions through shared memory)"),
                    span_of(getattr(stmt, "value", None), stmt))
    return {id(op): ranges[stmt][1] - ranges[stmt][0] for stmt, op in found if stmt in ranges}
