"""Shared tiles that take turns: when a kernel's ``shared.dyn`` tiles do not fit one block side by side, tiles whose
lifetimes do not overlap share bytes (the reuse TVM's MergeSharedMemoryAllocations would make, planned here so that
the barriers it needs are known).

plan_reuse (called by tilex.transform.shared_tiles.KeepTilesApart, before it hoists the allocations)
  Consumes: the statements inside the launch scopes of one kernel (flat per-thread TIR, each ``shared.dyn`` tile
  still allocated where it was: a cross-warp reduction's workspace where the reduction runs), the block's limit and
  the bytes of its static ``shared`` arrays.
  Produces: None when the tiles fit side by side (the kernel is left exactly as it was) or a size is not constant;
  else a TileReuse: every tile's byte offset in one arena (tiles whose lifetimes overlap never overlap in bytes),
  the arena's size, and the statements with a *reuse barrier* before the first access of each tile that takes over
  bytes an earlier tile used; `fits` says whether the arena fits the block (never when there is a single tile or
  memory is viewed other than from a tile's first byte: no plan is made then). A view of a tile (T.view /
  T.reshape: a DeclBuffer over the tile's data) is part of its tile: its accesses are the tile's, it moves with it.
  A kernel with thread regions, whose tiles are in use side by side, gets its tiles packed without sharing bytes
  (no barrier).

  Placement. A tile takes the bytes it uses: one that LowerTileOps padded to whole KB beside 1 KB-aligned swizzled
  tiles (TVM's merge packs tiles one after another, smallest first, so each had to keep the next aligned; the
  ``tilex.used_bytes`` annotation of its allocation) is placed at its own size and alignment here. Tiles are placed
  largest alignment first (the largest power of two dividing the size, 64 B to 1 KB, at least 128 B for a tile TMA
  loads or stores), then largest first, each at the lowest aligned offset clear of the tiles it lives beside.

PlaceSharedTiles (among TVM's passes: after ThreadSync, NamedBarriers and BulkStoreWaits, before TVM's
MergeSharedMemoryAllocations)
  Consumes: a kernel whose function attribute ``tilex.shared_placement`` ({tile: byte offset}, KeepTilesApart
  writes it from a TileReuse) is set.
  Produces: one ``shared.dyn`` arena (``uint8``) allocated where the first tile was; each tile, and each view of
  a tile where it was declared, a view of the arena (a DeclBuffer over its data), its loads, stores and access
  pointers moved by its tile's offset; the attribute removed. TVM's merge then has a single buffer to place.

Lifetimes. The statements are numbered in program order, descending into sequences, attribute scopes, loops every
thread runs alike (bounds free of the thread index and of per-thread values, or a body that already holds a block
barrier) and the consumer side of a warp-specialized role split; any other statement (a branch, a thread region, a
loop with per-thread bounds) counts as one. A tile lives from the first to the last statement touching it; a touch
inside a loop that does not hold the tile's allocation stretches its life over the whole loop (the tile carries
values between iterations). The producer warpgroup's TMA loads land while the consumers run: a tile it only loads into
lives from the role split to the last consumer statement that waits on an mbarrier (after it every load has
landed; any other producer access keeps the tile alive to the consumers' end). A tile nothing touches lives
throughout.

Barriers. ThreadSync plans each tile on its own (it still sees them apart); what it cannot see is a tile taking
over another's bytes. So a tile placed over bytes of a tile that lived before it (or, both living inside one loop
body, after it: the next iteration) gets a reuse barrier at the last point before its first touch that every
thread of its region passes: the previous users' wgmma reads are waited for (``wgmma_wait<0>``), their cp.async
writes too, a proxy fence orders generic accesses against TMA / wgmma ones when either side uses them, then a block
barrier (a named barrier over the consumers inside a warp-specialized consumer region: NamedBarriers converts it;
BulkStoreWaits makes TMA stores finish reading first). A statement that is itself a block barrier right before
that point suffices when no asynchronous access is involved (a reduction workspace brings its own).
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import SHARED_PLACEMENT_ATTR, THREAD_RANGE, WS_CONSUMER, WS_PRODUCER_SIDE
from tilex.ir.shared_memory import block_footprint, buffer_bytes, used_bytes
from tilex.ir.visit import BufferLoadNode, is_sync, map_nodes, seq, seq_items, storage_sync, walk
from tilex.transform.hopper.roles import is_role_split

_DYNAMIC = "shared.dyn"
_ACCESS_PTR = "tirx.tvm_access_ptr"
_BUFFER_DATA = "tirx.buffer_data"
_WHOLE_KB = 1024
#: device functions through which the async proxy writes a tile (TMA loads) or reads one (wgmma: its descriptors)
_TMA_LOADS = frozenset({intrin.TMA_LOAD_1D, intrin.TMA_LOAD_2D, intrin.TMA_LOAD_2D_MULTICAST,
                        *intrin.TMA_LOAD_ND.values()})


@dataclass
class TileReuse:
    """A placement of a kernel's ``shared.dyn`` tiles in one arena (see the module docstring)."""
    offsets: dict  # tile (buffer var) -> byte offset (empty: no plan was made)
    size: int  # bytes of the arena
    fits: bool  # whether the arena (with the static arrays) fits the block
    body: object  # the kernel's statements with the reuse barriers
    why_not: str = ""  # why no plan was made, when that is not obvious

    def annotate(self, func):
        """`func` carrying the placement for PlaceSharedTiles."""
        return func.with_attr(SHARED_PLACEMENT_ATTR, {t: tirx.const(o, "int64") for t, o in self.offsets.items()})


def _tiles_in(node, tiles, bases) -> set:
    """The tiles `node` refers to, through themselves or a view of them (`bases`: {view: tile})."""
    found = set()

    def on_var(v):
        t = bases.get(v, v)
        if t in tiles:
            found.add(t)

    walk(node, (tvm.ir.Var, on_var))
    return found


# ---- lifetimes ------------------------------------------------------------------------------------------------------
class _Timeline:
    """Numbers a kernel's statements in program order (module docstring, Lifetimes) and records, per tile, the
    numbers touching it. Run again with `barriers` ({number: statements}) it rebuilds the statements with those
    statements inserted before the statement that starts at each number, in the outermost sequence that has one
    starting there."""

    def __init__(self, tiles, uniform_vars, barriers=None, bases=None):
        self.tiles = tiles
        self.bases = bases or {}  # view -> the tile whose bytes it views (a touch of a view touches its base)
        self.uniform = set(uniform_vars)
        self.barriers = barriers
        self.count = 0
        self.touches = {}  # tile -> [(number, open loops)]
        self.home = {}  # tile -> loops open where it is allocated
        self.loop_span = {}  # loop (its number) -> (first, last number)
        self.loops = []
        self.points = {}  # number -> whether the statement before it (same sequence) is a block barrier
        self.producer = []  # (tiles, first, last number)

    # -- walking
    def sequence(self, items):
        """The statements `items` of one sequence, visited; returns (new statements, [(first, last) per item])."""
        out, spans, prev = [], [], None
        for s in items:
            start = self.count
            owner = start not in self.points
            if owner:
                self.points[start] = prev is not None and is_sync(prev)
            new = self.visit(s)
            if owner and self.barriers and start in self.barriers:
                out.extend(self.barriers[start])
            out.append(new)
            spans.append((start, self.count - 1))
            prev = s
        return out, spans

    def visit(self, s):
        if isinstance(s, tirx.SeqStmt):
            return seq(self.sequence(s.seq)[0])
        if isinstance(s, tirx.AttrStmt) and s.attr_key not in (THREAD_RANGE, WS_PRODUCER_SIDE, WS_CONSUMER,
                                                                "thread_extent"):
            return tirx.AttrStmt(s.node, s.attr_key, s.value, self.visit(s.body))
        if isinstance(s, tirx.For) and self._uniform_loop(s):
            key = self.count
            self.count += 1
            self.loops.append(key)
            self.uniform.add(s.loop_var)
            body = seq(self.sequence(seq_items(s.body))[0])
            self.loops.pop()
            self.loop_span[key] = (key, self.count - 1)
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding, s.annotations)
        if is_role_split(s):
            return self._role_split(s)
        if isinstance(s, tirx.Bind) and self._uniform(s.value):
            self.uniform.add(s.var)
        self._leaf(s, self.count)
        self.count += 1
        return s

    def _role_split(self, s):
        start = self.count
        self.count += 1
        produced = self._touched(s.then_case)
        consumer = s.else_case
        items, spans = self.sequence(seq_items(consumer.body))
        waits = [hi for item, (_, hi) in zip(seq_items(consumer.body), spans) if _waits_on_mbarrier(item)]
        # the producer's TMA loads have all landed after the consumers' last mbarrier wait; anything else it does
        # with a tile may go on until the consumers are done
        loads_only = map_nodes(s.then_case, (tirx.Evaluate, lambda e: tirx.Evaluate(tirx.const(0, "int32"))
                                             if _is_tma_load(e) else e))
        other = self._touched(loads_only)
        self.producer.append((produced - other, start, max(waits) if waits else self.count - 1))
        self.producer.append((produced & other, start, self.count - 1))
        body = tirx.AttrStmt(consumer.node, consumer.attr_key, consumer.value, seq(items))
        return tirx.IfThenElse(s.condition, s.then_case, body, span=s.span)

    def _touched(self, stmt) -> set:
        return _tiles_in(stmt, self.tiles, self.bases)

    def _leaf(self, s, number):
        def on_alloc(node):
            if node.buffer in self.tiles:
                self.home[node.buffer] = tuple(self.loops)

        walk(s, (tirx.AllocBuffer, on_alloc))
        if isinstance(s, tirx.AllocBuffer) or (isinstance(s, tirx.DeclBuffer) and s.buffer in self.bases):
            return
        for t in self._touched(s):
            self.touches.setdefault(t, []).append((number, tuple(self.loops)))

    # -- uniformity
    def _uniform(self, expr) -> bool:
        """Whether every thread of the block computes `expr` alike: it reads no thread index, no per-thread or
        shared value and no variable bound from those."""
        ok = [True]

        def on_load(node):
            if str(node.source.scope()) not in ("global", ""):
                ok[0] = False

        def on_var(v):
            if not tirx.is_buffer_var(v) and v not in self.uniform:
                ok[0] = False

        walk(expr, [(BufferLoadNode, on_load), (tvm.ir.Var, on_var)])
        return ok[0]

    def _uniform_loop(self, loop) -> bool:
        if loop.kind not in (tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED):
            return False
        if self._uniform(loop.min) and self._uniform(loop.extent):
            return True
        found = []
        walk(loop.body, (tirx.Evaluate, lambda e: found.append(e) if is_sync(e) else None))
        return bool(found)  # a loop that already holds block barriers runs alike on every thread

    # -- results
    def lifetime(self, tile):
        """(first, last) number of `tile`'s life, None when nothing touches it."""
        home = self.home.get(tile, ())
        lo = hi = None
        for number, loops in self.touches.get(tile, ()):
            depth = 0
            while depth < min(len(home), len(loops)) and home[depth] == loops[depth]:
                depth += 1
            a, b = self.loop_span[loops[depth]] if depth < len(loops) else (number, number)
            lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
        for produced, a, b in self.producer:
            if tile in produced:
                lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
        return None if lo is None else (lo, hi)

    def common_loop(self, a, b) -> bool:
        """Whether lifetimes `a` and `b` both lie inside one loop body (a tile allocated there lives per iteration)."""
        return any(lo < min(a[0], b[0]) and max(a[1], b[1]) <= hi for lo, hi in self.loop_span.values())


def _is_tma_load(node) -> bool:
    full = intrin.name_of(node)
    return full is not None and intrin.base_name(full) in _TMA_LOADS


def _waits_on_mbarrier(stmt) -> bool:
    found = []
    walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if intrin.is_call(c, intrin.MBAR_WAIT) else None))
    return bool(found)


# ---- asynchronous accesses ----------------------------------------------------------------------------------------
def _async_accesses(body, tiles, bases) -> dict:
    """{tile: {"wgmma", "cp_async", "tma_load", "bulk_store"}} of the asynchronous-proxy accesses to each tile
    (through itself or a view of it: `bases`, {view: tile})."""
    kinds = {}

    def on_call(call):
        name = intrin.name_of(call)
        if not name:
            return
        if intrin.is_call(call, intrin.WGMMA_DESC):
            kind = "wgmma"
        elif name.startswith(intrin.CP_ASYNC):
            kind = "cp_async"
        elif _is_tma_load(call):
            kind = "tma_load"
        elif intrin.is_bulk_store(call):
            kind = "bulk_store"
        else:
            return
        for t in _tiles_in(call, tiles, bases):
            kinds.setdefault(t, set()).add(kind)

    walk(body, (tvm.ir.Call, on_call))
    return kinds


def _reuse_barrier(before, arriving) -> list:
    """The statements ordering the accesses of the tiles `before` (kinds of asynchronous access, set) ahead of the
    tiles `arriving` (likewise) that take over their bytes."""
    stmts = []
    if "wgmma" in before:
        stmts.append(intrin.wgmma_wait(0))
    if "cp_async" in before:
        stmts.append(intrin.cp_async_wait(0))
    if before or arriving:
        stmts.append(intrin.fence_proxy_async())
    return stmts + [storage_sync()]


# ---- placement ----------------------------------------------------------------------------------------------------
def _alignment(nbytes: int, bulk: bool = False) -> int:
    """A tile's alignment in the arena: its size's largest power-of-two factor, 64 to 1024 bytes (whole-KB tiles
    are the swizzled ones and need 1 KB); at least 128 for a tile TMA loads or stores (`bulk`)."""
    a = 128 if bulk else 64  # (64: what TVM's merge gives every buffer)
    while a < _WHOLE_KB and nbytes % (2 * a) == 0:
        a *= 2
    return a


def _place(tiles, sizes, conflicts, aligns) -> dict:
    """{tile: byte offset}: larger alignments first, then larger tiles, each at the lowest offset aligned to
    `aligns[tile]` clear of the tiles it lives beside."""
    offsets = {}
    for t in sorted(tiles, key=lambda t: (-aligns[t], -sizes[t])):
        align = aligns[t]
        placed = sorted((offsets[u], offsets[u] + sizes[u]) for u in offsets if u in conflicts[t])
        at = 0
        for lo, hi in placed:
            if at + sizes[t] <= lo:
                break
            at = max(at, (hi + align - 1) // align * align)
        offsets[t] = at
    return offsets


def _pinned(body, tiles, bases) -> set:
    """Tiles referenced other than through loads, stores, access pointers, their allocation and their views'
    declarations (PlaceSharedTiles could not move those references); a view so referenced pins its tile."""
    moving = list(tiles) + list(bases)
    stand_ins = {t: tirx.decl_buffer(t.shape, str(t.dtype), t.name, scope=_DYNAMIC) for t in moving}
    moved = _retarget(body, stand_ins, {t: 0 for t in moving})
    moved = map_nodes(moved, [(tirx.AllocBuffer, lambda n: tirx.Evaluate(0) if n.buffer in tiles else n),
                              (tirx.DeclBuffer, lambda n: tirx.Evaluate(0) if n.buffer in bases else n)])
    return _tiles_in(moved, tiles, bases)


def _view_bases(body, tiles):
    """({view: tile}, unresolved): every ``shared.dyn`` DeclBuffer over the start of a tile's memory (a T.view /
    T.reshape, directly or through another view) mapped to that tile; `unresolved` whether some DeclBuffer views
    memory otherwise (then no plan is made)."""
    bases, unresolved = {}, [False]

    def on_decl(node):
        buf = node.buffer
        if str(buf.scope()) != _DYNAMIC:
            return
        data = node.data
        base = None
        if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and data.op.name == _BUFFER_DATA:
            base = data.args[0]
            base = bases.get(base, base)
        offset = buf.elem_offset
        if base in tiles and isinstance(offset, tirx.IntImm) and int(offset) == 0:
            bases[buf] = base
        else:
            unresolved[0] = True

    walk(body, (tirx.DeclBuffer, on_decl))
    return bases, unresolved[0]


def plan_reuse(kernel_body, limit: int, static_bytes: int, uniform_vars) -> TileReuse | None:
    """The placement of the ``shared.dyn`` tiles allocated in `kernel_body` (module docstring), or None when they
    fit side by side (or none is a plain allocation whose size is known)."""
    allocs = {}

    def on_alloc(node):
        if str(node.buffer.scope()) == _DYNAMIC:
            allocs.setdefault(node.buffer, node)

    walk(kernel_body, (tirx.AllocBuffer, on_alloc))
    tiles = list(allocs)
    padded = {t: buffer_bytes(t) for t in tiles}
    if any(v is None for v in padded.values()) or block_footprint(static_bytes, sum(padded.values())) <= limit:
        return None
    bases, unresolved = _view_bases(kernel_body, set(tiles))
    if len(tiles) < 2 or unresolved:  # nothing to share, or memory viewed in a way not planned
        return TileReuse({}, sum(padded.values()), False, kernel_body)
    # placed by tilex, a tile padded to whole KB for TVM's merge takes only the bytes it uses
    sizes = {t: used_bytes(allocs[t]) for t in tiles}
    kinds = _async_accesses(kernel_body, set(tiles), bases)
    aligns = {t: _alignment(sizes[t], bool(kinds.get(t, set()) & {"tma_load", "bulk_store"})) for t in tiles}
    regions = []
    walk(kernel_body, (tirx.AttrStmt, lambda n: regions.append(n) if n.attr_key == THREAD_RANGE else None))
    tile_set = set(tiles)
    if regions:
        # the thread regions (T.ws) run side by side: their tiles are packed, never share bytes, need no barrier
        offsets = _place(tiles, sizes, {t: tile_set - {t} for t in tiles}, aligns)
        size = max(offsets[t] + sizes[t] for t in tiles)
        if block_footprint(static_bytes, size) <= limit and not _pinned(kernel_body, tile_set, bases):
            return TileReuse(offsets, size, True, kernel_body)
        return TileReuse({}, size, False, kernel_body,
                         "the thread regions (T.ws) of this kernel run side by side: their tiles never share memory")
    timeline = _Timeline(tile_set, uniform_vars, bases=bases)
    timeline.visit(kernel_body)
    span = (0, timeline.count)
    pinned = _pinned(kernel_body, tile_set, bases)
    life = {t: (span if t in pinned else (timeline.lifetime(t) or span)) for t in tiles}
    conflicts = {t: {u for u in tiles if u is not t and life[u][0] <= life[t][1] and life[t][0] <= life[u][1]}
                 for t in tiles}
    offsets = _place(tiles, sizes, conflicts, aligns)
    size = max(offsets[t] + sizes[t] for t in tiles)
    reuse = TileReuse(offsets, size, block_footprint(static_bytes, size) <= limit, kernel_body)
    if not reuse.fits:
        return reuse

    # reuse barriers: before the first touch of every tile that takes over bytes used before it
    at = {}  # number -> (async kinds before, async kinds arriving)
    for t in tiles:
        earlier = [u for u in tiles if u is not t and offsets[u] < offsets[t] + sizes[t]
                   and offsets[t] < offsets[u] + sizes[u]
                   and (life[u][1] < life[t][0] or timeline.common_loop(life[t], life[u]))]
        if not earlier:
            continue
        point = life[t][0]
        if point not in timeline.points:  # (not expected: every statement the timeline numbers starts one)
            return TileReuse({}, reuse.size, False, kernel_body, f"no barrier can go before '{t.name}' is used")
        before, arriving = at.setdefault(point, (set(), set()))
        for u in earlier:
            before |= kinds.get(u, set())
        arriving |= kinds.get(t, set())
    barriers = {p: _reuse_barrier(b, a) for p, (b, a) in at.items()
                if not (timeline.points[p] and not b and not a)}
    if barriers:
        reuse.body = _Timeline(tile_set, uniform_vars, barriers, bases).visit(kernel_body)
    return reuse


# ---- PlaceSharedTiles -----------------------------------------------------------------------------------------------
def _retarget(body, views, offsets):
    """`body` with each tile's loads, stores and access pointers moved to its view at its byte offset."""

    def shift(t, index, dtype):
        step = offsets[t] * 8 // _element_bits(dtype)
        if step == 0:
            return index
        if isinstance(index, tirx.Ramp):
            return tirx.Ramp(index.base + tirx.const(step, index.base.dtype), index.stride, index.lanes)
        return index + tirx.const(step, index.dtype)

    def on_load(node):
        t = node.source
        if t not in views:
            return node
        idx = list(node.indices)
        idx[-1] = shift(t, idx[-1], t.dtype)
        return tirx.BufferLoad(views[t], idx)

    def on_store(node):
        t = node.buffer
        if t not in views:
            return node
        idx = list(node.indices)
        idx[-1] = shift(t, idx[-1], t.dtype)
        return tirx.BufferStore(views[t], node.value, idx)

    def on_call(node):
        if not (isinstance(node.op, tvm.ir.Op) and node.op.name == _ACCESS_PTR):
            return node
        data = node.args[1]
        if not (isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and data.op.name == _BUFFER_DATA
                and data.args[0] in views):
            return node
        t = data.args[0]
        args = list(node.args)
        args[1] = views[t].data
        args[2] = shift(t, args[2], node.args[0].dtype)
        return tirx.call_intrin(node.dtype, _ACCESS_PTR, *args)

    return map_nodes(body, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store), (tvm.ir.Call, on_call)],
                     order="post")


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.PlaceSharedTiles")
def PlaceSharedTiles(func, mod, ctx):  # noqa: N802
    placement = func.attrs.get(SHARED_PLACEMENT_ATTR) if func.attrs is not None else None
    if placement is None:
        return func
    here = {}

    def on_alloc(node):
        here.setdefault(node.buffer, used_bytes(node))

    walk(func.body, (tirx.AllocBuffer, on_alloc))
    offsets = {t: int(o) for t, o in placement.items() if t in here}  # (one kernel of several: its own tiles)
    if not offsets:
        return func
    size = max(offsets[t] + here[t] for t in offsets)
    arena = tirx.decl_buffer((size,), "uint8", "buf_dyn_shmem", scope=_DYNAMIC)  # the name TVM's merge gives
    bases, _ = _view_bases(func.body, set(offsets))
    for v, t in bases.items():  # a tile's views move with it
        offsets[v], here[v] = offsets[t], here[t]
    placed = {t: tirx.decl_buffer(((offsets[t] + here[t]) * 8 // _element_bits(t.dtype),), str(t.dtype), t.name,
                                  data=arena.data, scope=_DYNAMIC) for t in offsets}
    first = [True]

    def on_seq(node):
        items = []
        for s in node.seq:
            if isinstance(s, tirx.AllocBuffer) and s.buffer in placed:
                if first[0]:
                    first[0] = False
                    items.append(tirx.AllocBuffer(arena))
                    items.extend(tirx.DeclBuffer(placed[t], data=arena.data) for t in placed if t not in bases)
                continue
            items.append(s)
        return node if len(items) == len(node.seq) else seq(items)

    def on_decl(node):
        return tirx.DeclBuffer(placed[node.buffer], data=arena.data) if node.buffer in bases else node

    body = map_nodes(func.body, [(tirx.DeclBuffer, on_decl), (tirx.SeqStmt, on_seq)], order="post")
    body = _retarget(body, placed, offsets)
    return func.with_body(body).without_attr(SHARED_PLACEMENT_ATTR)


def _element_bits(dtype) -> int:
    dt = tvm.DataType(str(dtype))
    return dt.bits * dt.lanes
