"""PersistentTiles: run a warp-specialized kernel on a persistent grid, one block per multiprocessor slot.

Consumes: per-thread TIR after WarpSpecialize. Its producer and consumer pipeline loops sit in
``tilex.ws_pipeline_base`` attributes (node: the var ``base`` that offsets their stage and barrier-phase counter,
value: the loop's trip count ``n``) around ``tilex.ws_pipeline_lo`` / ``_hi`` attributes (vars of the loop's
iteration range, bound here to the loop's bounds or to a stream-K segment of them); the grid is ``blockIdx.x``
(x ``blockIdx.y``); a ``T.use_swizzle`` marker may still be in the consumer's statements.
Produces, when the kernel qualifies (below): a grid of ``P = min(tiles, SMs x blocks per SM)`` blocks on
``blockIdx.x``; the producer thread and the consumer warpgroups each loop over output tiles
``tile = blockIdx.x + i * P`` (``i = 0, 1, ...``), deriving the kernel's block indices from ``tile`` (rasterized
as T.use_swizzle asks, the marker is consumed) and continuing the pipeline across tiles with ``base = i * n``, so
stage ``g % S`` and phase ``g // S % 2`` of iteration ``g = i * n + k`` stay consistent between the two roles.
The producer thereby loads the next tile's first stages while the consumers run the previous tile's epilogue,
and barrier setup and launch cost are paid once per block instead of once per tile.
When the grid has an even number of block rows (and an even rasterization panel), blocks also run in clusters
of two on tile pairs that multicast the operand both tiles share (:mod:`.clusters`; ``tilex.persistent_cluster``
= 4 makes groups of four). Units that do not divide evenly among the workers are shared in segments of their K
iterations (stream-K, :mod:`.stream_k`) as ``tilex.stream_k`` asks (1, or "auto": when its cost rule says it pays).
Otherwise: ``base`` is 0 and the attributes are removed (one block per tile, as before), and the kernel may run
in row clusters along x (``tilex.cluster_size``, :mod:`.clusters`).

A kernel qualifies when persistence is not disabled (``tilex.disable_persistent``), the grid has a static x
extent and a static y extent with more tiles than block slots (or fewer, with stream-K: the grid is then every
slot, sharing the few tiles' K iterations: a skinny GEMM), or a y extent of kernel sizes alone (a
``T.dynamic`` M: the grid is then every slot, stream-K shares whatever the run-time tile count leaves over,
and a cluster's last group may hang past the grid), no ``blockIdx.z``, a trip count that does not depend on
the block indices. Shared memory the consumers use outside the pipeline loop (an epilogue tile) stays live
across the tile loop, so MergeSharedMemoryAllocations gives it bytes of its own (the producer refills stages
meanwhile).
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx

from tilex import config, env
from tilex.ir import intrin
from tilex.ir.hardware import CLUSTERS, TMA_MULTICAST, supports
from tilex.ir.names import WS_PIPELINE_BASE, WS_PIPELINE_HI, WS_PIPELINE_LO
from tilex.ir.visit import free_vars, map_nodes, seq_items, substitute, walk
from tilex.transform.hopper import clusters
from tilex.transform.hopper.occupancy import multiprocessors
from tilex.transform.hopper.roles import is_role_split
from tilex.transform.hopper.stream_k import StreamKPlan, Workers, segment_loop, stream_k_plan
from tilex.transform.kernel_scope import outer_launch_chain
from tilex.transform.thread_block_swizzle import drop_markers, find_markers, swizzled_block_index


@dataclass(frozen=True)
class PersistentPlan:
    """How PersistentTiles rewrites a qualifying kernel."""

    chain: list  # the outermost launch chain (grid and block attributes, outermost first)
    tags: dict  # thread tag -> its attribute in `chain`
    extents: dict  # blockIdx.x / blockIdx.y -> the original grid's static extent (1 when absent)
    grid: int  # blocks of the persistent grid (whole clusters)
    cluster_size: int  # blocks per cluster on tile groups (1: no clusters)
    stream_k: StreamKPlan | None  # None: no stream-K


def _base_attrs(stmt):
    found = []
    walk(stmt, (tirx.AttrStmt, lambda n: found.append(n) if n.attr_key == WS_PIPELINE_BASE else None))
    return found


def _loop_indices(items):
    """The indices of the statements in `items` that hold a pipeline loop."""
    return [i for i, x in enumerate(items) if _base_attrs(x)]


def _resolve_base(stmt, value_of, lo=None, hi=None):
    """Remove the pipeline attributes, binding each base var to ``value_of(attr)`` and the loop range vars to
    `lo` / `hi` (default: the loop's own bounds)."""
    bounds = {WS_PIPELINE_LO: lo, WS_PIPELINE_HI: hi}

    def on_attr(node):
        if node.attr_key == WS_PIPELINE_BASE:
            return substitute(node.body, {node.node: value_of(node)})
        if node.attr_key in bounds:
            value = bounds[node.attr_key]
            return substitute(node.body, {node.node: node.value if value is None else value})
        return node

    return map_nodes(stmt, (tirx.AttrStmt, on_attr), order="post")


def _blocks_per_sm(stmt):
    """The resident blocks per multiprocessor WarpSpecialize planned the registers for (1 without a plan)."""
    return intrin.read_launch_marker(stmt, intrin.MIN_BLOCKS_PER_SM) or 1


def persistent_tiles(func, target=None):
    """The PersistentTiles pass on `func` (see the module docstring); `target` gives the multiprocessor count."""
    attrs = _base_attrs(func.body)
    if not attrs:
        return func
    plan = _plan(func, attrs, target)
    if plan is None:
        body = _resolve_base(func.body, lambda a: tirx.const(0, "int32"))
        rows = clusters.row_cluster_plan(body) if _multicast_ok(target) else None
        if rows is None:
            return func.with_body(body)
        return func.with_body(_replace_launch(body, rows.chain[0], clusters.rewrite_row_cluster(rows)))
    launch = _rewrite(plan)
    if plan.stream_k is not None:
        launch = tirx.SeqStmt([plan.stream_k.workspace_binding(plan.grid), launch])
    return func.with_body(_replace_launch(func.body, plan.chain[0], launch))


def _replace_launch(body, outer, new_launch):
    return map_nodes(body, (tirx.AttrStmt, lambda n: new_launch if n.same_as(outer) else n), order="pre")


def _arch(target):
    return env.target_arch(target) if target is not None else env.DEFAULT_ARCH


def _multicast_ok(target):
    """Whether blocks may run in clusters that multicast TMA loads on `target` (`tilex.ir.hardware`)."""
    return supports(_arch(target), CLUSTERS) and supports(_arch(target), TMA_MULTICAST)


def _plan(func, attrs, target):
    if config.get("disable_persistent", False):
        return None
    # the outermost launch chain holds the grid and the block
    chain = outer_launch_chain(func.body)
    tags = clusters.launch_tags(chain)
    if "blockIdx.z" in tags or "blockIdx.x" not in tags or "threadIdx.x" not in tags:
        return None
    extents = {}
    for tag in ("blockIdx.x", "blockIdx.y"):
        if tag in tags:
            v = tags[tag].value
            # blockIdx.y may be symbolic (a T.dynamic size): the grid then covers every slot, and blocks left
            # without a tile run no iteration of their tile loop
            if not isinstance(v, tirx.IntImm) and (tag == "blockIdx.x" or not _symbolic_rows_ok(v)):
                return None
            extents[tag] = int(v.value) if isinstance(v, tirx.IntImm) else v
        else:
            extents[tag] = 1
    block_vars = {tags[t].node.var for t in ("blockIdx.x", "blockIdx.y") if t in tags}
    if any(free_vars(a.value) & block_vars for a in attrs):
        return None
    slots = multiprocessors(target) * _blocks_per_sm(func.body)
    symbolic = not isinstance(extents["blockIdx.y"], int)
    tiles = extents["blockIdx.x"] * extents["blockIdx.y"]
    # a grid of one wave or less goes persistent only to share its tiles' K iterations among every slot (stream-K)
    few = not symbolic and tiles <= slots
    split = [s for s in clusters.launch_items(chain) if is_role_split(s)]
    if len(split) != 1:
        return None
    # (shared memory the consumer touches outside its pipeline loop is live across the whole tile loop, so it
    # never shares bytes with a stage; tests/transform/test_persistent_tiles.py checks the offsets)
    grid = slots if symbolic or few else min(slots, tiles)
    # clusters need a grid of whole clusters: drop the few slots left over
    asked = clusters.persistent_cluster_size() if _multicast_ok(target) else 1
    size = clusters.tile_group_size(split[0].then_case, tags, extents, find_markers(func.body),
                                    grid - grid % asked, asked)
    grid -= grid % size
    cons = split[0].else_case
    items = seq_items(_consumer_parts(cons)[1])
    units = extents["blockIdx.x"] * _tile_groups(extents["blockIdx.y"], size)
    sk = stream_k_plan(items, _loop_indices(items), units, grid // size, int(cons.value),
                       tags["threadIdx.x"].node.var, attrs[0].value, _iteration_bytes(split[0].then_case))
    if few and sk is None:
        return None
    return PersistentPlan(chain, tags, extents, grid, size, sk)


def _iteration_bytes(producer):
    """Bytes one iteration of the producer's pipeline loop loads (the transaction count of its full barrier)."""
    found = []
    # (a call_extern: the device function name, the barrier, the byte count)
    walk(producer, (tirx.Evaluate, lambda n: found.append(n.value.args[2])
                    if intrin.is_call(n, intrin.MBAR_ARRIVE_EXPECT_TX) else None))
    return sum(int(b.value) for b in found if isinstance(b, tirx.IntImm))


def _tile_groups(gy, size):
    """Groups of `size` block rows in a grid `gy` rows high. A symbolic height may be odd: its last group then has
    rows past the grid, whose loads read zeros (TMA fills boxes outside the tensor) and whose stores the
    epilogue's bounds checks drop. (A static height is a multiple of `size`: clusters.tile_group_size.)"""
    return gy // size if isinstance(gy, int) else tirx.floordiv(gy + (size - 1), size)


def _symbolic_rows_ok(extent) -> bool:
    """A symbolic grid height persistence can take: one that only kernel parameters (sizes) determine."""
    return not any(v.name.startswith(("blockIdx", "threadIdx")) for v in free_vars(extent))


def _is_reg_alloc(stmt):
    return isinstance(stmt, tirx.Evaluate) and intrin.is_call(stmt, intrin.REG_ALLOC)


def _consumer_parts(cons):
    """(register-allocation statements, the rest without rasterization markers) of the consumer region."""
    items = seq_items(cons.body)
    head = [c for c in items if _is_reg_alloc(c)]
    return head, drop_markers(tirx.SeqStmt([c for c in items if not _is_reg_alloc(c)]))


def _rewrite(plan):
    """The launch chain of `plan` rewritten: the persistent grid, each role's tile loop (and its stream-K
    segments), the cluster multicast of a tile group's shared operand."""
    chain, tags, grid, size, sk = plan.chain, plan.tags, plan.grid, plan.cluster_size, plan.stream_k
    clustered = size > 1
    markers = find_markers(chain[0])
    panel, order = markers[0] if markers and markers[0][0] else (None, None)  # panel 0: the launch order
    gx, gy = plan.extents["blockIdx.x"], plan.extents["blockIdx.y"]
    groups = _tile_groups(gy, size)
    pid = tirx.Var("blockIdx_x", "int32")
    bx_var = tags["blockIdx.x"].node.var
    by_var = tags["blockIdx.y"].node.var if "blockIdx.y" in tags else None
    rank = tirx.floormod(pid, size)
    # a worker is a block, or a cluster of `size` blocks on a group of tiles; units are what a worker takes on
    w = Workers(grid=grid, pid=pid, size=size, rank=rank, worker=tirx.floordiv(pid, size) if clustered else pid,
                units=gx * groups, workers=grid // size)

    def coords(unit):
        hx, hy = tirx.floormod(unit, gx), tirx.floordiv(unit, gx)
        if clustered:
            # group q covers rows s*q .. s*q + s-1 of one block column
            if panel is not None:
                bx, q = swizzled_block_index(hx, hy, gx, groups, panel // size, order)
            else:
                bx, q = hx, hy
            by = q * size + rank
        elif panel is not None and by_var is not None:
            bx, by = swizzled_block_index(hx, hy, gx, gy, panel, order)
        else:
            bx, by = hx, hy
        mapping = {bx_var: bx}
        if by_var is not None:
            mapping[by_var] = by
        return mapping

    def place(stmt, unit, base, lo, hi):
        """`stmt` run on iterations [lo, hi) of `unit`, its pipeline counter k - lo + base."""
        return substitute(_resolve_base(stmt, lambda a: base, lo, hi), coords(unit))

    def tile_loop(stmt, name, exchange=False):
        i = tirx.Var(name, "int32")
        unit = w.worker + i * w.workers
        if sk is None:
            # units worker, worker + workers, ... below units
            trips = tirx.floordiv(w.units - 1 - w.worker, w.workers) + 1
        else:
            trips = w.rounds  # with stream-K: whole units first, then shares of the rest
        dp = tirx.For(i, 0, trips, tirx.ForKind.SERIAL,
                      substitute(_resolve_base(stmt, lambda a: i * a.value), coords(unit)))
        if sk is None:
            return dp
        loop_at = max(_loop_indices(seq_items(stmt))) if exchange else None
        return tirx.SeqStmt([dp, segment_loop(sk, w, stmt, name, place, loop_at)])

    out = []
    for s in clusters.launch_items(chain):
        if is_role_split(s):
            prod_branch, cons = s.then_case, s.else_case
            p_items = seq_items(prod_branch)
            if clustered:
                p_items = [clusters.multicast_shared_loads(p, by_var, rank, size) for p in p_items]
            p_items = [tirx.IfThenElse(p.condition, tile_loop(p.then_case, "tile_p"), None)
                       if isinstance(p, tirx.IfThenElse) else p for p in p_items]
            head, rest = _consumer_parts(cons)
            if clustered:
                rest = clusters.release_to_all(rest, rank, size)
            c_body = tirx.SeqStmt(head + [tile_loop(rest, "tile_c", exchange=True)])
            s = tirx.IfThenElse(s.condition, tirx.SeqStmt(p_items),
                                tirx.AttrStmt(cons.node, cons.attr_key, cons.value, c_body))
        elif clustered:
            s = clusters.cluster_setup(s, size)
        out.append(s)
    if clustered:
        out = clusters.cluster_launch(out, size)
    new_body = tirx.SeqStmt(out) if len(out) > 1 else out[0]
    for a in reversed(chain):
        tag = a.node.thread_tag
        if tag == "blockIdx.y":
            continue
        if tag == "blockIdx.x":
            iv = tirx.IterVar(tvm.ir.Range(0, grid), pid, a.node.iter_type, tag)
            new_body = tirx.AttrStmt(iv, "thread_extent", tirx.const(grid, "int32"), new_body)
        else:
            new_body = tirx.AttrStmt(a.node, a.attr_key, a.value, new_body)
    return new_body
