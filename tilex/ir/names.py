"""Every marker op and IR attribute key that crosses a file, each with who writes it and who reads it.

Tile-operator op names (``tilex.copy``, ``tilex.gemm``, ...) are not here: each lives in its operator's file, next
to its builder and its registration.
"""
from __future__ import annotations

import tvm
from tvm.ir import Op
from tvm.tirx.expr import CallEffectKind

# ---- frontend markers (tilex.language writes them at parse time) -------------------------------------------------
#: op ``tilex.parallel_marker(n)`` before an n-deep grid: language.loop.Parallel writes, language.canonicalize reads.
PARALLEL_MARKER = "tilex.parallel_marker"
#: op ``tilex.persistent_marker(n, wave_size, index, group_size)`` before an n-deep grid over a tile domain
#: (T.Persistent): language.loop writes, language.canonicalize reads and turns the grid into the persistent loop.
PERSISTENT_MARKER = "tilex.persistent_marker"
#: loop annotation ``[wave_size, index, *domain]`` of T.Persistent's loop over waves: language.canonicalize writes it,
#: transform.grid_from_persistent reads and removes it.
PERSISTENT_TILES = "tilex.persistent_tiles"
#: loop annotation, the stage count of a T.Pipelined loop: language.loop writes, transform.pipeline reads.
NUM_STAGES = "tilex.num_stages"
#: loop annotations of an explicit schedule (lists): language.loop writes, transform.pipeline reads.
PIPELINE_ORDER = "tilex.pipeline_order"
PIPELINE_STAGE = "tilex.pipeline_stage"
#: op ``tilex.use_swizzle(panel, order)``: language.rasterize writes; transform.thread_block_swizzle (and the
#: persistent grid, transform.hopper) read and consume it. `order` is an index into SWIZZLE_ORDERS; panel 0 keeps the
#: launch order (``enable=False``, or transform.rasterization's choice pinned off).
USE_SWIZZLE_OP = "tilex.use_swizzle"
SWIZZLE_ORDERS = ("row", "column")
#: op ``tilex.annotate_layout(buffer, ...)``: layout.codec builds it for language.layouts;
#: transform.layout_inference reads it.
ANNOTATE_OP = "tilex.annotate_layout"
#: op ``tilex.region(BufferLoad(buf, mins), access, *extents)``, the operand of every tile op: op.region writes and
#: reads it; transform.pipeline retargets regions to multi-buffered stages.
REGION_OP = "tilex.region"

# ---- layout inference results ----------------------------------------------------------------------------------
#: function attribute {buffer var: encoded Layout/Fragment}: transform.layout_inference writes,
#: transform.lower_tile_ops reads.
LAYOUT_MAP_ATTR = "tilex.layout_map"
#: function attribute, the notes (list of str) of the layout conversions transform.layout_inference inserted;
#: JITKernel.layout_conversions reads it.
LAYOUT_CONVERSIONS_ATTR = "tilex.layout_conversions"
#: function attribute, notes (list of str) on the fragment -> global epilogue copies transform.stage_epilogue
#: staged through shared memory and TMA stores; tests and users read it.
STAGED_EPILOGUES_ATTR = "tilex.staged_epilogues"
#: loop annotation (int), how many of the issuing thread's latest bulk-store groups may still read shared memory at
#: the loop's barriers: transform.stage_epilogue writes it on a loop of blocks staged in two alternating tiles,
#: transform.hopper.bulk_store_waits reads it (elsewhere the barriers wait for all groups).
BULK_STORE_DEPTH = "tilex.bulk_store_depth"
#: function attribute, a note (str) on the blocks transform.coarsen_blocks merged; tests and users read it.
COARSENED_BLOCKS_ATTR = "tilex.coarsened_blocks"
#: function attribute, a note (str) on what transform.swap_skinny_gemm chose for a GEMM of few rows of A.
SWAPPED_SKINNY_GEMM_ATTR = "tilex.swapped_skinny_gemm"
#: function attribute, a note (str) on the tiling transform.narrow_skinny_gemm chose for a GEMM of few columns of B.
NARROWED_SKINNY_GEMM_ATTR = "tilex.narrowed_skinny_gemm"
#: function attribute, a note (str) on the pipeline depth transform.deepen_pipeline gave a GEMM loop.
DEEPENED_PIPELINE_ATTR = "tilex.deepened_pipeline"
#: function attribute, a note (str) on the rasterization panel transform.rasterization chose for a kernel without
#: T.use_swizzle; tests and users read it.
RASTERIZATION_ATTR = "tilex.rasterization"
#: T.Parallel loop annotation, its encoded thread Fragment: transform.layout_inference writes,
#: transform.lower_tile_ops reads.
LOOP_LAYOUT_ATTR = "tilex.loop_layout"

# ---- pipelines and warp specialization ---------------------------------------------------------------------------
#: AttrStmt around a pipelined wgmma gemm (value ASYNC_MMA_CP_ASYNC, ASYNC_MMA_WS or ASYNC_MMA_WS_SYNC):
#: transform.pipeline writes, transform.lower_tile_ops reads (LowerContext.async_mma for op.gemm_wgmma).
ASYNC_MMA_SCOPE = "tilex.async_mma"
#: Values of ASYNC_MMA_SCOPE: left in flight in a cp.async pipeline; left in flight in a warp-specialized consumer
#: (operands written by TMA only); completed before the next statement in a warp-specialized consumer whose
#: shared operands are TMA stages or tiles written before the loop (fenced and synchronized once before it); the
#: same but only issued, a later wait completes it (transform.hopper.ws_groups); fenced and synchronized like a
#: gemm outside a pipeline (its shared operands are written in the loop) but only issued, a later wait completes it;
#: completed before the next statement in a cp.async pipeline whose shared operands only the pipeline's copies
#: write (the iteration's fence and barrier ordered them already).
ASYNC_MMA_CP_ASYNC, ASYNC_MMA_WS, ASYNC_MMA_WS_SYNC, ASYNC_MMA_WS_DEFER, ASYNC_MMA_FENCED_DEFER = 1, 2, 3, 4, 5
ASYNC_MMA_CP_ASYNC_SYNC = 6
#: AttrStmt around the mbarrier initialization, hoisted before the role split: transform.hopper.ws_loops writes,
#: transform.hopper.warp_specialize reads.
WS_INIT = "tilex.ws_init"
#: AttrStmt around the producer loop, value = number of consumer threads: transform.hopper.ws_loops writes,
#: transform.hopper.warp_specialize reads.
WS_PRODUCER = "tilex.ws_producer"
#: AttrStmts around each role's pipeline loop (node: a var; value: its default): the base of the stage/phase
#: counter (value: trip count), the loop's first iteration (value: min) and end (value: min + extent).
#: transform.hopper.ws_loops writes, transform.hopper.persistent binds and removes them.
WS_PIPELINE_BASE = "tilex.ws_pipeline_base"
WS_PIPELINE_LO = "tilex.ws_pipeline_lo"
WS_PIPELINE_HI = "tilex.ws_pipeline_hi"
#: AttrStmt around the consumer warpgroups' statements, value = their thread count: transform.hopper.warp_specialize
#: writes; transform.hopper.roles (NamedBarriers) and transform.hopper.persistent read.
WS_CONSUMER = "tilex.ws_consumer"
#: AttrStmt holding the producer branch while the role split is unfolded (node: the split condition):
#: transform.hopper.roles writes (UnfoldRoles) and reads (NamedBarriers).
WS_PRODUCER_SIDE = "tilex.ws_producer_side"

# ---- programs that synchronize themselves (tilex.language.expert) ------------------------------------------------
#: AttrStmt around a part of the kernel that only the threads [lo, lo + extent) run (node: lo as an IntImm, value:
#: extent): language.expert writes it inside each T.ws region, transform.thread_regions (MarkThreadRegions) inside
#: each branch on the thread index that holds tile operators; transform.layout_inference, transform.lower_tile_ops
#: and transform.thread_sync read it (tile operators run on those threads, barriers inside are named barriers).
THREAD_RANGE = "tilex.thread_range"
#: op ``tilex.barrier_init(BufferLoad(bars, [0]), count_0, ..., count_n-1)`` after a T.alloc_barrier allocation:
#: language.expert writes it, transform.init_barriers turns it into the mbarrier initialization.
BARRIER_INIT_OP = "tilex.barrier_init"
#: op ``tilex.access_ptr(BufferLoad(buf, indices), extent, rw_mask)`` (T.access_ptr): language.expert writes it,
#: transform.lower_tile_ops turns it into TVM's ``tvm_access_ptr`` of the buffer's physical form.
ACCESS_PTR_OP = "tilex.access_ptr"
#: op ``tilex.reducer(r[0, ...], kind index, init mode, init value)``: after a T.alloc_reducer fragment's allocation
#: (kind >= 0; layout inference and lowering hand the reducers to T.Parallel, transform.lower_tile_ops drops it) and
#: at a T.reducer_init (kind -1; transform.reducers turns it into the identity fill): op.reducer writes both.
REDUCER_MARKER = "tilex.reducer"
#: op ``tilex.reducer_combine(r[i], v)`` (T.reducer_update's value): transform.reducers replaces it by the reducer's
#: operation.
REDUCER_COMBINE = "tilex.reducer_combine"
#: op ``tilex.async_write(tvm_access_ptr(..., rw_mask=2))`` after a T.async_copy's cp.async: op.explicit_async
#: writes it so that ThreadSync sees the tile written; transform.thread_sync removes it after planning.
ASYNC_WRITE_OP = "tilex.async_write"
#: function attribute, why the program is compiled as written (str: it synchronizes itself, T.ws / user barriers
#: / T.tma_copy ...; its T.Pipelined loops run serially, nothing is warp-specialized): transform.pipeline.inject
#: writes it (reason from transform.hopper.ws_decision.manual_synchronization); tests and users read it.
MANUAL_SYNC_ATTR = "tilex.manual_synchronization"

# ---- shared memory ------------------------------------------------------------------------------------------------
#: op ``tilex.keep_alive(access_ptr, ...)`` touching every shared tile at the start and end of a kernel, so that
#: TVM's MergeSharedMemoryAllocations overlaps none of them: transform.shared_tiles writes (KeepTilesApart) and
#: removes it after the merge (DropKeepAlive).
KEEP_ALIVE_OP = "tilex.keep_alive"
#: function attribute {shared.dyn tile: byte offset}, set only on a kernel whose tiles fit one block by sharing bytes
#: between tiles whose lifetimes do not overlap: transform.shared_tiles writes it (KeepTilesApart, from
#: transform.shared_reuse.plan_reuse), transform.shared_reuse reads and removes it (PlaceSharedTiles).
SHARED_PLACEMENT_ATTR = "tilex.shared_placement"
#: AllocBuffer annotation (int): the bytes a ``shared.dyn`` tile uses when its allocation was padded to whole KB
#: (beside 1 KB-aligned swizzled tiles, so that TVM's merge, which packs tiles one after another, keeps those
#: aligned): transform.lower_tile_ops writes it, transform.shared_reuse reads it (a placement of its own packs the
#: tile at its used size, aligned by its own needs).
SHARED_USED_BYTES = "tilex.used_bytes"

_REGISTERED_INTRINSICS: set[str] = set()


def register_intrinsic(name, printer_name=None):
    """Create (once) an opaque TVM op called `name` (e.g. ``tilex.copy``)."""
    if name in _REGISTERED_INTRINSICS:
        return
    try:
        op_exists = Op.get(name).has_attr("TCallEffectKind")
    except Exception:  # noqa: BLE001 - op not known yet
        op_exists = False
    if not op_exists:
        tvm.ir.register_op_attr(name, "TCallEffectKind", CallEffectKind.Opaque.value, level=10)
        tvm.ir.register_op_attr(name, "TScriptPrinterName", printer_name or name.replace(".", "_"), level=10)
    _REGISTERED_INTRINSICS.add(name)


for _marker in (PARALLEL_MARKER, PERSISTENT_MARKER, USE_SWIZZLE_OP, ANNOTATE_OP, REGION_OP, KEEP_ALIVE_OP,
                BARRIER_INIT_OP, ACCESS_PTR_OP, ASYNC_WRITE_OP, REDUCER_MARKER,
                REDUCER_COMBINE):
    register_intrinsic(_marker)

# ---- grid-wide barriers (T.sync_grid) -------------------------------------------------------------------------------
#: launch-parameter tag of a device function (its ``tirx.kernel_launch_params``) that TVM's CUDA runtime reads as
#: "launch cooperatively" (cuLaunchKernelEx's cooperative attribute): transform.grid_sync writes it for a kernel
#: that calls ``tilex::sync_grid``.
COOPERATIVE_LAUNCH = "tirx.use_cooperative_launch"
#: device-function attribute listing TVM's launch parameters (thread tags, then the dynamic shared-memory tag):
#: TVM's SplitHostDevice writes it, transform.grid_sync adds COOPERATIVE_LAUNCH to it.
KERNEL_LAUNCH_PARAMS = "tirx.kernel_launch_params"
