"""How much shared memory a tile program's kernel needs, and how much the device allows.

:func:`shared_memory_bytes` lowers the program with tilex's tile passes (``tilex.engine.lower_to_tir``), runs
TVM's passes of the tilex pipeline up to and including ``MergeSharedMemoryAllocations`` (the pass that packs
every ``shared.dyn`` buffer into the one ``buf_dyn_shmem`` array whose size becomes the launch's dynamic shared
memory), and adds up the shared allocations left (``shared.dyn`` and static ``shared``). If running TVM's passes
fails, it falls back to the sum of the shared allocations right after the tile passes, an upper bound (the
merge can only overlap buffers whose lifetimes are disjoint).

No GPU and no nvcc are needed: it runs in the autotuner's compile phase, before nvcc, so a configuration that
cannot launch is rejected without compiling it.
"""
from __future__ import annotations

import logging

import tvm
from tvm import tirx

from tilex import config, env
from tilex.engine import lower_to_tir, pipeline
from tilex.ir.hardware import ARCH_SMEM_LIMITS, arch_shared_memory_limit  # noqa: F401 (re-exported)
from tilex.ir.shared_memory import shared_usage

__all__ = ["shared_memory_bytes", "shared_memory_usage", "device_shared_memory_limit", "arch_shared_memory_limit",
           "ARCH_SMEM_LIMITS"]

logger = logging.getLogger("tilex.autotuner")

_MERGE_PASS = "MergeSharedMemoryAllocations"


def _sum_shared(mod) -> dict:
    usage = {"dynamic": 0, "static": 0}
    unknown = []
    for _gv, f in mod.functions.items():
        if isinstance(f, tirx.PrimFunc):
            u, names = shared_usage(f.body)
            usage["dynamic"] += u["dynamic"]
            usage["static"] += u["static"]
            unknown += names
    if unknown:
        raise ValueError(f"shared buffer(s) {', '.join(unknown)} have a shape that is not a constant")
    return usage


def shared_memory_usage(func, target="auto", pass_configs=None, merged: bool = True) -> dict:
    """``{"dynamic": bytes, "static": bytes}`` of shared memory one block of ``func``'s kernel uses when compiled
    for ``target``: ``dynamic`` is the ``shared.dyn`` allocation (tiles; the launch's dynamic shared memory),
    ``static`` the ``__shared__`` arrays (e.g. mbarriers, reduction workspaces).

    ``merged=False`` skips TVM's passes and adds up the shared buffers right after tilex's tile passes
    (multi-buffered pipeline stages included). Raises what lowering raises (``TileOpError``,
    ``LayoutConflictError``, ...) for a program that does not build.
    """
    tgt = env.resolve_target(target)
    lowered = lower_to_tir(func, tgt, pass_configs)
    if not merged:
        return _sum_shared(lowered)
    try:
        _ours, theirs = config.split(pass_configs)
        with tvm.transform.PassContext(opt_level=3, config=theirs), tgt:
            passes = pipeline.tvm_passes(tvm.transform.PassContext.current().config)
            names = [str(p.info.name) for p in passes]
            cut = [i for i, n in enumerate(names) if n.endswith(_MERGE_PASS)]
            if not cut:
                raise LookupError(f"{_MERGE_PASS} is not in tilex's pipeline")
            mod = tvm.transform.Sequential(passes[: cut[0] + 1])(lowered)
        return _sum_shared(mod)
    except Exception as e:  # noqa: BLE001 - an estimate is still useful
        logger.debug("shared_memory_usage: TVM passes failed (%s); using the sum of the shared buffers", e)
        return _sum_shared(lowered)


def shared_memory_bytes(func, target="auto", pass_configs=None, merged: bool = True) -> int:
    """Bytes of shared memory (dynamic + static) one block of ``func``'s kernel uses when compiled for
    ``target`` (see :func:`shared_memory_usage`)."""
    u = shared_memory_usage(func, target, pass_configs, merged)
    return u["dynamic"] + u["static"]


def device_shared_memory_limit(device=None) -> int | None:
    """``shared_memory_per_block_optin`` of the current (or given) CUDA device, ``None`` without a GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        if device is None:
            device = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(device)
        val = getattr(props, "shared_memory_per_block_optin", None)
        return int(val) if val else None
    except Exception:  # noqa: BLE001
        return None
