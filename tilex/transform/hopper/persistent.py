"""PersistentTiles: run a warp-specialized kernel on a persistent grid, one block per multiprocessor slot.

Consumes: per-thread TIR after WarpSpecialize. Its producer and consumer pipeline loops sit in
``tilex.ws_pipeline_base`` attributes (node: the var ``base`` that offsets their stage and barrier-phase counter,
value: the loop's trip count ``n``) around ``tilex.ws_pipeline_lo`` / ``_hi`` attributes (vars of the loop's
iteration range, bound here to the loop's bounds or to a stream-K segment of them); the grid is ``blockIdx.x`` (x ``blockIdx.y``); a ``T.use_swizzle`` marker may
still be in the consumer's statements.
Produces, when the kernel qualifies (below): a grid of ``P = min(tiles, SMs x blocks per SM)`` blocks on
``blockIdx.x``; the producer thread and the consumer warpgroups each loop over output tiles
``tile = blockIdx.x + i * P`` (``i = 0, 1, ...``), deriving the kernel's block indices from ``tile`` (rasterized
as T.use_swizzle asks, the marker is consumed) and continuing the pipeline across tiles with ``base = i * n``, so
stage ``g % S`` and phase ``g // S % 2`` of iteration ``g = i * n + k`` stay consistent between the two roles.
The producer thereby loads the next tile's first stages while the consumers run the previous tile's epilogue,
and barrier setup and launch cost are paid once per block instead of once per tile.
When the grid has an even number of block rows (and an even rasterization panel), blocks also run in clusters
of two (``__cluster_dims__(2, 1, 1)``) on tile pairs: cluster ``c`` walks pairs ``q`` whose tiles are rows
``2q`` and ``2q + 1`` of one block column. The TMA loads that do not depend on ``by`` (the operand both tiles
share) are split between the two blocks and multicast into both; each consumer release also arrives on the
partner's empty barrier (whose count doubles), and cluster barriers replace the setup barrier and guard the
exit (``tilex.disable_tma_multicast`` turns this off; ``tilex.persistent_cluster`` = 4 makes groups of four).
Stream-K (opt-in, ``tilex.stream_k``): when the units (tiles, or tile groups of a cluster) do not divide evenly
among the workers (blocks, or clusters), each worker runs ``units // workers`` whole units, then an equal share
of the remaining units' K iterations, in segments ``[lo, hi)`` of a unit. The worker holding a unit's first
iteration owns it; the others leave fp32 partial accumulators in global memory and raise a flag
(``tilex::streamk_fixup``, src/tilex/stream_k.h); the owner adds them and alone performs the epilogue's global
writes (when it pays off: benchmarks/README.md).
Otherwise: ``base`` is 0 and the attributes are removed (one block per tile, as before).

A kernel qualifies when persistence is not disabled (``tilex.disable_persistent``), the grid has static x/y
extents, more tiles than block slots, no ``blockIdx.z``, a trip count that does not depend on the block
indices. Shared memory the consumers use outside the pipeline loop (an epilogue tile) stays live across the
tile loop, so MergeSharedMemoryAllocations gives it bytes of its own (the producer refills stages meanwhile).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config, env
from tilex.ir import intrin
from tilex.ir.hardware import num_sms
from tilex.ir.names import WS_PIPELINE_BASE, WS_PIPELINE_HI, WS_PIPELINE_LO
from tilex.ir.shared_memory import buffer_bits
from tilex.ir.visit import buffers_used, is_op_call, is_sync, map_nodes, seq_items, substitute, walk
from tilex.transform.hopper.roles import is_role_split
from tilex.transform.kernel_scope import outer_launch_chain
from tilex.transform.thread_block_swizzle import drop_markers, find_markers, swizzled_block_index


def _base_attrs(stmt):
    found = []
    walk(stmt, (tirx.AttrStmt, lambda n: found.append(n) if n.attr_key == WS_PIPELINE_BASE else None))
    return found


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


def _free_vars(expr):
    out = set()
    walk(expr, (tvm.ir.Var, lambda v: out.add(v)))
    return out


def _blocks_per_sm(stmt):
    """The resident blocks per multiprocessor WarpSpecialize planned the registers for (1 without a plan)."""
    return intrin.read_launch_marker(stmt, intrin.MIN_BLOCKS_PER_SM) or 1


def persistent_tiles(func, target=None):
    attrs = _base_attrs(func.body)
    if not attrs:
        return func
    plan = _plan(func, attrs, target)
    if plan is None:
        body = _resolve_base(func.body, lambda a: tirx.const(0, "int32"))
        cluster = _row_cluster_plan(body, target)
        if cluster is None:
            return func.with_body(body)
        chain, size = cluster
        return func.with_body(_replace_launch(body, chain[0], _rewrite_row_cluster(chain, size)))
    outer = plan[0][0]
    return func.with_body(_replace_launch(func.body, outer, _rewrite(outer, *plan)))


def _replace_launch(body, outer, new_launch):
    return map_nodes(body, (tirx.AttrStmt, lambda n: new_launch if n.same_as(outer) else n), order="pre")


def _launch_items(chain):
    """The statements directly inside the launch chain (the block's top-level statements)."""
    return seq_items(chain[-1].body)


def _loads_not_depending_on(producer, var):
    """The producer's TMA loads whose coordinates do not use `var`: the operand blocks differing in `var` share."""
    return [e for e in _tma_loads(producer) if var not in _free_vars(e.value)]


def _plan(func, attrs, target):
    if config.get("disable_persistent", False):
        return None
    # the outermost launch chain holds the grid and the block
    chain = outer_launch_chain(func.body)
    tags = {a.node.thread_tag: a for a in chain}
    if "blockIdx.z" in tags or "blockIdx.x" not in tags or "threadIdx.x" not in tags:
        return None
    extents = {}
    for tag in ("blockIdx.x", "blockIdx.y"):
        if tag in tags:
            v = tags[tag].value
            if not isinstance(v, tirx.IntImm):
                return None
            extents[tag] = int(v.value)
        else:
            extents[tag] = 1
    block_vars = {tags[t].node.var for t in ("blockIdx.x", "blockIdx.y") if t in tags}
    if any(_free_vars(a.value) & block_vars for a in attrs):
        return None
    arch = env.target_arch(target) if target is not None else env.DEFAULT_ARCH
    sms = int(config.get("num_sms", 0) or num_sms(arch))
    slots = sms * _blocks_per_sm(func.body)
    tiles = extents["blockIdx.x"] * extents["blockIdx.y"]
    if tiles <= slots:
        return None
    split = [s for s in _launch_items(chain) if is_role_split(s)]
    if len(split) != 1:
        return None
    # (shared memory the consumer touches outside its pipeline loop is live across the whole tile loop, so it
    # never shares bytes with a stage; tests/transform/test_persistent_tiles.py checks the offsets)
    grid = min(slots, tiles)
    # clusters need a grid of whole clusters: drop the few slots left over
    size = _cluster_size()
    pair = _pair_plan(split[0].then_case, tags, extents, find_markers(func.body), grid - grid % size, size)
    if pair:
        grid -= grid % pair
    cons = split[0].else_case
    size = pair or 1
    sk = _stream_k_plan(seq_items(_consumer_parts(cons)[1]), tiles // size, grid // size, int(cons.value),
                        tags["threadIdx.x"].node.var, attrs[0].value)
    return chain, tags, extents, grid, pair, sk


def _cluster_size():
    """Blocks per cluster a persistent grid asks for (``tilex.persistent_cluster``; 2 by default, 1: none)."""
    size = int(config.get("persistent_cluster", 2) or 1)
    if size not in (1, 2, 4):
        raise ValueError(f"tilex.persistent_cluster must be 1, 2 or 4, got {size}")
    return size


def _consumer_parts(cons):
    """(register-allocation statements, the rest without rasterization markers) of the consumer region."""
    items = seq_items(cons.body)
    head = [c for c in items if _is_reg_alloc(c)]
    return head, drop_markers(tirx.SeqStmt([c for c in items if not _is_reg_alloc(c)]))


def _tma_loads(stmt):
    found = []
    walk(stmt, (tirx.Evaluate, lambda n: found.append(n) if intrin.is_call(n, intrin.TMA_LOAD_2D) else None))
    return found


def _pair_plan(producer, tags, extents, markers, grid, size):
    """The cluster size (0: none) of blocks running on tile groups (by = s*q .. s*q + s-1; same bx), the loads
    that do not depend on ``by`` (the operand the group's tiles share) split between the members and multicast to
    all; ``size`` is the cluster size asked for (`_cluster_size`)."""
    if size == 1 or config.get("disable_tma_multicast", False) or "blockIdx.y" not in tags:
        return 0
    if (extents["blockIdx.y"] % size or grid % size or (markers and markers[0][0] % size)
            or (markers and markers[0][1] != "row")):
        return 0
    shared = _loads_not_depending_on(producer, tags["blockIdx.y"].node.var)
    return size if len(shared) > 0 and len(shared) % size == 0 else 0


def _multicast_shared_loads(producer, var, rank, size=2):
    """Loads that do not depend on `var` (the operand every block of the cluster shares): load j is issued by the
    member of rank ``j % size`` and multicast into all members' shared memory (same offsets, each member's
    barrier is signalled), so each block still receives every box."""
    seen = []

    def on_eval(node):
        if not intrin.is_call(node, intrin.TMA_LOAD_2D) or var in _free_vars(node.value):
            return node
        j = len(seen)
        seen.append(node)
        args = list(node.value.args[1:])
        return tirx.IfThenElse(rank == j % size, intrin.tma_load_2d_multicast(*args, (1 << size) - 1), None)

    return map_nodes(producer, (tirx.Evaluate, on_eval))


def _release_to_both(consumer, rank, size=2):
    """A consumer release (arrive on the stage's empty barrier) also reaches every partner block's barrier: the
    partners' producers multicast into this block's stage too."""

    def on_eval(node):
        if not intrin.is_call(node, intrin.MBAR_ARRIVE):
            return node
        remote = [intrin.mbar_arrive_cluster(node.value.args[1], tirx.floormod(rank + d, size))
                  for d in range(1, size)]
        return tirx.SeqStmt([node] + remote)

    return map_nodes(consumer, (tirx.Evaluate, on_eval))


def _pair_setup(stmt, size=2):
    """Empty barriers count the consumer warps of every cluster member; the block barrier after their
    initialization becomes a cluster barrier (partners arrive remotely and multicast into this block)."""

    def on_eval(node):
        if intrin.is_call(node, intrin.MBAR_INIT):
            bar, count = node.value.args[1], node.value.args[2]
            if "tma_empty" in str(bar):
                return intrin.mbar_init(bar, count * size)
            return node
        if is_sync(node):
            return intrin.cluster_sync()
        return node

    return map_nodes(stmt, (tirx.Evaluate, on_eval))


def _rewrite(body, chain, tags, extents, grid, pair=0, sk=None):
    markers = find_markers(body)
    panel, order = markers[0] if markers else (None, None)
    gx, gy = extents["blockIdx.x"], extents["blockIdx.y"]
    tiles = gx * gy
    pid = tirx.Var("blockIdx_x", "int32")
    bx_var = tags["blockIdx.x"].node.var
    by_var = tags["blockIdx.y"].node.var if "blockIdx.y" in tags else None
    size = pair or 1
    rank = tirx.floormod(pid, size)
    # a worker is a block, or a cluster of `size` blocks on a group of tiles; units are what a worker takes on
    units, workers = tiles // size, grid // size
    worker = tirx.floordiv(pid, size) if pair else pid

    def coords(unit):
        hx, hy = tirx.floormod(unit, gx), tirx.floordiv(unit, gx)
        if pair:
            # group q covers rows s*q .. s*q + s-1 of one block column
            if panel is not None:
                bx, q = swizzled_block_index(hx, hy, gx, gy // size, panel // size, order)
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

    rounds = units // workers  # with stream-K: whole units first, then shares of the rest

    def tile_loop(stmt, name, fixup=None):
        i = tirx.Var(name, "int32")
        unit = worker + i * workers
        if sk is None:
            trips = tirx.floordiv(units - 1 - worker, workers) + 1  # units worker, worker + workers, ... below units
        else:
            trips = rounds
        dp = tirx.For(i, 0, trips, tirx.ForKind.SERIAL,
                      substitute(_resolve_base(stmt, lambda a: i * a.value), coords(unit)))
        if sk is None:
            return dp
        # stream-K: the remaining units' iterations, split evenly between the workers; a worker's share
        # [start, end) of them crosses unit boundaries in segments [lo, hi) of unit t
        n, wsk = sk["n"], (units % workers) * sk["n"]
        j = tirx.Var(name + "_sk", "int32")
        start = tirx.floordiv(worker * wsk, workers)
        end = tirx.floordiv((worker + 1) * wsk, workers)
        t = tirx.floordiv(start, n) + j
        lo = tirx.max(start - t * n, 0)
        hi = tirx.min(end - t * n, n)
        # the pipeline counter is k - lo + base: iterations this worker ran before the segment, plus k - lo
        base = rounds * n + t * n + lo - start
        if fixup is not None:
            stmt = fixup(stmt, t, lo, tirx.Or(lo > 0, hi < n), wsk, n)
        seg = substitute(_resolve_base(stmt, lambda a: base, lo, hi), coords(rounds * workers + t))
        segments = tirx.floordiv(end - 1, n) - tirx.floordiv(start, n) + 1
        return tirx.SeqStmt([dp, tirx.For(j, 0, segments, tirx.ForKind.SERIAL, seg)])

    def fixup(seg, t, lo, partial, wsk, n):
        """After a partial unit's K loop: exchange partial accumulators; only the block holding the sum writes."""
        items = seq_items(seg)
        at = max(i for i, x in enumerate(items) if _base_attrs(x))
        acc = sk["acc"]
        words = (buffer_bits(acc) + 31) // 32
        last = tirx.Var("sk_last", "int32")
        call = intrin.streamk_fixup(
            words, sk["threads"], grid, tirx.address_of(tirx.BufferLoad(acc, [0] * len(acc.shape))), sk["thread"], t,
            lo, pid, size, rank, workers, tirx.const(wsk, "int64"), n)
        bind = tirx.Bind(last, tirx.if_then_else(partial, call, tirx.const(1, "int32")))
        post = [_only_if(x, last != 0) for x in items[at + 1:]]
        return tirx.SeqStmt(items[:at + 1] + [bind] + post)

    out = []
    for s in _launch_items(chain):
        if is_role_split(s):
            prod_branch, cons = s.then_case, s.else_case
            p_items = seq_items(prod_branch)
            if pair:
                p_items = [_multicast_shared_loads(p, by_var, rank, size) for p in p_items]
            p_items = [tirx.IfThenElse(p.condition, tile_loop(p.then_case, "tile_p"), None)
                       if isinstance(p, tirx.IfThenElse) else p for p in p_items]
            head, rest = _consumer_parts(cons)
            if pair:
                rest = _release_to_both(rest, rank, size)
            c_body = tirx.SeqStmt(head + [tile_loop(rest, "tile_c", fixup if sk is not None else None)])
            s = tirx.IfThenElse(s.condition, tirx.SeqStmt(p_items),
                                tirx.AttrStmt(cons.node, cons.attr_key, cons.value, c_body))
        elif pair:
            s = _pair_setup(s, size)
        out.append(s)
    if pair:
        # neither block may exit while its partner can still arrive on its barriers
        out = [intrin.cluster_dims(size)] + out + [intrin.cluster_sync()]
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


def _is_reg_alloc(stmt):
    return isinstance(stmt, tirx.Evaluate) and intrin.is_call(stmt, intrin.REG_ALLOC)


def _row_cluster_plan(body, target):
    """(launch chain, cluster size) when ``tilex.cluster_size`` asks a warp-specialized kernel that is not made
    persistent to run in clusters along x, the members multicasting the loads that do not depend on ``bx`` (for
    C = A @ B with blocks over N: the A tile every block of a block row reads). This divides that operand's
    L2-to-SM traffic by the cluster size. Opt-in: on the H200 the coupled members made one-wave skinny GEMMs
    slower (128x8192x8192: 0.96 -> 0.91 of cuBLAS with 2, about half speed with 4, where clusters of four no
    longer fit in one wave)."""
    size = int(config.get("cluster_size", 0) or 0)
    if config.get("disable_tma_multicast", False) or not size:
        return None
    if size not in (2, 4):
        raise ValueError(f"tilex.cluster_size must be 2 or 4, got {size}")
    chain = outer_launch_chain(body)
    if chain is None:
        return None
    tags = {a.node.thread_tag: a for a in chain}
    if "blockIdx.x" not in tags or "threadIdx.x" not in tags or "blockIdx.z" in tags:
        return None
    gx = tags["blockIdx.x"].value
    if not isinstance(gx, tirx.IntImm) or int(gx.value) % size or int(gx.value) < size:
        return None
    split = [s for s in _launch_items(chain) if is_role_split(s)]
    if len(split) != 1:
        return None
    shared = _loads_not_depending_on(split[0].then_case, tags["blockIdx.x"].node.var)
    if not shared or any(find_markers(body)):
        return None
    return chain, size


def _rewrite_row_cluster(chain, size):
    """Clusters of `size` consecutive blocks along x (rank = bx % size) multicasting the bx-independent loads."""
    tags = {a.node.thread_tag: a for a in chain}
    bx_var = tags["blockIdx.x"].node.var
    rank = tirx.floormod(bx_var, size)
    out = []
    for s in _launch_items(chain):
        if is_role_split(s):
            cons = s.else_case
            s = tirx.IfThenElse(s.condition, _multicast_shared_loads(s.then_case, bx_var, rank, size),
                                tirx.AttrStmt(cons.node, cons.attr_key, cons.value,
                                              _release_to_both(cons.body, rank, size)))
        else:
            s = _pair_setup(s, size)
        out.append(s)
    out = [intrin.cluster_dims(size)] + out + [intrin.cluster_sync()]
    new_body = tirx.SeqStmt(out)
    for a in reversed(chain):
        new_body = tirx.AttrStmt(a.node, a.attr_key, a.value, new_body)
    return new_body


def _writes_global(stmt):
    found = []

    def on_store(n):
        if n.buffer.scope() == "global":
            found.append(n)

    def on_eval(n):
        if intrin.starts_with(n, intrin.GLOBAL_WRITE_PREFIXES):
            found.append(n)

    walk(stmt, [(tirx.BufferStore, on_store), (tirx.Evaluate, on_eval)])
    return bool(found)


def _only_if(stmt, cond):
    """`stmt` guarded by `cond` when it writes global memory (the epilogue of a block that does not write the
    tile still runs its shared-memory steps, so the barriers between them stay unconditional)."""
    return tirx.IfThenElse(cond, stmt, None) if _writes_global(stmt) else stmt


def _local_buffers(stmt):
    return [b for b in buffers_used(stmt) if b.scope() == "local"]


def _uses_buffer(stmt, buf):
    """Whether `stmt` reads or writes `buf` (through loads, stores or its data pointer, as tensor-core calls do)."""
    found = []
    # (TVM 0.27 spells a buffer's data pointer as the call tirx.buffer_data(var))
    data = buf.data
    key = data.args[0] if isinstance(data, tvm.ir.Call) else data

    def on_call(c):
        if is_op_call(c, "tirx.buffer_data") and c.args[0].same_as(key):
            found.append(c)

    walk(stmt, (tvm.ir.Call, on_call))
    return bool(found) or any(b.same_as(buf) for b in _local_buffers(stmt))


def _stream_k_plan(consumer_items, units, workers, threads, thread_var, n):
    """What the stream-K rewrite needs ({n, acc, threads, thread}), or None when it does not apply: off
    (``tilex.stream_k``), units split evenly already, a trip count that is not static, or not exactly one fp32
    accumulator (a local buffer the K loop and the statements after it both use)."""
    if not config.get("stream_k", False) or units % workers == 0 or not hasattr(n, "value"):
        return None
    at = [i for i, x in enumerate(consumer_items) if _base_attrs(x)]
    if len(at) != 1:
        return None
    after = _local_buffers(tirx.SeqStmt(consumer_items[at[0] + 1:])) if at[0] + 1 < len(consumer_items) else []
    acc = [b for b in after if _uses_buffer(consumer_items[at[0]], b)]
    if len(acc) != 1 or str(acc[0].dtype) != "float32" or (buffer_bits(acc[0]) // 32) % 4:
        return None
    return {"n": int(n.value), "acc": acc[0], "threads": threads, "thread": thread_var}
