"""The whole lowering pipeline from a tile program to a TVM executable, defined in one place.

    T.prim_func (tile ops, T.Parallel, T.Pipelined)
      -> HoistGlobalBuffers        T.alloc_global workspaces out of the kernels: the host allocates them per call
      (several T.Kernel blocks in one program: the passes below run once per kernel, transform/several_kernels.py)
      -> canonicalize              frontend markers -> parallel loops (language/canonicalize.py; also at parse time)
      -> GridFromPersistent        a T.Persistent loop of independent tiles -> the grid it walks (tilex's schedule,
                                   its own persistent grid included, then applies)
      -> ResolveReducers           T.alloc_reducer operations into their updates, inits and finalizes
      -> InitBarriers              T.alloc_barrier's mbarriers initialized once when the block starts
      -> MarkThreadRegions         branches on the thread index with tile operators -> thread regions (as T.ws);
                                   a program that synchronizes itself (T.ws, its own mbarriers, T.tma_copy, ...)
                                   skips the rewrites below and is neither pipelined nor warp-specialized
      -> RegisterOperand           (opt in) a tile one T.Parallel writes for one T.gemm -> the MMA's register operand
      -> SwapSkinnyGemm            (sm90) a plain GEMM with few rows of A -> C^T tiles in narrow, deep blocks
      -> NarrowSkinnyGemm          (sm90) a plain GEMM with 64..256 columns of B -> smaller blocks, deep pipeline
      -> CoarsenBlocks             (sm90) a one-warpgroup 128 x N<=128 GEMM block runs with its neighbour as 128 x 2N
      -> DeepenPipeline            (sm90) a 128 x 256 GEMM block written with < 4 stages runs 4 when they fit
      -> InjectSoftwarePipeline    multi-buffered shared tiles; cp.async pipeline, explicit schedule, or (sm90)
                                   TMA producer / wgmma consumer loops (transform/pipeline/, transform/hopper/)
      -> StageEpilogue             (sm90, warp-specialized) fragment -> global epilogue copies through a swizzled
                                   shared tile and TMA stores, as wide as occupancy allows
      -> ChooseRasterization       a grid without T.use_swizzle: the panel whose wave of blocks reads the fewest bytes
      -> LayoutInference           Layout / Fragment for every shared buffer and fragment
      -> LowerTileOps              per-thread TIR; physical buffers
      -> WarpSpecialize            (sm90) producer warpgroup + consumer warpgroups, register split
      -> PersistentTiles           (sm90) persistent grid, clusters with TMA multicast, stream-K
      -> ThreadBlockSwizzle        T.use_swizzle rasterization
      -> TVM: FlattenBuffer, LegalVectorWidths (tilex; T.vectorized loops cut to 16-byte vectors),
              SubByteAccesses (tilex; int4 / fp4 elements through bytes and words), VectorizeLoop,
              StmtSimplify, SubWordFills (tilex; one-value vectors of 8/16-bit
              elements as 32-bit words), KeepTilesApart (tilex; tiles that only fit by taking
              turns share bytes: shared_reuse.py), UnfoldRoles + ThreadSync + NamedBarriers + BulkStoreWaits
              (tilex), PlaceSharedTiles (tilex), ScopeBindsForMerge (tilex), MergeSharedMemoryAllocations,
              DropKeepAlive (tilex), CheckSharedMemory (tilex),
              SplitHostDevice, LowerThreadAllreduce (T.tvm_thread_allreduce), MakePackedAPI,
              BF16/FP8 legalization; LowerIntrin with tilex's float32 exp2 / exp rules (transform/fast_math.py:
              ex2.approx unless tilex.disable_fast_math)
      -> TVM CUDA codegen -> nvcc (tilex.engine.nvcc, headers from src/)
"""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.tirx import compilation_pipeline as cp

from tilex import config
from tilex.engine import nvcc  # registers TVM's CUDA compile / post-processing callbacks on import
from tilex.ir.hardware import block_shared_memory_limit, compute_capability
from tilex.ir.shared_memory import SHARED_ERROR, block_footprint, buffer_bytes, declared_tiles, shared_usage, \
    shortfall_message, shortfall_report
from tilex.ir.source import backtrace_requested, is_located, take_pass_error
from tilex.ir.visit import walk
from tilex.language.canonicalize import canonicalize
from tilex.op.base import LayoutConflictError, TileOpError
from tilex.transform import fast_math  # noqa: F401  (registers the float32 exp2 / exp lowering rules)
from tilex.transform.grid_from_persistent import grid_from_persistent
from tilex.transform.guard_global_access import guard_global_access
from tilex.transform.hoist_global_buffers import hoist_global_buffers
from tilex.transform.scalar_bool_vectors import scalar_bool_vectors
from tilex.transform.hopper.bulk_store_waits import BulkStoreWaits
from tilex.transform.hopper.persistent import persistent_tiles
from tilex.transform.hopper.roles import NamedBarriers, UnfoldRoles
from tilex.transform.hopper.warp_specialize import warp_specialize
from tilex.transform.hopper.ws_decision import manual_synchronization
from tilex.transform.init_barriers import init_barriers
from tilex.transform.coarsen_blocks import coarsen_blocks
from tilex.transform.deepen_pipeline import deepen_pipeline
from tilex.transform.layout_inference import layout_inference
from tilex.transform.legal_vector_widths import LegalVectorWidths
from tilex.transform.narrow_skinny_gemm import narrow_skinny_gemm
from tilex.transform.pipeline.inject import inject_pipeline
from tilex.transform.rasterization import choose_rasterization
from tilex.transform.reducers import resolve_reducers
from tilex.transform.register_operand import register_operand
from tilex.transform.several_kernels import per_kernel, run_per_kernel
from tilex.transform.stage_epilogue import stage_epilogue
from tilex.transform.stage_through_shared import stage_through_shared
from tilex.transform.sub_word_fills import SubWordFills
from tilex.transform.swap_skinny_gemm import swap_skinny_gemm
from tilex.transform.swizzle_shared_tiles import lower_with_swizzles
from tilex.transform.shared_reuse import PlaceSharedTiles
from tilex.transform.sub_byte_access import SubByteAccesses
from tilex.transform.shared_tiles import DropKeepAlive, KeepTilesApart, ScopeBindsForMerge
from tilex.transform.thread_block_swizzle import thread_block_swizzle
from tilex.transform.thread_regions import mark_thread_regions
from tilex.transform.grid_sync import GridSync
from tilex.transform.thread_sync import ThreadSync

PIPELINE_NAME = "tilex"


def run_tile_passes(func: tirx.PrimFunc, target: tvm.target.Target) -> tirx.PrimFunc:
    """tilex's own passes, tile program -> plain per-thread TIR. They run as Python calls (not through TVM's pass
    manager) so that a user error keeps its Python type (LayoutConflictError, TileOpError, ...).

    An error in the user's program (a TileOpError, a LayoutConflictError, or any error that LayoutInference or
    LowerTileOps located in the program: its message ends with the file, line and source line of the operator) is
    given back with a short traceback: the frames of the passes are dropped, ``TILEX_BACKTRACE=1`` keeps them."""
    try:
        func = hoist_global_buffers(func)
        return run_per_kernel(func, lambda kernel: _tile_passes(kernel, target))
    except Exception as e:  # noqa: BLE001 - only user errors are shortened; the rest is re-raised untouched
        if not is_user_error(e) or backtrace_requested():
            raise
        raise e.with_traceback(None) from None


def is_user_error(exc: BaseException) -> bool:
    """Whether `exc` reports a mistake in the user's tile program (rather than a bug in tilex)."""
    return isinstance(exc, (TileOpError, LayoutConflictError)) or is_located(exc)


def _tile_passes(func, target):
    func = canonicalize(func)
    func = grid_from_persistent(func)
    func = resolve_reducers(func)
    func = init_barriers(func)
    func = mark_thread_regions(func)
    if manual_synchronization(func.body) is None:  # a program that synchronizes itself is compiled as written
        func = register_operand(func, target)
        func = swap_skinny_gemm(func, target)
        func = narrow_skinny_gemm(func, target)
        func = coarsen_blocks(func, target)
        func = deepen_pipeline(func, target)
        func = stage_through_shared(func, target)
    func = inject_pipeline(func, target)
    func = stage_epilogue(func, target)
    func = choose_rasterization(func, target)
    func = layout_inference(func, target)
    func = lower_with_swizzles(func, target)
    func = guard_global_access(func)
    func = scalar_bool_vectors(func)
    func = warp_specialize(func)
    func = persistent_tiles(func, target)
    return thread_block_swizzle(func)  # after lowering: bounds proofs see grid ranges


def tvm_passes(pass_config):
    """TVM's passes that are correct on the flat IR tilex produces."""
    passes = [
        tirx.transform.ConvertSSA(),  # lowered tile ops may reuse loop variables across statements
        tirx.transform.FlattenBuffer(),
        tirx.transform.BF16ComputeLegalize(),
        tirx.transform.NarrowDataType(32),
        LegalVectorWidths,  # a T.vectorized loop wider than 16 bytes: 16-byte vectors
        SubByteAccesses,  # int4 / fp4 / ... elements stored and widened through bytes and words
        tirx.transform.VectorizeLoop(not bool(pass_config.get("tirx.disable_vectorize", False))),
        tirx.transform.StmtSimplify(),
        SubWordFills,  # one-value vectors of 8/16-bit elements as 32-bit words (TVM cannot print them wider)
        tirx.transform.RemoveNoOp(),
        tirx.transform.FP8ComputeLegalize(),
        tirx.transform.VerifyMemory(),
        tirx.transform.AnnotateEntryFunc(),
        # barriers before the merge, tile by tile: the merge is kept from overlapping any two tiles
        # (per_kernel: a program of several T.Kernel blocks gets each kernel planned on its own)
        per_kernel(KeepTilesApart),
        per_kernel(UnfoldRoles),  # warp-specialized kernels: ThreadSync sees the consumer's statements unconditionally
        per_kernel(ThreadSync),  # TVM's ThreadSync, each shared tile planned on its own
        per_kernel(NamedBarriers),  # warp-specialized kernels: consumer-only barriers
        per_kernel(BulkStoreWaits),  # TMA stores: the issuing thread waits for the shared-memory reads before barriers
        per_kernel(PlaceSharedTiles),  # tiles that take turns (KeepTilesApart planned them): one arena, their offsets
        per_kernel(ScopeBindsForMerge),  # lets reading a local variable: a scope the merge's access finder accepts
        per_kernel(s_tir.transform.MergeSharedMemoryAllocations()),
        DropKeepAlive,
        tirx.transform.RemoveNoOp(),
        per_kernel(CheckSharedMemory),
        tirx.transform.SplitHostDevice(),
        GridSync,  # kernels calling T.sync_grid: cooperative launch, checks (transform/grid_sync.py)
        s_tir.transform.LowerThreadAllreduce(),  # TVMScript's T.tvm_thread_allreduce (a SIMT block reduction)
        tirx.transform.MakePackedAPI(),
        tirx.transform.FP8StorageLegalize(),
        tirx.transform.BF16StorageLegalize(),
    ]
    return passes


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.CheckSharedMemory")
def CheckSharedMemory(func, mod, ctx):  # noqa: N802
    """After merging: the block's shared memory (static + dynamic, 1 KB alignment pad included) must fit.
    (KeepTilesApart reports a kernel of several tiles earlier, tile by tile.)"""
    target = tvm.target.Target.current(allow_none=True)
    if target is None or target.kind.name != "cuda":
        return func
    arch = compute_capability(target)[0]
    limit = block_shared_memory_limit(arch)
    usage, _ = shared_usage(func.body)
    total = block_footprint(usage["static"], usage["dynamic"])
    if total > limit:
        tiles = []
        walk(func.body, (tirx.AllocBuffer, lambda n: tiles.append((n.buffer.name, buffer_bytes(n.buffer) or 0))
                         if str(n.buffer.scope()).startswith("shared") else None))
        raise ValueError(shortfall_message(total, limit, arch, tiles))
    return func


def _tilex_pipeline():
    @tvm.transform.module_pass(opt_level=0, name="tilex.Pipeline")
    def _pipeline(mod, _ctx):
        pass_config = tvm.transform.PassContext.current().config
        return tvm.transform.Sequential(tvm_passes(pass_config))(mod)

    return _pipeline, cp.finalize_host_passes, cp.finalize_device_passes


cp.register_tir_pipeline(PIPELINE_NAME, _tilex_pipeline)


def lower_to_tir(func: tirx.PrimFunc, target: tvm.target.Target, pass_configs: dict | None = None) -> tvm.IRModule:
    """Run only tilex's tile passes (for inspection and tests): returns per-thread TIR before TVM's passes."""
    ours, _ = config.split(pass_configs)
    with config.scope(ours), target:
        return tvm.IRModule({"main": run_tile_passes(func, target)})


def build(func: tirx.PrimFunc, target: tvm.target.Target, pass_configs: dict | None = None):
    """Compile a tile program for `target` to a tvm runtime Executable."""
    name = str(func.attrs["global_symbol"]) if func.attrs is not None and "global_symbol" in func.attrs else "main"
    ours, theirs = config.split(pass_configs)
    with config.scope(ours), tvm.transform.PassContext(opt_level=3, config=theirs), target, declared_tiles(func):
        mod = tvm.IRModule({name: run_tile_passes(func, target)})
        try:
            return tvm.compile(mod, target=target, tir_pipeline=PIPELINE_NAME)
        except Exception as e:  # noqa: BLE001 - our check raised inside TVM's pass manager: give it back as is
            nvcc_error = nvcc.take_hook_error()
            if nvcc_error is not None:  # nvcc rejected the CUDA inside TVM's compile callback
                raise nvcc_error from None
            kept = take_pass_error()
            if kept is not None:  # a user error one of tilex's passes raised among TVM's
                raise kept from None
            msg = str(e)
            if SHARED_ERROR in msg:
                raise ValueError(shortfall_report(msg)) from None
            raise
