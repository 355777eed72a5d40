"""The whole lowering pipeline from a tile program to a TVM executable, defined in one place.

    T.prim_func (tile ops, T.Parallel, T.Pipelined)
      -> FrontendCanonicalize      markers -> parallel loops (also run at parse time)
      -> InjectSoftwarePipeline    multi-buffered shared tiles, cp.async groups, barriers
      -> LayoutInference          Layout / Fragment for every shared buffer and fragment
      -> LowerTileOps             per-thread TIR; physical buffers
      -> TVM: FlattenBuffer, VectorizeLoop, StmtSimplify, ThreadSync, MergeSharedMemoryAllocations,
              AnnotateEntryFunc, SplitHostDevice, MakePackedAPI, BF16/FP8 legalization
      -> TVM CUDA codegen -> nvcc (tilex.jit.nvcc, headers from src/)
"""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.tirx import compilation_pipeline as cp

from tilex.transform.frontend_canonicalize import FrontendCanonicalize
from tilex.transform.inject_pipeline import InjectSoftwarePipeline
from tilex.transform.layout_inference import LayoutInference
from tilex.transform.lower_tile_ops import LowerTileOps

PIPELINE_NAME = "tilex"


def tile_passes():
    """tilex's own passes: tile program -> plain per-thread TIR."""
    return [FrontendCanonicalize, InjectSoftwarePipeline, LayoutInference, LowerTileOps]


def tvm_passes(config):
    """TVM's passes that are correct on the flat IR tilex produces."""
    passes = [
        tirx.transform.ConvertSSA(),  # lowered tile ops may reuse loop variables across statements
        tirx.transform.FlattenBuffer(),
        tirx.transform.BF16ComputeLegalize(),
        tirx.transform.NarrowDataType(32),
        tirx.transform.VectorizeLoop(not bool(config.get("tirx.disable_vectorize", False))),
        tirx.transform.StmtSimplify(),
        tirx.transform.RemoveNoOp(),
        tirx.transform.FP8ComputeLegalize(),
        tirx.transform.VerifyMemory(),
        tirx.transform.AnnotateEntryFunc(),
        s_tir.transform.ThreadSync("shared"),
        s_tir.transform.ThreadSync("shared.dyn"),
        s_tir.transform.MergeSharedMemoryAllocations(),
        tirx.transform.SplitHostDevice(),
        tirx.transform.MakePackedAPI(),
        tirx.transform.FP8StorageLegalize(),
        tirx.transform.BF16StorageLegalize(),
    ]
    return passes


def _tilex_pipeline():
    @tvm.transform.module_pass(opt_level=0, name="tilex.Pipeline")
    def _pipeline(mod, _ctx):
        config = tvm.transform.PassContext.current().config
        return tvm.transform.Sequential(tile_passes() + tvm_passes(config))(mod)

    return _pipeline, cp.finalize_host_passes, cp.finalize_device_passes


cp.register_tir_pipeline(PIPELINE_NAME, _tilex_pipeline)


def lower_to_tir(func: tirx.PrimFunc, target: tvm.target.Target) -> tvm.IRModule:
    """Run only tilex's tile passes (for inspection and tests): returns per-thread TIR before TVM's passes."""
    mod = tvm.IRModule({"main": func})
    with target:
        mod = tirx.transform.BindTarget(target)(mod)
        return tvm.transform.Sequential(tile_passes())(mod)


def build(func: tirx.PrimFunc, target: tvm.target.Target, pass_configs: dict | None = None):
    """Compile a tile program for `target` to a tvm runtime Executable."""
    from tilex.jit import nvcc  # noqa: F401 - registers the CUDA compile/postproc hooks

    name = str(func.attrs["global_symbol"]) if func.attrs is not None and "global_symbol" in func.attrs else "main"
    mod = tvm.IRModule({name: func})
    with tvm.transform.PassContext(opt_level=3, config=dict(pass_configs or {})), target:
        return tvm.compile(mod, target=target, tir_pipeline=PIPELINE_NAME)
