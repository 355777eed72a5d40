"""SwapSkinnyGemm (tile level, before CoarsenBlocks): a GEMM whose A has so few rows that one row block holds them
all computes transposed tiles, C^T = B^T A^T, in narrow blocks with a deep pipeline.

Consumes: a tile program on an sm90 target that warp-specializes, written as a plain GEMM and nothing else: a static
grid of ``(ceil(N / bn), 1)`` blocks; shared tiles ``A_s (bm, bk)`` and ``B_s (bk, bn)`` (``(bn, bk)`` with
``transpose_B``) of one 16-bit type and a float32 fragment ``C_l (bm, bn)``; ``T.clear(C_l)``; one T.Pipelined loop
over ``ceil(K / bk)`` steps whose body copies ``A[by * bm, k * bk]`` and B's tile ``k`` of column block ``bx`` and
runs ``T.gemm(A_s, B_s, C_l)``; then ``T.copy(C_l, C[by * bm, bx * bn])`` (an optional ``T.use_swizzle`` is
dropped: one row of blocks has no panels). It applies when A has at most MAX_ROWS rows and the row block
``bm`` is at least twice A's rows rounded up to 16 (``m``): most of each MMA would multiply padding.
Produces: the same results from ``ceil(N / COLUMNS)`` blocks of THREADS threads: A's ``m`` rows as a ``(m, K_STEP)``
tile, B's tile ``(K_STEP, COLUMNS)``, the accumulator ``C_l_T (COLUMNS, m)`` from ``T.gemm(B_s, A_s, C_l_T,
transpose_A=not transpose_B, transpose_B=True)`` (N fills the 64-row side of the warpgroup MMA, A's rows its
N side, which takes any multiple of 8), as many pipeline stages (up to MAX_STAGES) as MAX_RING_BYTES holds, and a
T.Parallel epilogue writing ``C[i, bx * COLUMNS + j] = C_l_T[j, i]`` inside C's bounds. The function attribute
``tilex.swapped_skinny_gemm`` says what was chosen; ``tilex.disable_skinny_swap`` keeps the program as written.

Why: such a GEMM streams B once and is bound by memory bandwidth; as written its few wide blocks leave most
multiprocessors idle (128x256 blocks: 32 of 132 at N = 8192) with three stages each in flight. Measured on the H100
(fp16, ratio to cuBLAS, benchmarks/README.md): 16x8192x8192 as written 0.65-0.67, this form (16x64x128 tiles, 8
stages: `tilex.kernels.gemm.matmul_swap_ab`) 1.01-1.10.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir.names import NUM_STAGES, SWAPPED_SKINNY_GEMM_ATTR, USE_SWIZZLE_OP
from tilex.ir.visit import is_op_call, map_nodes, seq_items
from tilex.op.base import is_fragment, is_global, is_shared
from tilex.op.copy import CopyOp, copy_call
from tilex.op.fill import FillOp, fill_call
from tilex.op.gemm import GemmOp, gemm_call
from tilex.op.region import Region
from tilex.op.registry import parse_tile_op
from tilex.transform.hopper.ws_decision import target_allows_warp_specialization
from tilex.transform.kernel_scope import kernel_info, outer_launch_chain

#: Most rows of A this pass takes (one warpgroup MMA's N side of up to 64 rows keeps the tile's registers small).
MAX_ROWS = 64
#: Columns of C per block (the 64 rows of one warpgroup MMA), threads per block, K step of the pipeline.
COLUMNS, THREADS, K_STEP = 64, 128, 128
#: The pipeline's depth: as many stages as fit MAX_RING_BYTES, at most MAX_STAGES.
MAX_STAGES, MAX_RING_BYTES = 8, 160 * 1024


def swap_skinny_gemm(func, target):
    """The pass (see the module docstring); `func` unchanged when it does not apply."""
    if config.get("disable_skinny_swap", False) or target is None \
            or not target_allows_warp_specialization(target):
        return func
    # measured on warp-specialized TMA pipelines only
    if config.get("disable_warp_specialized", False) or config.get("disable_tma", False):
        return func
    plan = _plan(func)
    if plan is None:
        return func
    new, note = _rebuild(func, plan)
    return new.with_attr(SWAPPED_SKINNY_GEMM_ATTR, note)


class _Plan:
    """What `_plan` found: the launch chain, the tiles, the gemm and its global operands, and the sizes."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _plan(func):
    info = kernel_info(func)
    chain = outer_launch_chain(func.body)
    if info is None or chain is None:
        return None
    tags = {a.node.thread_tag: a for a in chain}
    if set(tags) != {"blockIdx.x", "blockIdx.y", "threadIdx.x"} \
            or not all(isinstance(a.value, tirx.IntImm) for a in tags.values()) \
            or int(tags["blockIdx.y"].value.value) != 1:
        return None
    bx, by = tags["blockIdx.x"].node.var, tags["blockIdx.y"].node.var
    allocs, fill, loop, epilogue = [], None, None, None
    for stmt in seq_items(chain[-1].body):
        if isinstance(stmt, tirx.AllocBuffer):
            allocs.append(stmt.buffer)
        elif isinstance(stmt, tirx.Evaluate) and is_op_call(stmt.value, USE_SWIZZLE_OP):
            continue
        elif isinstance(stmt, tirx.For) and NUM_STAGES in stmt.annotations and loop is None:
            loop = stmt
        elif isinstance(stmt, tirx.Evaluate) and isinstance(op := _tile_op(stmt), FillOp) and fill is None \
                and loop is None:
            fill = op
        elif isinstance(stmt, tirx.Evaluate) and isinstance(op := _tile_op(stmt), CopyOp) and epilogue is None \
                and loop is not None:
            epilogue = op
        else:
            return None
    if fill is None or loop is None or epilogue is None or len(allocs) != 3:
        return None
    body = [_tile_op(s) if isinstance(s, tirx.Evaluate) else None for s in seq_items(loop.body)]
    gemms = [op for op in body if isinstance(op, GemmOp)]
    copies = [op for op in body if isinstance(op, CopyOp)]
    if len(body) != 3 or len(gemms) != 1 or len(copies) != 2:
        return None
    g = gemms[0]
    a_s, b_s, c_l = g.A.buffer, g.B.buffer, g.C.buffer
    if g.swapped or g.trans_a or not (is_shared(a_s) and is_shared(b_s) and is_fragment(c_l)) \
            or {a_s, b_s, c_l} != set(allocs) or str(c_l.dtype) != "float32" \
            or str(a_s.dtype) != str(b_s.dtype) or str(a_s.dtype) not in ("float16", "bfloat16"):
        return None
    if not (g.A.is_whole() and g.B.is_whole() and g.C.is_whole()):
        return None
    loads = {op.dst.buffer: op for op in copies}
    if set(loads) != {a_s, b_s} or not all(is_global(op.src.buffer) and op.dst.is_whole() for op in copies):
        return None
    a_g, b_g = loads[a_s].src.buffer, loads[b_s].src.buffer
    if len(a_g.shape) != 2 or len(b_g.shape) != 2 or not all(isinstance(s, tirx.IntImm)
                                                             for s in [*a_g.shape, *b_g.shape]):
        return None
    M, K = (int(s) for s in a_g.shape)
    N = int(b_g.shape[0 if g.trans_b else 1])
    bm, bn, bk = g.M, g.N, g.K
    m = (M + 15) // 16 * 16
    if M > MAX_ROWS or bm < 2 * m or str(a_g.dtype) != str(a_s.dtype) or str(b_g.dtype) != str(b_s.dtype) \
            or int(b_g.shape[1 if g.trans_b else 0]) != K:
        return None
    k = loop.loop_var
    b_mins = [bx * bn, k * bk] if g.trans_b else [k * bk, bx * bn]
    c_g = epilogue.dst.buffer
    ok = (_at(loads[a_s].src, [by * bm, k * bk], [bm, bk]) and _at(loads[b_s].src, b_mins, list(g.B.extents))
          and epilogue.src.buffer.same_as(c_l) and epilogue.src.is_whole() and is_global(c_g)
          and [int(s) if isinstance(s, tirx.IntImm) else -1 for s in c_g.shape] == [M, N]
          and _at(epilogue.dst, [by * bm, bx * bn], [bm, bn])
          and fill.dst.buffer.same_as(c_l) and fill.dst.is_whole() and _is_zero(fill.value)
          and isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0
          and _equal(loop.extent, (K + bk - 1) // bk)
          and int(tags["blockIdx.x"].value.value) == (N + bn - 1) // bn)
    if not ok:
        return None
    return _Plan(chain=chain, bx=bx, by=by, k=k, a_s=a_s, b_s=b_s, c_l=c_l, a_g=a_g, b_g=b_g, c_g=c_g,
                 trans_b=g.trans_b, M=M, N=N, K=K, m=m, written=(bm, bn, bk, int(tags["threadIdx.x"].value.value)))


def _tile_op(stmt):
    return parse_tile_op(stmt.value) if isinstance(stmt.value, tvm.ir.Call) else None


def _equal(a, b):
    return tvm.sym.Analyzer().can_prove_equal(a, b)


def _at(region, mins, extents):
    """Whether `region` starts at `mins` (provably) with static `extents`."""
    return len(region.mins) == len(mins) and all(_equal(a, b) for a, b in zip(region.mins, mins)) \
        and all(_equal(e, x) for e, x in zip(region.extents, extents))


def _is_zero(value):
    return isinstance(value, (tirx.IntImm, tirx.FloatImm)) and float(value.value) == 0.0


def _rebuild(func, p):
    """The swapped program of plan `p` and the note saying what it is."""
    dtype = str(p.a_s.dtype)
    stage_bytes = (p.m * K_STEP + K_STEP * COLUMNS) * tvm.DataType(dtype).bits // 8
    stages = max(2, min(MAX_STAGES, MAX_RING_BYTES // stage_bytes))
    a_s = tirx.decl_buffer((p.m, K_STEP), dtype, p.a_s.name, scope=str(p.a_s.scope()))
    b_shape = (COLUMNS, K_STEP) if p.trans_b else (K_STEP, COLUMNS)
    b_s = tirx.decl_buffer(b_shape, dtype, p.b_s.name, scope=str(p.b_s.scope()))
    ct = tirx.decl_buffer((COLUMNS, p.m), "float32", f"{p.c_l.name}_T", scope=str(p.c_l.scope()))
    bx, by, k = p.bx, p.by, p.k
    b_mins = [bx * COLUMNS, k * K_STEP] if p.trans_b else [k * K_STEP, bx * COLUMNS]
    step = tirx.SeqStmt([
        tirx.Evaluate(copy_call(Region(p.a_g, [by * p.m, k * K_STEP], [p.m, K_STEP]), Region.full(a_s))),
        tirx.Evaluate(copy_call(Region(p.b_g, b_mins, list(b_shape)), Region.full(b_s))),
        tirx.Evaluate(gemm_call(Region.full(b_s), Region.full(a_s), Region.full(ct), not p.trans_b, True)),
    ])
    loop = tirx.For(k, 0, (p.K + K_STEP - 1) // K_STEP, tirx.ForKind.SERIAL, step,
                    annotations={NUM_STAGES: stages})
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    row, col = by * p.m + i, bx * COLUMNS + j
    store = tirx.BufferStore(p.c_g, tirx.Cast(str(p.c_g.dtype), tirx.BufferLoad(ct, [j, i])), [row, col])
    inside = tirx.And(row < p.M, col < p.N)
    epilogue = tirx.For(j, 0, COLUMNS, tirx.ForKind.PARALLEL,
                        tirx.For(i, 0, p.m, tirx.ForKind.PARALLEL, tirx.IfThenElse(inside, store, None)))
    items = [tirx.AllocBuffer(a_s), tirx.AllocBuffer(b_s), tirx.AllocBuffer(ct),
             tirx.Evaluate(fill_call(Region.full(ct), 0.0)), loop, epilogue]
    body = tirx.SeqStmt(items)
    gx = (p.N + COLUMNS - 1) // COLUMNS
    for a in reversed(p.chain):
        tag = a.node.thread_tag
        extent = {"blockIdx.x": gx, "threadIdx.x": THREADS}.get(tag)
        if extent is None:
            body = tirx.AttrStmt(a.node, a.attr_key, a.value, body)
        else:
            iv = tirx.IterVar(tvm.ir.Range(0, extent), a.node.var, a.node.iter_type, tag)
            body = tirx.AttrStmt(iv, a.attr_key, tirx.const(extent, "int32"), body)
    launch = p.chain[0]
    new = func.with_body(_replace(func.body, launch, body))
    bm, bn, bk, threads = p.written
    note = (f"A has {p.M} rows: {bm}x{bn}x{bk} blocks of {threads} threads -> C^T tiles of {COLUMNS}x{p.m}, "
            f"K step {K_STEP}, {stages} stages, {gx} blocks of {THREADS} threads")
    return new, note


def _replace(body, old, new):
    return map_nodes(body, (tirx.AttrStmt, lambda x: new if x.same_as(old) else x), order="pre")
