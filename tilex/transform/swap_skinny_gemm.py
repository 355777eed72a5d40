"""SwapSkinnyGemm (tile level, before CoarsenBlocks): a GEMM whose A has few rows computes transposed tiles,
C^T = B^T A^T, in narrow blocks of one warpgroup with a deep pipeline.

Consumes: a tile program on an sm90 target that warp-specializes, written as a plain GEMM and nothing else
(:mod:`tilex.transform.plain_gemm`). It applies to A of
* at most MAX_ROWS rows, when ``bm`` is at least twice A's rows rounded up to 16 (``m``): most of each MMA would
  multiply padding. Tiling FEW_ROWS: one row block of ``m`` rows, 64 columns of C per block;
* at most MAX_ROW_BLOCKS_ROWS rows, when the tiling ROW_BLOCKS gives at least twice the blocks written, all in
  one wave (at most one per multiprocessor): row blocks of 64 on the grid's x axis (the blocks reading one tile of B run
  side by side), 128 columns of C per block.
Produces: the same results from blocks of THREADS threads: the accumulator ``C_l_T (columns, rows)`` of
``T.gemm(B_s, A_s, C_l_T, transpose_A=not transpose_B, transpose_B=True)`` (N fills the 64-row side of the
warpgroup MMA, A's rows its N side, which takes any multiple of 8), as many pipeline stages as the tiling's ring
holds, and a T.Parallel epilogue writing ``C[i, j] = C_l_T[j, i]``: inside C's bounds (FEW_ROWS), or into a shared
tile of C stored whole (ROW_BLOCKS; the TMA store clips the ragged edges). The function attribute
``tilex.swapped_skinny_gemm`` says what was chosen; ``tilex.disable_skinny_swap`` keeps the program as written.

Why: such a GEMM streams B once and is bound by memory bandwidth; as written its few wide blocks leave most
multiprocessors idle (128x256 blocks: 32 of 132 at N = 8192) with three stages each in flight. The tilings are the
library's swap-AB kernels (`tilex.kernels.gemm.matmul_swap_ab`). Measured on the H100 (plain program, ratio to
cuBLAS, fp16 and bf16, benchmarks/README.md): 1..64 x 8192 x 8192 0.62-0.71 -> 1.00-1.02, 16 x 4096 x 4096
0.48-0.55 -> 1.12, 16 x 28672 x 8192 0.79-0.98 -> 0.99; 96 and 128 x 8192 x 8192 0.64-0.72 -> 1.00, 128 x 4096 x
4096 0.49-0.55 -> 0.92. Not taken: 200 and 256 rows (four row blocks: 0.65-0.76 as written, 0.47-0.67 swapped),
and 128 x 28672 x 8192, whose 448 swapped blocks take four waves (128x256 as written 1.03, swapped 0.71).
"""
from __future__ import annotations

from typing import NamedTuple

import tvm
from tvm import tirx

from tilex import config
from tilex.ir.names import SWAPPED_SKINNY_GEMM_ATTR
from tilex.op.copy import copy_call
from tilex.op.fill import fill_call
from tilex.op.gemm import gemm_call
from tilex.op.region import Region
from tilex.transform.hopper.occupancy import multiprocessors
from tilex.transform.hopper.ws_decision import warp_specialization_on
from tilex.transform.plain_gemm import k_loop, plain_gemm, relaunch


class Tiling(NamedTuple):
    """A swapped tiling: `rows` of A (the MMA's N side) by `columns` of C per block of THREADS threads, a K step of
    `k_step`, up to `max_stages` stages in `max_ring` bytes; `row_blocks_on_x`: A's row blocks on the grid's x
    axis (the blocks reading one tile of B run side by side); `staged`: C goes out through a shared tile."""
    rows: int
    columns: int
    k_step: int
    max_stages: int
    max_ring: int
    row_blocks_on_x: bool
    staged: bool


#: Threads per block: one warpgroup.
THREADS = 128
#: A of at most MAX_ROWS rows, all in one block (rounded up to 16): 64 columns of C per block.
MAX_ROWS = 64
FEW_ROWS = Tiling(16, 64, 128, 8, 160 * 1024, False, False)
#: A of up to MAX_ROW_BLOCKS_ROWS rows: row blocks of 64, when they make twice the blocks written, in one wave.
MAX_ROW_BLOCKS_ROWS = 128
ROW_BLOCKS = Tiling(64, 128, 64, 8, 192 * 1024, True, True)


def swap_skinny_gemm(func, target):
    """The pass (see the module docstring); `func` unchanged when it does not apply."""
    # measured on warp-specialized TMA pipelines only
    if config.get("disable_skinny_swap", False) or not warp_specialization_on(target):
        return func
    plan = _plan(func, target)
    if plan is None:
        return func
    new, note = _rebuild(func, plan)
    return new.with_attr(SWAPPED_SKINNY_GEMM_ATTR, note)


def _plan(func, target):
    """The plain GEMM's parts (`plain_gemm.plain_gemm`) with the swapped ``tiling`` it gets, else None."""
    p = plain_gemm(func)
    if p is None:
        return None
    p.tiling = _tiling(p.M, p.N, p.written[0], p.blocks, target)
    return p if p.tiling is not None else None


def _tiling(M, N, bm, blocks, target):
    """The swapped tiling for M x N written in row blocks of `bm` on `blocks` blocks, or None."""
    if M <= MAX_ROWS:
        m = (M + 15) // 16 * 16
        return FEW_ROWS._replace(rows=m) if bm >= 2 * m else None
    t = ROW_BLOCKS
    swapped = (M + t.rows - 1) // t.rows * ((N + t.columns - 1) // t.columns)
    if M <= MAX_ROW_BLOCKS_ROWS and 2 * blocks <= swapped <= multiprocessors(target):
        return t
    return None


def _rebuild(func, p):
    """The swapped program of plan `p` and the note saying what it is."""
    t = p.tiling
    dtype = str(p.a_s.dtype)
    stage_bytes = (t.rows * t.k_step + t.k_step * t.columns) * tvm.DataType(dtype).bits // 8
    stages = max(2, min(t.max_stages, t.max_ring // stage_bytes))
    ct = tirx.decl_buffer((t.columns, t.rows), "float32", f"{p.c_l.name}_T", scope=str(p.c_l.scope()))
    # the block's row block r and column block c: the launch's x and y (swapped with row blocks on x)
    r, c = (p.bx, p.by) if t.row_blocks_on_x else (p.by, p.bx)
    a_s, b_s, loop = k_loop(p, t.rows, t.columns, t.k_step, r, c, stages=stages, mma=lambda a_s, b_s: gemm_call(
        Region.full(b_s), Region.full(a_s), Region.full(ct), not p.trans_b, True))
    items = [tirx.AllocBuffer(a_s), tirx.AllocBuffer(b_s), tirx.AllocBuffer(ct),
             tirx.Evaluate(fill_call(Region.full(ct), 0.0)), loop]
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    value = tirx.Cast(str(p.c_g.dtype), tirx.BufferLoad(ct, [j, i]))
    if t.staged:  # C^T -> a (rows, columns) shared tile of C -> C (a TMA store on sm90 clips the ragged edges)
        c_s = tirx.decl_buffer((t.rows, t.columns), str(p.c_g.dtype), f"{p.c_l.name}_s", scope="shared.dyn")
        store = tirx.BufferStore(c_s, value, [i, j])
        items += [tirx.AllocBuffer(c_s), _nest(j, t.columns, i, t.rows, store),
                  tirx.Evaluate(copy_call(Region.full(c_s), Region(p.c_g, [r * t.rows, c * t.columns],
                                                                   [t.rows, t.columns])))]
    else:
        row, col = r * t.rows + i, c * t.columns + j
        store = tirx.BufferStore(p.c_g, value, [row, col])
        items.append(_nest(j, t.columns, i, t.rows, tirx.IfThenElse(tirx.And(row < p.M, col < p.N), store, None)))
    row_blocks, col_blocks = (p.M + t.rows - 1) // t.rows, (p.N + t.columns - 1) // t.columns
    extents = {"blockIdx.x": row_blocks if t.row_blocks_on_x else col_blocks,
               "blockIdx.y": col_blocks if t.row_blocks_on_x else row_blocks, "threadIdx.x": THREADS}
    new = relaunch(func, p, extents, tirx.SeqStmt(items))
    bm, bn, bk, threads = p.written
    note = (f"A has {p.M} rows: {bm}x{bn}x{bk} blocks of {threads} threads -> C^T tiles of {t.columns}x{t.rows}, "
            f"K step {t.k_step}, {stages} stages, {row_blocks * col_blocks} blocks of {THREADS} threads"
            + (", row blocks on x, C staged in shared memory" if t.staged else ""))
    return new, note


def _nest(j, columns, i, rows, body):
    """``for j, i in T.Parallel(columns, rows): body``."""
    return tirx.For(j, 0, columns, tirx.ForKind.PARALLEL, tirx.For(i, 0, rows, tirx.ForKind.PARALLEL, body))
