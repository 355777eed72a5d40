"""Facts about the GPU a kernel is built for, stated once: compute capability, shared-memory and register limits,
multiprocessor counts."""
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

#: sm90 multiprocessor: 32-bit registers, and the shared memory its resident blocks may use together (the
#: opt-in per-block limit; the driver also keeps SMEM_RESERVED_PER_BLOCK for every resident block).
REGS_PER_SM = 65536
SMEM_PER_SM = 227 * 1024
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


def arch_shared_memory_limit(arch: str) -> int | None:
    """Opt-in shared memory per block for an arch like ``"sm_90a"`` (``None`` if unknown)."""
    digits = env.normalize_arch(arch)[3:].rstrip("af")
    return ARCH_SMEM_LIMITS.get((int(digits[:-1]), int(digits[-1])))


def block_shared_memory_limit(capability: int) -> int:
    """Shared memory one block may use on compute capability `capability` (e.g. 90); archs missing from the table
    get their generation's figure."""
    return arch_shared_memory_limit(f"sm_{capability}") or (SMEM_PER_SM if capability >= 90 else 99 * 1024)


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
