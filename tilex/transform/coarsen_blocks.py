"""CoarsenBlocks (tile level, first after RegisterOperand): a GEMM's short K step takes two loop iterations per
pipeline stage, and a one-warpgroup block of 128 x N <= 128 output runs with its right-hand neighbour as one block
of two warpgroups and twice the columns.

Consumes: a tile program on an sm90 target that warp-specializes, whose statements are tile copies, fills, one
``T.gemm`` (in loops, T.Pipelined included) and T.Parallel nests (an element-wise epilogue), writing no element
outside those nests and reading no thread index. A
variable that steps tiles by their extent, ``... + v * e`` over an extent of e in one dimension of every operand
depending on it, with the shared tiles and fragments those operands meet used whole in that dimension, can step by
two: the tiles and the operands double in that dimension (`_widen`). Two such variables:

* K step: the T.Pipelined loop's variable (2+ stages, at least twice as many iterations), when two K steps of
  A fit in MIN_K_BITS (a 128-byte row): A's and B's tiles double along K, the loop runs half the
  iterations (an odd count reads one step past K: TMA loads fill it with zeros, which add nothing);
* block: ``bx`` of a static 2-d grid of 128-thread blocks whose gemm accumulates ``(128, n)``, n <= 128, with a
  K step of at least MIN_K_BITS: ``bx`` becomes ``2 * bx'`` on ``ceil(bx / 2)`` blocks of 256 threads, B's tile
  becomes ``(k, 2n)`` and the accumulator ``(128, 2n)``; only if the coarsened grid still gives every
  multiprocessor a block. A tile a copy fills from a global region stepping by ``bx`` (a bias vector) doubles
  too, and each T.Parallel nest runs its column loop over 2n: column c is column ``c % n`` of block
  ``2 bx' + c // n``, substituted exactly into the nest (a doubled tile takes c itself) and simplified, so
  ``bx * n + j`` becomes ``bx' * 2n + c``. A nest whose doubled tiles are indexed in that dimension by anything
  but one loop variable of extent n, or that uses ``bx`` without touching a doubled tile, keeps the block as
  written. (The K-step rewrite needs the nests outside its loop, clear of its tiles.) Either variable used
  anywhere else (a condition, a loop bound) keeps the program as written.

Either way the ring of stages must stay within MAX_RING_BYTES.
Produces: the program with the same results, in fewer and larger steps; the function attribute
``tilex.coarsened_blocks`` lists what was doubled. The gemm, the pipeline and the epilogue are then chosen for the
wider tiles by the passes after. ``tilex.disable_block_coarsening`` pins the program as written; nothing happens
with ``tilex.disable_warp_specialized`` or ``disable_tma`` (measured on TMA pipelines only).

Why: a warpgroup computing 128 x 128 issues two m64n128 wgmmas per k16, each reading B from shared memory; with
the TMA writes that is more shared-memory traffic per MAC than the SM delivers (benchmarks/README.md, issue 18). Two
warpgroups splitting a 128 x 256 tile by rows (m64n256) read B once each for twice the work. A 32-wide K step
(64-byte rows) pays a barrier round trip per two k16 steps. Measured on the H100, fp16, ratio to cuBLAS:
128x128x64 as written / coarsened 0.840 / 0.905 (4096^3), 0.824 / 0.967 (8192^3), 0.797 / 0.959
(4096 x 28672 x 8192); 128x128x32 as written 0.67-0.76, both doubled 0.89-1.01. With the bias + activation
epilogue of examples/gemm_epilogue.py (128x128x64, 128 threads), torch eager / tilex as written -> coarsened:
1.11-1.15 -> 1.20 (4096^3), 0.96-0.97 -> 1.12-1.14 (8192^3) (benchmarks/bench_gemm_epilogue.py).
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Op

from tilex import config
from tilex.ir.names import COARSENED_BLOCKS_ATTR, NARROWED_SKINNY_GEMM_ATTR, NUM_STAGES, REGION_OP
from tilex.ir.shared_memory import buffer_bytes
from tilex.ir.visit import BufferLoadNode, free_vars, map_nodes, substitute, walk
from tilex.op.base import is_global
from tilex.op.copy import CopyOp
from tilex.op.fill import FillOp
from tilex.op.gemm import GemmOp
from tilex.op.parallel import ParallelOp, collect_parallel_nest
from tilex.op.region import Region
from tilex.op.registry import parse_tile_op
from tilex.transform.hopper.occupancy import multiprocessors
from tilex.transform.hopper.ws_decision import warp_specialization_on
from tilex.transform.kernel_scope import kernel_info, outer_launch_chain
from tilex.transform.op_collect import collect_tile_ops, is_parallel_nest

#: The block this pass coarsens: one warpgroup on 128 rows.
THREADS, ROWS = 128, 128
#: The K step (bits of A's row per pipeline stage) a block needs before it is coarsened: one 128-byte swizzle row.
#: A step of half that is doubled first (two loop iterations per stage). Coarsening the block of a shorter step
#: alone lost: 128x128x32 fp16 at 0.71-0.75 of cuBLAS as written (two blocks per multiprocessor, six stages between
#: them), 0.68-0.73 as one 128x256x32 block of three.
MIN_K_BITS = 128 * 8
#: Most bytes the pipeline's ring may take after coarsening (leaves room for an epilogue tile in 227 KB).
MAX_RING_BYTES = 160 * 1024


def coarsen_blocks(func, target):
    """The pass (see the module docstring); `func` unchanged when it does not apply."""
    # measured on warp-specialized TMA pipelines only
    if config.get("disable_block_coarsening", False) or not warp_specialization_on(target):
        return func
    # NarrowSkinnyGemm chose these blocks to fill the multiprocessors: pairing them would halve their number
    if func.attrs is not None and NARROWED_SKINNY_GEMM_ATTR in func.attrs:
        return func
    notes = []
    plan = _k_plan(func)
    if plan is not None:
        loop, widen = plan
        func = _widen(func, loop.loop_var, widen, loop=loop)
        notes.append("two iterations of the T.Pipelined loop per stage: " + _shapes(widen))
    plan = _plan(func, target)
    if plan is not None:
        bx, widen, chain, columns = plan
        func = _widen(func, bx, widen, chain=chain, columns=columns)
        notes.append(f"blocks (2 bx, by) and (2 bx + 1, by) run as one block of {2 * THREADS} threads: "
                     + _shapes(widen))
    return func.with_attr(COARSENED_BLOCKS_ATTR, notes) if notes else func


def _shapes(widen):
    out = []
    for b, d in widen.items():
        shape = [int(x) for x in b.shape]
        wide = list(shape)
        wide[d] *= 2
        out.append(f"{b.name} {shape} -> {wide}")
    return ", ".join(out)


def gemm_program(func, one_warpgroup=True):
    """(kernel info, launch chain, tile ops, the gemm) of a program this pass may rewrite (`one_warpgroup`: a
    block of THREADS threads on ROWS rows), else None."""
    info = kernel_info(func)
    chain = outer_launch_chain(func.body)
    if info is None or chain is None or (one_warpgroup and info.threads != THREADS):
        return None
    inner = chain[-1].body
    if info.thread_var in _vars_in(inner) or _has_stores(inner):
        return None
    ops = [op for _, op in collect_tile_ops(inner)]
    if not all(isinstance(op, (CopyOp, FillOp, GemmOp, ParallelOp)) for op in ops):
        return None
    gemms = [op for op in ops if isinstance(op, GemmOp)]
    if len(gemms) != 1 or gemms[0].swapped or gemms[0].trans_a or (one_warpgroup and gemms[0].M != ROWS):
        return None
    return info, chain, ops, gemms[0]


def _k_plan(func):
    """(the T.Pipelined loop, {buffer: dimension to double}) when two of the gemm's K steps fit in MIN_K_BITS,
    else None: two iterations then load and multiply as one."""
    found = gemm_program(func, one_warpgroup=False)
    if found is None:
        return None
    _, chain, ops, g = found
    if 2 * k_bits(g) > MIN_K_BITS:
        return None
    loops = pipelined_loops(chain[-1].body)
    if len(loops) != 1:
        return None
    loop = loops[0]
    stages = int(loop.annotations[NUM_STAGES])
    if stages < 2 or not (isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0
                          and isinstance(loop.extent, tirx.IntImm) and int(loop.extent.value) >= 2 * stages):
        return None
    k = loop.loop_var
    widen = {g.A.buffer: 1, g.B.buffer: 1 if g.trans_b else 0}
    if not _consistent(loop.body, ops, k, g.K, widen) or _used_outside_tile_ops(loop.body, k):
        return None
    # T.Parallel nests (an epilogue) neither run in the loop nor touch its tiles
    if any(isinstance(op, ParallelOp) and (k in free_vars(op.loop) or any(b in widen for b in op.buffers()))
           for op in ops):
        return None
    # the ring doubles: its stages must still leave room for the rest (an epilogue tile)
    if 2 * stages * sum(buffer_bytes(b) for b in widen) > MAX_RING_BYTES:
        return None
    return loop, widen


def k_bits(gemm):
    """Bits of one row of the gemm's A tile along K: the pipeline's K step."""
    return gemm.K * tvm.DataType(str(gemm.A.buffer.dtype)).bits


def _plan(func, target):
    """(the bx var, {buffer: dimension to double}, the launch chain, {T.Parallel nest: its column loop var} for
    the nests that double) or None."""
    found = gemm_program(func)
    if found is None:
        return None
    _, chain, ops, g = found
    tags = {a.node.thread_tag: a for a in chain}
    if set(tags) != {"blockIdx.x", "blockIdx.y", "threadIdx.x"} \
            or not all(isinstance(a.value, tirx.IntImm) for a in tags.values()):
        return None
    gx, gy = int(tags["blockIdx.x"].value.value), int(tags["blockIdx.y"].value.value)
    if (gx + 1) // 2 * gy < multiprocessors(target):
        return None
    if g.N > 128 or k_bits(g) < MIN_K_BITS:
        return None
    bx = tags["blockIdx.x"].node.var
    widen = {g.C.buffer: 1, g.B.buffer: 0 if g.trans_b else 1}
    widen.update(_copied_tiles(ops, bx, g.N, widen))
    if not _consistent(chain[-1].body, ops, bx, g.N, widen) or _used_outside_tile_ops(chain[-1].body, bx):
        return None
    columns = {op.loop: _nest_column(op, bx, g.N, widen) for op in ops if isinstance(op, ParallelOp)}
    if any(c is False for c in columns.values()):
        return None
    stages = [int(f.annotations[NUM_STAGES]) for f in pipelined_loops(chain[-1].body)] or [1]
    if stages[0] * (buffer_bytes(g.A.buffer) + 2 * buffer_bytes(g.B.buffer)) > MAX_RING_BYTES:
        return None
    return bx, widen, chain, {nest: c for nest, c in columns.items() if c is not None}


def _copied_tiles(ops, var, n, widen):
    """{tile: dimension} for the tiles outside `widen` that a copy fills from (or writes to) a global region stepping
    by `var` (a bias vector of the block's columns): they double with the block. Tiles a copy fills only in part
    along that dimension are left out (`_consistent` then refuses the program)."""
    out = {}
    for op in ops:
        if not isinstance(op, CopyOp) or is_global(op.src.buffer) == is_global(op.dst.buffer):
            continue
        glob, local = (op.src, op.dst) if is_global(op.src.buffer) else (op.dst, op.src)
        if local.buffer in widen:
            continue
        d = _step_dim(glob, var, n)
        if d is None or d is False:
            continue
        local_d = _local_dim(glob, local, d)
        if local_d is not None:
            out[local.buffer] = local_d
    return out


def _nest_column(op, var, n, widen):
    """The loop var of T.Parallel nest `op` that walks the widened dimension of the tiles in `widen` it touches
    (None: it touches none and does not use `var`), or False when the nest cannot double along it: every access
    to such a tile must index that dimension with the same loop var, of extent n, and use it nowhere else in
    the tile's indices; a nest without such a tile must not use `var` (it would no longer know its block)."""
    vars_, extents, _ = collect_parallel_nest(op.loop)
    column = None
    for buf, idx, _ in op.accesses:
        if buf not in widen:
            continue
        d = widen[buf]
        v = idx[d]
        if not isinstance(v, tirx.Var) or not any(v.same_as(x) for x in vars_) \
                or (column is not None and not v.same_as(column)):
            return False
        if any(v in free_vars(e) for i, e in enumerate(idx) if i != d):
            return False
        column = v
    if column is None:
        return False if var in free_vars(op.loop) else None
    extent = extents[[i for i, x in enumerate(vars_) if x.same_as(column)][0]]
    if not (isinstance(extent, tirx.IntImm) and int(extent.value) == n):
        return False
    # tiles outside `widen` indexed by the column would need doubling as well
    for buf, idx, _ in op.accesses:
        if buf not in widen and not is_global(buf) and any(column in free_vars(e) for e in idx):
            return False
    return column


def _widen_nest(loop, column, var, new_var, wide):
    """T.Parallel nest `loop` of the coarsened block: its `column` loop (`_nest_column`), of extent n, runs 2n wide,
    and a column c of it is column ``c % n`` of the original block ``2 * new_var + c // n``, so the nest reads and
    writes what the two blocks did; the doubled tiles (`wide`: tile -> (wide tile, dimension)) take c itself."""
    _, _, body = collect_parallel_nest(loop)
    wide_col = tirx.Var(column.name, column.ty.dtype)
    loops = []
    node = loop
    while isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
        loops.append(node)
        node = node.body
    n = next(int(f.extent.value) for f in loops if f.loop_var.same_as(column))
    body = substitute(body, {column: tirx.floormod(wide_col, n), var: new_var * 2 + tirx.floordiv(wide_col, n)})
    ana = tvm.sym.Analyzer()

    def access(buf, indices):
        """(buffer, simplified indices) of an access: a doubled tile's, at column c (the access indexed the column
        by its loop var alone, which the substitution made c % n)."""
        indices = list(indices)
        if buf in wide:
            buf, d = wide[buf]
            indices[d] = wide_col
        return buf, [ana.simplify(i) for i in indices]

    def on_store(node):
        buf, indices = access(node.buffer, node.indices)
        return tirx.BufferStore(buf, node.value, indices)

    def on_load(node):
        return tirx.BufferLoad(*access(node.source, node.indices))

    def on_if(node):
        return tirx.IfThenElse(ana.simplify(node.condition), node.then_case, node.else_case)

    body = map_nodes(body, [(tirx.BufferStore, on_store), (BufferLoadNode, on_load), (tirx.IfThenElse, on_if)],
                     order="post")
    # rebuild the nest outermost first, the column loop twice as long
    for f in reversed(loops):
        if f.loop_var.same_as(column):
            body = tirx.For(wide_col, f.min, tirx.const(2 * n, "int32"), f.kind, body, f.thread_binding,
                            f.annotations)
        else:
            body = tirx.For(f.loop_var, f.min, f.extent, f.kind, body, f.thread_binding, f.annotations)
    return body


def pipelined_loops(stmt):
    """The T.Pipelined loops (``tilex.num_stages`` annotated) in `stmt`."""
    loops = []
    walk(stmt, (tirx.For, lambda f: loops.append(f) if NUM_STAGES in f.annotations else None))
    return loops


def _consistent(stmt, ops, var, n, widen):
    """Whether every operand that depends on `var` does so as ``... + var * n`` over an extent of n in one
    dimension, landing in the widened dimension of the tiles in `widen`, and those tiles are used whole there."""
    for op in ops:
        if isinstance(op, CopyOp) and not _copy_ok(op, var, n, widen):
            return False
    for region in _regions(stmt):
        if region.buffer in widen:
            d = widen[region.buffer]
            if not _covers(region, d) or any(var in free_vars(m) for m in region.mins):
                return False
        elif not is_global(region.buffer) and any(var in free_vars(m) for m in region.mins):
            return False
        elif is_global(region.buffer) and _step_dim(region, var, n) is False:
            return False
    return True


def _vars_in(stmt):
    found = set()
    walk(stmt, (tirx.Var, lambda v: found.add(v)))
    return found


def _has_stores(stmt):
    """Whether `stmt` writes any buffer element by element outside T.Parallel nests (code outside tile operators,
    which the pass does not widen)."""
    found = []

    def on_for(node):
        return tvm_ffi.WalkResult.SKIP if is_parallel_nest(node) else None

    walk(stmt, [(tirx.For, on_for), (tirx.BufferStore, lambda n: found.append(n))], order="pre")
    return bool(found)


def _used_outside_tile_ops(stmt, var):
    """Whether `var` appears in `stmt` outside tile operator calls and T.Parallel nests (a condition, a loop bound, a
    let): the rewrites substitute it inside those only in the forms they check, so any other use refuses them."""
    found = []

    def on_eval(node):
        if isinstance(node.value, tvm.ir.Call) and parse_tile_op(node.value) is not None:
            return tvm_ffi.WalkResult.SKIP
        return None

    def on_for(node):
        if is_parallel_nest(node):
            return tvm_ffi.WalkResult.SKIP
        return None

    def on_var(v):
        if v.same_as(var):
            found.append(v)

    walk(stmt, [(tirx.Evaluate, on_eval), (tirx.For, on_for), (tvm.ir.Var, on_var)], order="pre")
    return bool(found)


def _regions(stmt):
    out = []
    region_op = Op.get(REGION_OP)
    walk(stmt, (tvm.ir.Call, lambda c: out.append(Region.from_call(c)) if c.op.same_as(region_op) else None))
    return out


def _covers(region, d):
    e = region.extents[d]
    return isinstance(region.mins[d], tirx.IntImm) and int(region.mins[d].value) == 0 \
        and isinstance(e, tirx.IntImm) and int(e.value) == int(region.buffer.shape[d])


def _step_dim(region, var, n):
    """The dimension of a global region that depends on `var` (None: none), or False when the dependence is not
    one dimension ``... + var * n`` over an extent of n."""
    dims = [d for d, m in enumerate(region.mins) if var in free_vars(m)]
    if not dims:
        return None
    if len(dims) != 1:
        return False
    d = dims[0]
    e = region.extents[d]
    if not (isinstance(e, tirx.IntImm) and int(e.value) == n):
        return False
    ana = tvm.sym.Analyzer()
    step = ana.simplify(substitute(region.mins[d], {var: var + 1}) - region.mins[d])
    return d if isinstance(step, tirx.IntImm) and int(step.value) == n else False


def _copy_ok(op, var, n, widen):
    """A copy between a global region and a local buffer: its `var` dimension is the local buffer's widened one."""
    if not is_global(op.src.buffer) and not is_global(op.dst.buffer):
        return widen.get(op.src.buffer) == widen.get(op.dst.buffer)  # both widened the same way, or neither
    glob, local = (op.src, op.dst) if is_global(op.src.buffer) else (op.dst, op.src)
    if is_global(local.buffer):
        return False
    d = _step_dim(glob, var, n)
    if d is False:
        return False
    if d is None:
        return local.buffer not in widen
    want = _local_dim(glob, local, d)
    return want is not None and widen.get(local.buffer) == want


def _local_dim(glob, local, d):
    """The dimension of the local side of a copy that dimension `d` of its global region lands in (the k-th
    non-unit dimension of one is the k-th of the other), or None when they do not pair up."""
    def wide_dims(region):
        return [i for i, e in enumerate(region.extents) if not (isinstance(e, tirx.IntImm) and int(e.value) == 1)]

    g_dims, l_dims = wide_dims(glob), wide_dims(local)
    if d not in g_dims or len(g_dims) != len(l_dims):
        return None
    return l_dims[g_dims.index(d)]


def _widen(func, var, widen, chain=None, loop=None, columns=None):
    """`func` with the tiles of `widen` doubled in their dimension, the operands depending on `var` doubled in
    theirs, and `var` stepping by two: the launch's block index (`chain`: half the blocks, twice the threads;
    `columns`: the T.Parallel nests that double, with their column loop var) or the pipelined `loop`'s variable (half the iterations)."""
    wide = {}
    for b, d in widen.items():
        shape = list(b.shape)
        shape[d] = shape[d] * 2
        wide[b] = (tirx.decl_buffer(shape, str(b.dtype), b.name, scope=str(b.scope())), d)
    region_op = Op.get(REGION_OP)

    def doubled(e):
        return tirx.const(int(e.value) * 2, "int32")

    def on_call(c):
        if not c.op.same_as(region_op):
            return c
        r = Region.from_call(c)
        extents = list(r.extents)
        if r.buffer in wide:
            buf, d = wide[r.buffer]
            extents[d] = doubled(extents[d])
            return Region(buf, list(r.mins), extents).to_call(int(c.args[1].value))
        if is_global(r.buffer):
            dims = [d for d, m in enumerate(r.mins) if var in free_vars(m)]
            if dims:
                extents[dims[0]] = doubled(extents[dims[0]])
                return Region(r.buffer, list(r.mins), extents).to_call(int(c.args[1].value))
        return c

    def on_alloc(node):
        return tirx.AllocBuffer(wide[node.buffer][0]) if node.buffer in wide else node

    new_var = tirx.Var(var.name, var.ty.dtype)
    if loop is not None:
        body = substitute(map_nodes(loop.body, [(tvm.ir.Call, on_call)]), {var: new_var * 2})
        trips = (int(loop.extent.value) + 1) // 2
        new_loop = tirx.For(new_var, loop.min, tirx.const(trips, "int32"), loop.kind, body, loop.thread_binding,
                            loop.annotations)
        out = map_nodes(func.body, [(tirx.For, lambda f: new_loop if f.same_as(loop) else f),
                                    (tirx.AllocBuffer, on_alloc)], order="pre")
        return func.with_body(out)
    launch = chain[0]
    nests = {nest: _widen_nest(nest, column, var, new_var, wide) for nest, column in (columns or {}).items()}
    body = map_nodes(chain[-1].body, [(tirx.For, lambda f: next((w for x, w in nests.items() if x.same_as(f)), f))],
                     order="pre")
    body = map_nodes(body, [(tvm.ir.Call, on_call), (tirx.AllocBuffer, on_alloc)])
    body = substitute(body, {var: new_var * 2})
    for a in reversed(chain):
        tag = a.node.thread_tag
        if tag == "blockIdx.x":
            gx = (int(a.value.value) + 1) // 2
            iv = tirx.IterVar(tvm.ir.Range(0, gx), new_var, a.node.iter_type, tag)
            body = tirx.AttrStmt(iv, a.attr_key, tirx.const(gx, "int32"), body)
        elif tag == "threadIdx.x":
            iv = tirx.IterVar(tvm.ir.Range(0, 2 * THREADS), a.node.var, a.node.iter_type, tag)
            body = tirx.AttrStmt(iv, a.attr_key, tirx.const(2 * THREADS, "int32"), body)
        else:
            body = tirx.AttrStmt(a.node, a.attr_key, a.value, body)
    return func.with_body(map_nodes(func.body, (tirx.AttrStmt, lambda x: body if x.same_as(launch) else x),
                                    order="pre"))
