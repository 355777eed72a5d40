"""Facts about the GPU a kernel is built for, stated once: compute capability, the instructions tilex may emit
for it (:data:`ARCH_FEATURES`, :func:`supports`), shared-memory and register limits, multiprocessor counts."""
from __future__ import annotations

from tilex import env

#: Opt-in shared memory per block (bytes) by compute capability ``(major, minor)``, from the CUDA programming
#: guide's table of technical specifications.
ARCH_SMEM_LIMITS = {
    (7, 0): 96 * 1024, (7, 5): 64 * 1024,
    (8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 7): 163 * 1024, (8, 9): 99 * 1024,
    (9, 0): 227 * 1024,
    (10, 0): 227 * 1024, (10, 3): 227 * 1024, (11, 0): 227 * 1024,
    (12, 0): 99 * 1024, (12, 1): 99 * 1024,
}

#: sm90 multiprocessor: 32-bit registers, and the shared memory its resident blocks may use together (228 KB, of
#: which one block may take 227 KB; the driver also keeps SMEM_RESERVED_PER_BLOCK for every resident block).
REGS_PER_SM = 65536
SMEM_PER_SM = 228 * 1024
SMEM_RESERVED_PER_BLOCK = 1024

#: Multiprocessor count of each arch's flagship part (used when the current GPU is not of that arch).
SMS_BY_ARCH = {"sm_90a": 132, "sm_90": 132, "sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_100a": 148}


def compute_capability(target) -> tuple[int, bool]:
    """(compute capability as an int like 90, whether it is an arch-specific 'a' target) of a CUDA target;
    (80, False) for a target without an arch."""
    if target is None or "arch" not in target.attrs:
        return 80, False
    arch = str(target.attrs["arch"]).replace("sm_", "")
    return int(arch.rstrip("af")), arch.endswith("a")


# ---- what tilex may emit per target ----------------------------------------------------------------------------
# Each feature is a family of instructions that a lowering emits through the wrappers of src/tilex/*.h; the
# table says on which archs those wrappers have an implementation (checked with nvcc 13.0 / ptxas, and the guards
# in the headers agree: a wrapper used on an arch without it is a compile error, not an empty body).
MMA_SYNC = "mma.sync"            # mma.sync m16n8k16 f16/bf16 -> f32, m16n8k32 s8/u8 -> s32 (mma_sm80.h): sm_80+
MMA_SYNC_FP8 = "mma.sync.fp8"    # mma.sync m16n8k32 e4m3/e5m2 -> f32 (mma_sm80.h): sm_89+
LDMATRIX = "ldmatrix"            # ldmatrix.x4/.x2 (mma_sm80.h): sm_75+, tilex: sm_80+
CP_ASYNC = "cp.async"            # cp.async + commit/wait groups (copy_async.h): sm_80+
TMA_LOAD = "tma_load"            # cp.async.bulk.tensor global->shared with mbarrier complete_tx (tma.h): sm_90+
TMA_STORE = "tma_store"          # cp.async.bulk.tensor shared->global, bulk groups (tma.h): sm_90+
TMA_MULTICAST = "tma_multicast"  # .multicast::cluster TMA loads (tma.h): legal on sm_90+, but the PTX ISA calls it
#                                  optimized only for sm_90a and the sm_100/103/110 a/f targets ("substantially
#                                  reduced performance on other targets"): tilex uses it there only
MBARRIER_TX = "mbarrier_tx"      # mbarrier init / arrive.expect_tx / try_wait.parity, fence.proxy.async (tma.h): sm_90+
CLUSTERS = "clusters"            # __cluster_dims__, mapa + remote mbarrier arrive, barrier.cluster (tma.h): sm_90+
SETMAXNREG = "setmaxnreg"        # setmaxnreg.inc/.dec (tma.h): arch- or family-specific targets (a / f) of sm_90+
WGMMA = "wgmma"                  # wgmma.mma_async + fence/commit/wait (wgmma_sm90.h): sm_90a only (Blackwell has
#                                  tcgen05 instead, which tilex does not implement)
VECTOR_ATOMICS = "vector_atomics"  # float2/float4 atomicAdd, red.global.v*.f16x2/bf16x2 (atomic.h): sm_90+

FEATURES = (MMA_SYNC, MMA_SYNC_FP8, LDMATRIX, CP_ASYNC, TMA_LOAD, TMA_STORE, TMA_MULTICAST, MBARRIER_TX, CLUSTERS,
            SETMAXNREG, WGMMA, VECTOR_ATOMICS)

_SM80 = frozenset({MMA_SYNC, LDMATRIX, CP_ASYNC})
_SM89 = _SM80 | {MMA_SYNC_FP8}
_SM90 = _SM89 | {TMA_LOAD, TMA_STORE, MBARRIER_TX, CLUSTERS, VECTOR_ATOMICS}
_DC_SPECIFIC = _SM90 | {SETMAXNREG, TMA_MULTICAST}  # sm_100/103/110 'a' and 'f' targets

#: Features per arch tilex knows. ``a``: arch-specific target, ``f``: family-specific (CUDA 12.9+); sm_101 is
#: called sm_110 since CUDA 13. An arch missing here gets its generation's row (:func:`arch_features`).
ARCH_FEATURES = {
    "sm_80": _SM80, "sm_86": _SM80, "sm_87": _SM80, "sm_89": _SM89,
    "sm_90": _SM90,
    "sm_90a": _SM90 | {SETMAXNREG, TMA_MULTICAST, WGMMA},
    "sm_100": _SM90, "sm_100a": _DC_SPECIFIC, "sm_100f": _DC_SPECIFIC,
    "sm_103": _SM90, "sm_103a": _DC_SPECIFIC, "sm_103f": _DC_SPECIFIC,
    "sm_110": _SM90, "sm_110a": _DC_SPECIFIC, "sm_110f": _DC_SPECIFIC,
    "sm_120": _SM90, "sm_120a": _SM90 | {SETMAXNREG}, "sm_120f": _SM90 | {SETMAXNREG},
    "sm_121": _SM90, "sm_121a": _SM90 | {SETMAXNREG}, "sm_121f": _SM90 | {SETMAXNREG},
}


def _arch_of(target) -> str:
    """``sm_XX[a|f]`` of a target, an arch string, or None (a target without an arch: sm_80, as
    :func:`compute_capability` has it)."""
    if target is None:
        return "sm_80"
    if isinstance(target, str):
        return env.normalize_arch(target)
    if "arch" not in target.attrs:
        return "sm_80"
    return env.normalize_arch(str(target.attrs["arch"]))


def arch_features(target) -> frozenset:
    """The features (the constants above) tilex may emit for `target`: a tvm Target, an arch string like
    ``"sm_100a"``, or None."""
    arch = _arch_of(target)
    if arch in ARCH_FEATURES:
        return ARCH_FEATURES[arch]
    digits = arch[3:].rstrip("af")
    cc, specific = int(digits), arch[3:] != digits
    if cc < 80:
        return frozenset()
    if cc < 90:
        return _SM89 if cc >= 89 else _SM80
    return _SM90 | {SETMAXNREG} if specific else _SM90


def supports(target, feature: str) -> bool:
    """Whether tilex may emit `feature` (one of :data:`FEATURES`) for `target`."""
    if feature not in FEATURES:
        raise ValueError(f"tilex: unknown target feature {feature!r} (one of {', '.join(FEATURES)})")
    return feature in arch_features(target)


def unsupported_message(target, feature: str, what: str) -> str:
    """The error text for `what` (e.g. ``"T.gemm(A, B, C)"``) needing `feature` that `target` lacks."""
    arch = _arch_of(target)
    have = ", ".join(f for f in FEATURES if f in arch_features(arch)) or "none"
    return (f"{what} needs {feature}, which tilex cannot emit for target {arch} (features of {arch}: {have}; "
            f"see tilex.ir.hardware.ARCH_FEATURES)")


def arch_shared_memory_limit(arch: str) -> int | None:
    """Opt-in shared memory per block for an arch like ``"sm_90a"`` (``None`` if unknown)."""
    digits = env.normalize_arch(arch)[3:].rstrip("af")
    return ARCH_SMEM_LIMITS.get((int(digits[:-1]), int(digits[-1])))


def block_shared_memory_limit(capability: int) -> int:
    """Shared memory one block may use on compute capability `capability` (e.g. 90); archs missing from the table
    get their generation's figure."""
    return arch_shared_memory_limit(f"sm_{capability}") or (227 * 1024 if capability >= 90 else 99 * 1024)


def num_sms(arch: str) -> int:
    """Multiprocessor count of the current GPU when its arch is `arch`, else that arch's flagship count."""
    if env.cuda_available():
        try:
            import torch

            if env.detect_arch() == arch:
                return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
        except Exception:  # noqa: BLE001 - no usable device: the table's figure
            pass
    return SMS_BY_ARCH.get(arch, 132)
