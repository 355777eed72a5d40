"""NarrowSkinnyGemm (tile level, after SwapSkinnyGemm, before CoarsenBlocks): a GEMM whose B has few columns
runs in smaller blocks of one warpgroup with a deep pipeline, so that its blocks fill the multiprocessors.

Consumes: a tile program on an sm90 target that warp-specializes, written as a plain GEMM and nothing else
(:mod:`tilex.transform.plain_gemm`), with MIN_COLUMNS <= N <= MAX_COLUMNS and a K loop of at least MIN_K_STEPS
steps of 128 bytes. Two tilings, tried in order:
* ``64 x w`` blocks (``w`` = 64 for N <= 64, else 128), when they are at least 1.5 times the blocks written and
  fit in one wave at most two per multiprocessor, each with at least MIN_STAGES stages;
* for N > 128, ``128 x 128`` blocks, one per multiprocessor, when at least as many as written fit in one wave.
  CoarsenBlocks then leaves them unpaired.
Produces: the same GEMM in that tiling: blocks of 128 threads, tiles ``A_s (rows, bk)``, ``B_s (bk, w)`` and
``C_l (rows, w)``, the same clear, loop and ``T.copy`` epilogue (which StageEpilogue then stages). The loop runs
with as many stages (at most MAX_STAGES) as fit in RING_BYTES shared among the blocks a multiprocessor holds. The
function attribute ``tilex.narrowed_skinny_gemm`` says what was chosen; ``tilex.disable_skinny_narrow`` keeps the
program as written.

Why: with N <= 256 the written blocks are few (M / 128: 64 at M = 8192), so half the multiprocessors idle, each
block with three stages in flight. Measured on the H100 (fp16, ratio to cuBLAS, benchmarks/README.md, written as
128x128x64 / 128 -> compiled):

| shape | written -> compiled | tiling |
| --- | --- | --- |
| 8192x128x8192 | 0.74 -> 1.00 | 64x128, 8 stages |
| 4096x256x4096 | 0.59 -> 1.03 | 64x128, 8 stages |
| 16384x64x4096 | 0.93 -> 1.00 | 64x64, 6 stages, two blocks per multiprocessor |
| 8192x256x8192 | 0.78 -> 1.01 | 128x128, 6 stages |
| 8192x192x8192 | 0.75 -> 0.96 | 128x128, 6 stages |
| 8000x200x2080 | 0.76 -> 0.93 | 128x128, 6 stages |

Not taken:
* A short K loop: 8000x200x1000 (16 steps) went 0.749 -> 0.698 from 128x256 blocks.
* Two 64x128 blocks per multiprocessor with 4 stages each: 8192x192x8192 went 0.82 -> 0.64.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir.names import NARROWED_SKINNY_GEMM_ATTR
from tilex.op.copy import copy_call
from tilex.op.fill import fill_call
from tilex.op.gemm import gemm_call
from tilex.op.region import Region
from tilex.transform.hopper.occupancy import multiprocessors
from tilex.transform.hopper.ws_decision import warp_specialization_on
from tilex.transform.plain_gemm import k_loop, plain_gemm, relaunch

#: B's columns this pass takes: fewer would leave the MMA's N side mostly padding (not measured); more are not
#: skinny.
MIN_COLUMNS, MAX_COLUMNS = 64, 256
#: Rows of C per block (one warpgroup's MMA) and its threads; WIDE_ROWS: the 128 x 128 tiling's rows.
ROWS, THREADS, WIDE_ROWS = 64, 128, 128
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
    k_step = K_STEP_BYTES // (tvm.DataType(str(p.a_s.dtype)).bits // 8)
    if -(-p.K // k_step) < MIN_K_STEPS:
        return func
    tiling = _tiling(p, k_step, multiprocessors(target))
    if tiling is None:
        return func
    rows, width, stages, blocks = tiling
    new = _retiled(func, p, rows, width, k_step, stages)
    bm, bn, bk, threads = p.written
    note = (f"B has {p.N} columns: {bm}x{bn}x{bk} blocks of {threads} threads ({p.blocks}) -> {rows}x{width} "
            f"tiles, K step {k_step}, {stages} stages, {blocks} blocks of {THREADS} threads")
    return new.with_attr(NARROWED_SKINNY_GEMM_ATTR, note)


def _tiling(p, k_step, slots):
    """(rows, width, stages, blocks) of the narrowed program (module docstring), or None."""
    elem_bytes = tvm.DataType(str(p.a_s.dtype)).bits // 8

    def stages(rows, width, per_sm):
        return min(MAX_STAGES, RING_BYTES // per_sm // ((rows + width) * k_step * elem_bytes))

    width = 64 if p.N <= 64 else 128
    blocks = -(-p.M // ROWS) * -(-p.N // width)
    if 3 * p.blocks <= 2 * blocks <= 4 * slots:
        n = stages(ROWS, width, -(-blocks // slots))
        if n >= MIN_STAGES:
            return ROWS, width, n, blocks
    # two column blocks of 128: 128 x 128 blocks, one per multiprocessor, when as many as written fit in one wave
    blocks = -(-p.M // WIDE_ROWS) * -(-p.N // 128)
    if p.N > 128 and p.blocks <= blocks <= slots:
        n = stages(WIDE_ROWS, 128, 1)
        if n >= MIN_STAGES:
            return WIDE_ROWS, 128, n, blocks
    return None


def _retiled(func, p, rows, width, k_step, stages):
    """`func` with the plain GEMM `p` retiled: ``(ceil(N / width), ceil(M / rows))`` blocks of THREADS threads."""
    c_l = tirx.decl_buffer((rows, width), "float32", p.c_l.name, scope=str(p.c_l.scope()))
    bx, by = p.bx, p.by
    a_s, b_s, loop = k_loop(p, rows, width, k_step, by, bx, stages=stages, mma=lambda a_s, b_s: gemm_call(
        Region.full(a_s), Region.full(b_s), Region.full(c_l), False, p.trans_b))
    body = tirx.SeqStmt([
        tirx.AllocBuffer(a_s), tirx.AllocBuffer(b_s), tirx.AllocBuffer(c_l),
        tirx.Evaluate(fill_call(Region.full(c_l), 0.0)), loop,
        tirx.Evaluate(copy_call(Region.full(c_l), Region(p.c_g, [by * rows, bx * width], [rows, width]))),
    ])
    extents = {"blockIdx.x": -(-p.N // width), "blockIdx.y": -(-p.M // rows), "threadIdx.x": THREADS}
    return relaunch(func, p, extents, body)
