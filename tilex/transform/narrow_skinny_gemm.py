"""NarrowSkinnyGemm (tile level, after SwapSkinnyGemm, before CoarsenBlocks): a GEMM whose B has few columns
runs in 64-row blocks of one warpgroup with a deep pipeline, so that its blocks fill the multiprocessors.

Consumes: a tile program on an sm90 target that warp-specializes, written as a plain GEMM and nothing else
(:mod:`tilex.transform.plain_gemm`), with MIN_COLUMNS <= N <= MAX_COLUMNS. It applies when the narrow tiling,
``64 x w`` blocks (``w`` = 64 for N <= 64, else 128) of 128 threads with a 128-byte K step, makes at least twice
the blocks written, no more than two per multiprocessor (all in one wave) with at least MIN_STAGES stages each,
and its K loop has at least MIN_K_STEPS steps.
Produces: the same GEMM in that tiling (``A_s (64, bk)``, ``B_s (bk, w)``, ``C_l (64, w)``, the same clear, loop
and ``T.copy`` epilogue, which StageEpilogue then stages) with as many pipeline stages (at most MAX_STAGES) as
fit in RING_BYTES shared among the blocks a multiprocessor holds. The function attribute
``tilex.narrowed_skinny_gemm`` says what was chosen; ``tilex.disable_skinny_narrow`` keeps the program as written.

Why: with N <= 256 the written blocks are few (M / 128: 64 at M = 8192), so half the multiprocessors idle,
each block with three stages in flight. Measured on the H100 (fp16, ratio to cuBLAS, benchmarks/README.md,
written as 128x128x64 / 128 -> narrowed): 8192x128x8192 0.742 -> 0.992 (64x128, 8 stages), 4096x256x4096
0.591 -> 0.952 (64x128, 8 stages), 16384x64x4096 0.933 -> 1.001 (64x64, 6 stages, two blocks per
multiprocessor). Not taken: a short K loop (8000x200x1000, 16 steps: 0.749 -> 0.698 from 128x256 blocks), and
two 64x128 blocks per multiprocessor with 4 stages each (8192x256x8192 0.78 -> 0.89, but 128 blocks of 128x128 with
6 stages reach 0.95; 8192x192x8192 0.82 -> 0.64).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir.names import NARROWED_SKINNY_GEMM_ATTR, NUM_STAGES
from tilex.op.copy import copy_call
from tilex.op.fill import fill_call
from tilex.op.gemm import gemm_call
from tilex.op.region import Region
from tilex.transform.hopper.occupancy import multiprocessors
from tilex.transform.hopper.ws_decision import warp_specialization_on
from tilex.transform.plain_gemm import plain_gemm, replace_launch

#: B's columns this pass takes: fewer would leave the MMA's N side mostly padding (not measured); more are not
#: skinny.
MIN_COLUMNS, MAX_COLUMNS = 64, 256
#: Rows of C per block (one warpgroup's MMA) and its threads.
ROWS, THREADS = 64, 128
#: K step in bytes of a row (one 128-byte swizzle span).
K_STEP_BYTES = 128
#: Pipeline stages at most, and the shared memory the rings of one multiprocessor's blocks take at most (the
#: staged epilogue takes the rest).
MAX_STAGES, RING_BYTES = 8, 200 * 1024
#: Stages each narrowed block needs at least (two 64x128 blocks per multiprocessor with 4 each: slower).
MIN_STAGES = 6
#: K steps the narrowed loop needs at least (a short loop does not pay for the blocks' fixed costs; measured
#: slower at 16 steps).
MIN_K_STEPS = 32


def narrow_skinny_gemm(func, target):
    """The pass (see the module docstring); `func` unchanged when it does not apply."""
    if config.get("disable_skinny_narrow", False) or not warp_specialization_on(target):
        return func
    p = plain_gemm(func)
    if p is None or not MIN_COLUMNS <= p.N <= MAX_COLUMNS:
        return func
    width = 64 if p.N <= 64 else 128
    blocks = -(-p.M // ROWS) * -(-p.N // width)
    slots = multiprocessors(target)
    if blocks < 2 * p.blocks or blocks > 2 * slots:
        return func
    per_sm = -(-blocks // slots)
    elem_bytes = tvm.DataType(str(p.a_s.dtype)).bits // 8
    k_step = K_STEP_BYTES // elem_bytes
    if -(-p.K // k_step) < MIN_K_STEPS:
        return func
    stage_bytes = (ROWS + width) * k_step * elem_bytes
    stages = min(MAX_STAGES, RING_BYTES // per_sm // stage_bytes)
    if stages < MIN_STAGES:
        return func
    new = func.with_body(replace_launch(func.body, p.chain[0], _launch(p, width, k_step, stages)))
    bm, bn, bk, threads = p.written
    note = (f"B has {p.N} columns: {bm}x{bn}x{bk} blocks of {threads} threads ({p.blocks}) -> {ROWS}x{width} "
            f"tiles, K step {k_step}, {stages} stages, {blocks} blocks of {THREADS} threads")
    return new.with_attr(NARROWED_SKINNY_GEMM_ATTR, note)


def _launch(p, width, k_step, stages):
    """The launch of plan `p` retiled: ``(ceil(N / width), ceil(M / ROWS))`` blocks of THREADS threads."""
    dtype = str(p.a_s.dtype)
    a_s = tirx.decl_buffer((ROWS, k_step), dtype, p.a_s.name, scope=str(p.a_s.scope()))
    b_shape = (width, k_step) if p.trans_b else (k_step, width)
    b_s = tirx.decl_buffer(b_shape, dtype, p.b_s.name, scope=str(p.b_s.scope()))
    c_l = tirx.decl_buffer((ROWS, width), "float32", p.c_l.name, scope=str(p.c_l.scope()))
    k, bx, by = p.k, p.bx, p.by
    b_mins = [bx * width, k * k_step] if p.trans_b else [k * k_step, bx * width]
    step = tirx.SeqStmt([
        tirx.Evaluate(copy_call(Region(p.a_g, [by * ROWS, k * k_step], [ROWS, k_step]), Region.full(a_s))),
        tirx.Evaluate(copy_call(Region(p.b_g, b_mins, list(b_shape)), Region.full(b_s))),
        tirx.Evaluate(gemm_call(Region.full(a_s), Region.full(b_s), Region.full(c_l), False, p.trans_b)),
    ])
    loop = tirx.For(k, 0, -(-p.K // k_step), tirx.ForKind.SERIAL, step, annotations={NUM_STAGES: stages})
    body = tirx.SeqStmt([
        tirx.AllocBuffer(a_s), tirx.AllocBuffer(b_s), tirx.AllocBuffer(c_l),
        tirx.Evaluate(fill_call(Region.full(c_l), 0.0)), loop,
        tirx.Evaluate(copy_call(Region.full(c_l), Region(p.c_g, [by * ROWS, bx * width], [ROWS, width]))),
    ])
    extents = {"blockIdx.x": -(-p.N // width), "blockIdx.y": -(-p.M // ROWS), "threadIdx.x": THREADS}
    for a in reversed(p.chain):
        tag = a.node.thread_tag
        iv = tirx.IterVar(tvm.ir.Range(0, extents[tag]), a.node.var, a.node.iter_type, tag)
        body = tirx.AttrStmt(iv, a.attr_key, tirx.const(extents[tag], "int32"), body)
    return body
