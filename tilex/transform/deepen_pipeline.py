"""DeepenPipeline (tile level, after CoarsenBlocks): a warp-specialized GEMM block of two warpgroups on a 128 x 256
tile with a 128-byte K step runs its T.Pipelined loop with DEPTH stages when written with fewer, if shared memory
holds them beside the epilogue's tile staged at half its width.

Consumes: a tile program on an sm90 target that warp-specializes, of tile copies, fills, one ``T.gemm`` and
T.Parallel nests (CoarsenBlocks' GEMM programs), with 256 threads, a ``(128, 256)`` accumulator, 16-bit operands
of K step 64 and one T.Pipelined loop of at least DEPTH iterations without an explicit schedule. Such a block is
alone on its multiprocessor (its 128 accumulator registers per thread leave no room for a second one), so the
shared memory the written ring leaves unused would stay idle.
Produces: the loop's ``tilex.num_stages`` raised to DEPTH when the DEPTH stages, the program's other shared tiles
and the epilogue's staging at half width (each ``T.copy`` of the accumulator into a global tensor: StageEpilogue
then picks that width) fit one block. The function attribute ``tilex.deepened_pipeline`` says so;
``tilex.disable_pipeline_deepening`` keeps the written depth.

Why: the consumers release a stage when the MMAs that read it retire, so the producer's loads have about
``stages - 2`` steps of MMAs to land: one step (under a microsecond) at three stages, close to what a load from
DRAM takes under a full GPU. Measured on the H100 (plain program 128x256x64, 256 threads, ratio to cuBLAS,
alternated over 8 rounds, fp16 / bf16): 3 -> 4 stages (C staged in two 128-column blocks instead of one
256-column tile) 0.913 -> 0.905 / 0.930 -> 0.953 at 4096^3, 0.972 -> 0.991 / 1.002 -> 1.007 at 8192^3, 0.970 ->
0.985 / 0.960 -> 0.995 at 4096 x 28672 x 8192.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir.names import DEEPENED_PIPELINE_ATTR, NUM_STAGES, PIPELINE_ORDER, PIPELINE_STAGE
from tilex.ir.shared_memory import buffer_bytes, shared_usage
from tilex.ir.visit import map_nodes
from tilex.op.base import is_global, is_shared
from tilex.op.copy import CopyOp
from tilex.transform.coarsen_blocks import gemm_program, k_bits, pipelined_loops
from tilex.transform.hopper.occupancy import fits_block
from tilex.transform.hopper.ws_decision import warp_specialization_on

#: The ring's depth this pass gives the loop.
DEPTH = 4
#: The block it applies to: threads, accumulator shape, K step in bits (one 128-byte row of A).
THREADS, TILE, K_BITS = 256, (128, 256), 128 * 8


def deepen_pipeline(func, target):
    """The pass (see the module docstring); `func` unchanged when it does not apply."""
    # measured on warp-specialized TMA pipelines only
    if config.get("disable_pipeline_deepening", False) or not warp_specialization_on(target):
        return func
    found = gemm_program(func, one_warpgroup=False)
    if found is None:
        return func
    info, chain, ops, g = found
    if info.threads != THREADS or (g.M, g.N) != TILE or k_bits(g) != K_BITS \
            or not (is_shared(g.A.buffer) and is_shared(g.B.buffer)):
        return func
    loops = pipelined_loops(chain[-1].body)
    if len(loops) != 1:
        return func
    loop = loops[0]
    stages = int(loop.annotations[NUM_STAGES])
    if stages >= DEPTH or not isinstance(loop.extent, tirx.IntImm) or int(loop.extent.value) < DEPTH \
            or PIPELINE_STAGE in loop.annotations or PIPELINE_ORDER in loop.annotations:  # an explicit schedule
        return func
    usage, unknown = shared_usage(func.body)
    if unknown:
        return func
    step = buffer_bytes(g.A.buffer) + buffer_bytes(g.B.buffer)
    # the epilogue copies of the accumulator that StageEpilogue stages, each at half width (one tile shared)
    staged = max((tvm.DataType(str(op.dst.buffer.dtype)).bits // 8 * g.M * g.N // 2 for op in ops
                  if isinstance(op, CopyOp) and op.src.buffer.same_as(g.C.buffer) and is_global(op.dst.buffer)),
                 default=0)
    dynamic = usage["dynamic"] - step + DEPTH * step + staged
    if not fits_block(usage["static"], dynamic, target):
        return func
    deeper = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding,
                      {**dict(loop.annotations), NUM_STAGES: DEPTH})
    body = map_nodes(func.body, (tirx.For, lambda f: deeper if f.same_as(loop) else f), order="pre")
    note = f"the T.Pipelined loop runs with {DEPTH} stages of {step // 1024} KB (written: {stages})"
    return func.with_body(body).with_attr(DEEPENED_PIPELINE_ATTR, note)
