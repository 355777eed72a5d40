"""StageEpilogue (tile level, after InjectSoftwarePipeline, before LayoutInference): a warp-specialized kernel's
``T.copy(fragment, global)`` epilogue goes through a swizzled shared tile and TMA stores.

Consumes: a tile program after pipelining. It applies to a kernel with a warp-specialized pipeline (a
``tilex.ws_producer`` region) on a target with TMA stores, and to each top-level ``T.copy`` of a whole 2-d register
fragment into a global tensor of rank 2..5 (the tile's columns in its last dimension, its rows in one other,
extents 1 elsewhere: a batch or a head) that the copy from a shared tile of the global's type could write by TMA
store (static, 16-byte aligned rows; not written ``disable_tma=True``, which pins per-thread stores).
Produces: per such copy, a shared tile ``<fragment>_stage`` of ``(rows, w)`` elements and, for each block of ``w``
columns, ``T.copy(fragment[:, j*w:(j+1)*w], stage)`` then ``T.copy(stage, global[...])``: the threads write
the shared tile in the fragment's layout, and one thread stores it with the TMA (LowerTileOps: the tile takes the
TMA's swizzle, and the store is asynchronous: BulkStoreWaits waits for it only before the tile is written again).
The width ``w`` is the widest block (the whole tile, then halves) whose shared memory keeps the kernel's resident
blocks per multiprocessor (`occupancy.blocks_per_sm`) and fits a block; no width qualifies: the copy is left as it
is. When that takes more than one block and half a block's rows still span 128 bytes, the same shared
memory holds two tiles of ``w / 2`` columns, ``<fragment>_stage`` and ``<fragment>_stage1``, taken in turn by
blocks of ``w / 2``: the threads write one while the TMA still reads the other (the loop of pairs carries
``tilex.bulk_store_depth`` = 1 for BulkStoreWaits). Later copies of tiles of the same rows and type (dK and dV)
reuse the first one's stage tiles. The chosen stagings are listed in the function attribute
``tilex.staged_epilogues``.

Why: per-thread stores of an MMA accumulator write 4-byte pieces of many rows at once. Measured on the H100
(fp16, 4096^3, ratio to cuBLAS; benchmarks/README.md): 128x256x64 tiles 0.849 -> 0.972 with the whole tile staged,
128x128x64 tiles at two blocks per multiprocessor 0.822 -> 0.875 staged in 64-column blocks. Two 64-column
tiles in turn instead of one 128-column tile (the 128x256 block with 4 stages, alternated with the unchanged
kernel, four runs): 4096^3 0.978-0.980 -> 0.982-0.984, 4096x28672x8192 0.975-0.978 -> 0.977-0.980, 8192^3
1.004-1.014 -> 1.007-1.013.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir.hardware import TMA_STORE, supports
from tilex.ir.names import BULK_STORE_DEPTH, STAGED_EPILOGUES_ATTR
from tilex.ir.shared_memory import buffer_bytes, shared_usage
from tilex.ir.visit import is_op_call, seq_items, storage_sync
from tilex.op.base import is_fragment, is_global
from tilex.op.copy import CopyOp, copy_call
from tilex.op.region import Region
from tilex.transform.hopper.occupancy import blocks_per_sm, fits_block, local_words
from tilex.transform.hopper.ws_decision import has_ws_producer
from tilex.transform.kernel_scope import kernel_info, outer_launch_chain, with_launch_items

#: Narrowest staged block, in bytes per row (one 64-byte swizzle span: narrower blocks cost a TMA store each for
#: little data).
MIN_ROW_BYTES = 64
#: Narrowest block, in bytes per row, of the two tiles taken in turn (measured with 128-byte spans only).
DOUBLE_BUFFER_ROW_BYTES = 128


def stage_epilogue(func, target):
    """The pass (see the module docstring); `func` unchanged when nothing qualifies."""
    if config.get("disable_staged_epilogue", False) or target is None or not supports(target, TMA_STORE):
        return func
    info = kernel_info(func)
    chain = outer_launch_chain(func.body)
    if info is None or chain is None:
        return func
    items = seq_items(chain[-1].body)
    if not has_ws_producer(items):
        return func
    usage, unknown = shared_usage(func.body)
    if unknown:
        return func
    static, dynamic = usage["static"], usage["dynamic"]
    words = local_words(func.body, info.threads)
    blocks = blocks_per_sm(info.threads, static, dynamic, words)
    plans, notes = {}, []
    tiles = {}  # (rows, width, dtype) -> its stage tiles (one, or two taken in turn): copies one after another share
    # them (BulkStoreWaits orders them)
    for i, stmt in enumerate(items):
        op = _epilogue_copy(stmt, target)
        if op is None:
            continue
        rows, cols = [int(e) for e in op.src.buffer.shape]
        dtype = str(op.dst.buffer.dtype)
        width = next((w for (r, w, d), pair in tiles.items() if r == rows and d == dtype
                      and cols % (w * len(pair)) == 0 and _tma_ok(op, w, target)), None)
        if width is None:
            width = _width(op, info.threads, static, dynamic, words, blocks, target)
            if width is None:
                continue
            count = 1
            if _double_buffers(op, width, target):
                width, count = width // 2, 2
            tiles[rows, width, dtype] = [
                tirx.decl_buffer((rows, width), dtype, f"{op.src.buffer.name}_stage{k or ''}", scope="shared.dyn")
                for k in range(count)]
            dynamic += sum(buffer_bytes(t) for t in tiles[rows, width, dtype])
        stages = tiles[rows, width, dtype]
        plans[i] = (stages, _staged(op, stages, width))
        names = ", ".join(t.name for t in stages)
        notes.append(f"{op.src.buffer.name} -> {op.dst.buffer.name}: through shared tile{'s' * (len(stages) > 1)} "
                     f"{names} ({rows} x {width}){' in turn' * (len(stages) > 1)}, stored by TMA in "
                     f"{cols // width} block(s)")
    if not plans:
        return func
    # the tiles are allocated with the kernel's other buffers, ahead of its statements
    allocs = [tirx.AllocBuffer(stage) for pair in tiles.values() for stage in pair]
    new_items = allocs + [plans[i][1] if i in plans else s for i, s in enumerate(items)]
    return with_launch_items(func, chain, new_items).with_attr(STAGED_EPILOGUES_ATTR, notes)


def _epilogue_copy(stmt, target):
    """The CopyOp of `stmt` when it is a candidate epilogue copy, else None."""
    if not (isinstance(stmt, tirx.Evaluate) and is_op_call(stmt.value, "tilex.copy")):
        return None
    op = CopyOp.from_call(stmt.value)
    if op.disable_tma or op.is_async or not is_fragment(op.src.buffer) or not is_global(op.dst.buffer):
        return None
    if len(op.src.buffer.shape) != 2 or not 2 <= len(op.dst.buffer.shape) <= 5 or not op.src.is_whole():
        return None
    # the tile's columns in the global's last dimension, its rows in one other, extents 1 elsewhere (a batch, a head)
    rows, cols = [int(e) for e in op.src.buffer.shape]
    ext = [_static(e) for e in op.dst.extents]
    outer = ext[:-1]
    if ext[-1] != cols or not all(isinstance(x, int) for x in outer) or sorted(outer)[-1] != rows \
            or sorted(outer)[:-1] != [1] * (len(outer) - 1):
        return None
    return op


def _static(e):
    return int(e.value) if isinstance(e, tirx.IntImm) else e


def _width(op, threads, static, dynamic, words, blocks, target):
    """The widest column block of the copy's tile to stage (see the module docstring), or None."""
    rows, cols = [int(e) for e in op.src.buffer.shape]
    elem_bits = tvm.DataType(str(op.dst.buffer.dtype)).bits
    width = cols
    while width * elem_bits >= MIN_ROW_BYTES * 8 and cols % width == 0:
        extra = rows * width * elem_bits // 8
        if fits_block(static, dynamic + extra, target) and \
                blocks_per_sm(threads, static, dynamic + extra, words) >= blocks and _tma_ok(op, width, target):
            return width
        if width % 2:
            break
        width //= 2
    return None


def _double_buffers(op, width, target):
    """Whether the blocks of `width` columns go through two tiles of half the width taken in turn instead (the
    same shared memory): when the copy takes more than one block and a half block's rows are still a whole
    128-byte swizzle span."""
    # (`width` divides the columns: an even one is a whole number of pairs of halves)
    cols = int(op.src.buffer.shape[1])
    half = width // 2
    bits = tvm.DataType(str(op.dst.buffer.dtype)).bits
    return width < cols and width % 2 == 0 and half * bits >= DOUBLE_BUFFER_ROW_BYTES * 8 and _tma_ok(op, half, target)


def _tma_ok(op, width, target):
    """Whether a (rows, width) shared tile of the global's type stores to the copy's destination by TMA."""
    rows = int(op.src.buffer.shape[0])
    tile = tirx.decl_buffer((rows, width), str(op.dst.buffer.dtype), "stage", scope="shared.dyn")
    return CopyOp(Region.full(tile), _columns(op.dst, op.dst.mins[-1], width)).tma_store_ok(target)


def _columns(region, first, width):
    """`region` narrowed to `width` columns (its last dimension) from column `first`."""
    return Region(region.buffer, [*region.mins[:-1], first], [*region.extents[:-1], width])


def _staged(op, stages, width):
    """The staged copies replacing `op`: block by block through `stages` (one tile, or two in turn)."""
    rows, cols = [int(e) for e in op.src.buffer.shape]
    c0 = op.dst.mins[-1]

    def copies(j, stage):
        frag = Region(op.src.buffer, [0, j * width], [rows, width])
        out = _columns(op.dst, c0 + j * width, width)
        return [tirx.Evaluate(copy_call(frag, Region.full(stage))), tirx.Evaluate(copy_call(Region.full(stage), out))]

    if width == cols:
        return tirx.SeqStmt(copies(0, stages[0]))
    j = tirx.Var("epi_j", "int32")
    if len(stages) == 1:
        return tirx.For(j, 0, cols // width, tirx.ForKind.UNROLLED, tirx.SeqStmt(copies(j, stages[0])))
    # A barrier before each block's writes (ThreadSync would place one only before the store): there thread 0 waits
    # until the store of the tile's previous block has read it, while the other tile's latest block may still be read
    # (each block is one bulk group).
    body = tirx.SeqStmt([storage_sync()] + copies(2 * j, stages[0]) + [storage_sync()] + copies(2 * j + 1, stages[1]))
    return tirx.For(j, 0, cols // (2 * width), tirx.ForKind.UNROLLED, body, None, {BULK_STORE_DEPTH: 1})
