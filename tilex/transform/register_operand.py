"""RegisterOperand (tile level, after canonicalize, before InjectSoftwarePipeline): a tile that a T.Parallel loop
computes for one T.gemm goes straight into the MMA's register operand instead of through shared memory.

Consumes: a tile program in which a shared tile ``Bs`` (N, K) is written only by one T.Parallel nest that stores
every element (``Bs[i, j] = f(...)``: a decode of packed weights, a scaling, a cast) and read only by one
``T.gemm(As, Bs, C, transpose_B=True)`` with ``As`` a shared (M, K) tile.
Produces: ``Bs`` replaced by a register fragment that the same loop writes, and the gemm marked swapped
(`tilex.op.gemm.GemmOp`): the tensor cores compute C^T = Bs As^T with Bs as their register operand (warpgroup MMA
"rs"), and C keeps its shape with the transposed accumulator as its layout, so every other use of C is unchanged.

Why: the tile's stores to shared memory and the MMAs' reads of it are what bound such programs (the hand-written
dequantizing GEMM: benchmarks/README.md). Applied where the swapped gemm has a warpgroup-MMA plan (sm_90a, N a
multiple of 64 per warpgroup); ``tilex.disable_decode_into_registers`` keeps the program's shared tile.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir.visit import count_accesses, map_nodes, substitute, walk
from tilex.op import gemm_wgmma
from tilex.op.base import is_shared
from tilex.op.gemm import GemmOp, GemmWarpPolicy, gemm_call
from tilex.op.parallel import stores_whole
from tilex.op.region import Region
from tilex.op.registry import parse_tile_op
from tilex.transform.kernel_scope import kernel_info

_HALF = ("float16", "bfloat16")


def _stores(stmt, buf):
    hits = []
    walk(stmt, (tirx.BufferStore, lambda n: hits.append(n) if n.buffer.same_as(buf) else None))
    return len(hits)


def _swapped(op, fragment):
    """`op` with its B tile replaced by `fragment`, run swapped (the MMAs' register operand)."""
    b = Region(fragment, list(op.B.mins), list(op.B.extents))
    return GemmOp(op.A, b, op.C, False, True, GemmWarpPolicy.FullRow, op.clear_accum, swapped=True)


def _register_tiles(func, threads, target):
    """{shared tile: the fragment replacing it} for every gemm B tile that can go into the MMAs' registers."""
    gemms, loops = [], []

    def on_eval(n):
        op = parse_tile_op(n.value) if isinstance(n.value, tvm.ir.Call) else None
        if isinstance(op, GemmOp):
            gemms.append(op)

    walk(func.body, [(tirx.Evaluate, on_eval),
                     (tirx.For, lambda n: loops.append(n) if n.kind == tirx.ForKind.PARALLEL else None)])
    out = {}
    for op in gemms:
        bs = op.B.buffer
        if (op.swapped or op.trans_a or not op.trans_b or not is_shared(bs) or not is_shared(op.A.buffer)
                or str(bs.dtype) not in _HALF or not op.A.is_whole() or not op.B.is_whole()):
            continue
        writers = [lp for lp in loops if stores_whole(lp, bs)]
        # one loop writes the tile whole; its stores and this gemm's region are the tile's only accesses
        if len(writers) != 1 or count_accesses(func.body, bs) != _stores(writers[0], bs) + 1:
            continue
        frag = tirx.decl_buffer(list(bs.shape), str(bs.dtype), bs.name, scope="local.fragment")
        if gemm_wgmma.plan(_swapped(op, frag), threads, target) is not None:
            out[bs] = frag
    return out


def register_operand(func, target):
    """The pass (see the module docstring); `func` unchanged when it has no such gemm or the option disables it."""
    if config.get("disable_decode_into_registers", False):
        return func
    info = kernel_info(func)
    if info is None:
        return func
    frags = _register_tiles(func, info.threads, target)
    if not frags:
        return func

    def on_eval(n):
        op = parse_tile_op(n.value) if isinstance(n.value, tvm.ir.Call) else None
        if not isinstance(op, GemmOp) or op.swapped or op.B.buffer not in frags:
            return n
        t = _swapped(op, frags[op.B.buffer])
        return tirx.Evaluate(gemm_call(t.A, t.B, t.C, False, True, t.policy, t.clear_accum, swapped=True))

    return func.with_body(substitute(map_nodes(func.body, (tirx.Evaluate, on_eval)), frags))
