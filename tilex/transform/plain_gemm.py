"""The plain GEMM as TileLang's examples write it, recognized in a tile program (`plain_gemm`), and rebuilt in other
tiles (`k_loop`, `relaunch`): what the passes that retile it (SwapSkinnyGemm, NarrowSkinnyGemm) share.

A plain GEMM: a static grid of ``(ceil(N / bn), ceil(M / bm))`` blocks; shared tiles ``A_s (bm, bk)`` and ``B_s
(bk, bn)`` (``(bn, bk)`` with ``transpose_B``) of one 16-bit type and a float32 fragment ``C_l (bm, bn)``;
``T.clear(C_l)``; one T.Pipelined loop (no explicit schedule) over ``ceil(K / bk)`` steps whose body copies
``A[by * bm, k * bk]`` and B's tile ``k`` of column block ``bx`` and runs ``T.gemm(A_s, B_s, C_l)``; then
``T.copy(C_l, C[by * bm, bx * bn])``; an optional ``T.use_swizzle``, which a retiled program drops.
"""
from __future__ import annotations

from types import SimpleNamespace

import tvm
from tvm import tirx

from tilex.ir.names import NUM_STAGES, USE_SWIZZLE_OP
from tilex.ir.visit import is_op_call, map_nodes, seq_items
from tilex.op.base import is_fragment, is_global, is_shared
from tilex.op.copy import CopyOp, copy_call
from tilex.op.fill import FillOp
from tilex.op.gemm import GemmOp
from tilex.op.region import Region
from tilex.op.registry import parse_tile_op
from tilex.transform.kernel_scope import kernel_info, outer_launch_chain


def plain_gemm(func):
    """The parts of `func` when it is a plain GEMM (module docstring), else None: ``chain`` (the launch chain),
    ``bx`` / ``by`` / ``k`` (block and K-step vars), the tiles ``a_s`` / ``b_s`` / ``c_l``, the globals ``a_g`` /
    ``b_g`` / ``c_g``, ``trans_b``, the sizes ``M`` / ``N`` / ``K``, ``written`` = (bm, bn, bk, threads) and
    ``blocks`` (of the written grid)."""
    info = kernel_info(func)
    chain = outer_launch_chain(func.body)
    if info is None or chain is None:
        return None
    tags = {a.node.thread_tag: a for a in chain}
    if set(tags) != {"blockIdx.x", "blockIdx.y", "threadIdx.x"} \
            or not all(isinstance(a.value, tirx.IntImm) for a in tags.values()):
        return None
    bx, by = tags["blockIdx.x"].node.var, tags["blockIdx.y"].node.var
    allocs, fill, loop, epilogue = [], None, None, None
    for stmt in seq_items(chain[-1].body):
        if isinstance(stmt, tirx.AllocBuffer):
            allocs.append(stmt.buffer)
        elif isinstance(stmt, tirx.Evaluate) and is_op_call(stmt.value, USE_SWIZZLE_OP):
            continue
        # the T.Pipelined loop, without an explicit schedule (tilex.pipeline_stage / order)
        elif isinstance(stmt, tirx.For) and set(stmt.annotations) == {NUM_STAGES} and loop is None:
            loop = stmt
        elif isinstance(stmt, tirx.Evaluate) and isinstance(op := tile_op(stmt), FillOp) and fill is None \
                and loop is None:
            fill = op
        elif isinstance(stmt, tirx.Evaluate) and isinstance(op := tile_op(stmt), CopyOp) and epilogue is None \
                and loop is not None:
            epilogue = op
        else:
            return None
    if fill is None or loop is None or epilogue is None or len(allocs) != 3:
        return None
    body = [tile_op(s) if isinstance(s, tirx.Evaluate) else None for s in seq_items(loop.body)]
    gemms = [op for op in body if isinstance(op, GemmOp)]
    copies = [op for op in body if isinstance(op, CopyOp)]
    if len(body) != 3 or len(gemms) != 1 or len(copies) != 2:
        return None
    g = gemms[0]
    a_s, b_s, c_l = g.A.buffer, g.B.buffer, g.C.buffer
    # (a gemm that clears its accumulator keeps only its last K step: not this GEMM)
    if g.swapped or g.trans_a or g.clear_accum or not (is_shared(a_s) and is_shared(b_s) and is_fragment(c_l)) \
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
    if str(a_g.dtype) != str(a_s.dtype) or str(b_g.dtype) != str(b_s.dtype) \
            or int(b_g.shape[1 if g.trans_b else 0]) != K:
        return None
    gx, gy = int(tags["blockIdx.x"].value.value), int(tags["blockIdx.y"].value.value)
    k = loop.loop_var
    b_mins = [bx * bn, k * bk] if g.trans_b else [k * bk, bx * bn]
    c_g = epilogue.dst.buffer
    ok = (at(loads[a_s].src, [by * bm, k * bk], [bm, bk]) and at(loads[b_s].src, b_mins, list(g.B.extents))
          and epilogue.src.buffer.same_as(c_l) and epilogue.src.is_whole() and is_global(c_g)
          and [int(s) if isinstance(s, tirx.IntImm) else -1 for s in c_g.shape] == [M, N]
          and at(epilogue.dst, [by * bm, bx * bn], [bm, bn])
          and fill.dst.buffer.same_as(c_l) and fill.dst.is_whole() and is_zero(fill.value)
          and isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0
          and equal(loop.extent, (K + bk - 1) // bk)
          and gx == (N + bn - 1) // bn and gy == (M + bm - 1) // bm)
    if not ok:
        return None
    return SimpleNamespace(chain=chain, bx=bx, by=by, k=k, a_s=a_s, b_s=b_s, c_l=c_l, a_g=a_g, b_g=b_g, c_g=c_g,
                           trans_b=g.trans_b, M=M, N=N, K=K, blocks=gx * gy,
                           written=(bm, bn, bk, int(tags["threadIdx.x"].value.value)))


def tile_op(stmt):
    """The tile operator an Evaluate statement calls, or None."""
    return parse_tile_op(stmt.value) if isinstance(stmt.value, tvm.ir.Call) else None


def equal(a, b):
    """Whether `a` == `b` provably."""
    return tvm.sym.Analyzer().can_prove_equal(a, b)


def at(region, mins, extents):
    """Whether `region` starts at `mins` (provably) with static `extents`."""
    return len(region.mins) == len(mins) and all(equal(a, b) for a, b in zip(region.mins, mins)) \
        and all(equal(e, x) for e, x in zip(region.extents, extents))


def is_zero(value):
    """Whether `value` is a literal zero."""
    return isinstance(value, (tirx.IntImm, tirx.FloatImm)) and float(value.value) == 0.0


def k_loop(p, rows, columns, k_step, r, c, mma, stages):
    """The retiled GEMM `p`'s shared tiles ``A_s (rows, k_step)`` and ``B_s (k_step, columns)`` (``(columns,
    k_step)`` with ``transpose_B``), and its T.Pipelined loop of `stages` stages over K in steps of `k_step`: each
    step loads row block `r` of A and column block `c` of B into them and evaluates ``mma(A_s, B_s)`` (a gemm
    call). Returns (A_s, B_s, loop)."""
    dtype = str(p.a_s.dtype)
    a_s = tirx.decl_buffer((rows, k_step), dtype, p.a_s.name, scope=str(p.a_s.scope()))
    b_shape = (columns, k_step) if p.trans_b else (k_step, columns)
    b_s = tirx.decl_buffer(b_shape, dtype, p.b_s.name, scope=str(p.b_s.scope()))
    k = p.k
    b_mins = [c * columns, k * k_step] if p.trans_b else [k * k_step, c * columns]
    step = tirx.SeqStmt([
        tirx.Evaluate(copy_call(Region(p.a_g, [r * rows, k * k_step], [rows, k_step]), Region.full(a_s))),
        tirx.Evaluate(copy_call(Region(p.b_g, b_mins, list(b_shape)), Region.full(b_s))),
        tirx.Evaluate(mma(a_s, b_s)),
    ])
    loop = tirx.For(k, 0, (p.K + k_step - 1) // k_step, tirx.ForKind.SERIAL, step, annotations={NUM_STAGES: stages})
    return a_s, b_s, loop


def relaunch(func, p, extents, body):
    """`func` with the plain GEMM's launch (`p.chain`) replaced by one over `extents` (thread tag -> extent) with
    the same block and thread variables, around `body`."""
    for a in reversed(p.chain):
        tag = a.node.thread_tag
        iv = tirx.IterVar(tvm.ir.Range(0, extents[tag]), a.node.var, a.node.iter_type, tag)
        body = tirx.AttrStmt(iv, a.attr_key, tirx.const(extents[tag], "int32"), body)
    old = p.chain[0]
    return func.with_body(map_nodes(func.body, (tirx.AttrStmt, lambda x: body if x.same_as(old) else x),
                                    order="pre"))
