"""Targets under TileLang's names (``tilelang.utils.target``): which target a program compiles for, and what a
CUDA target's architecture has.

tilex compiles for CUDA only: :func:`determine_target` turns ``"auto"``, ``"cuda"``, an arch, a dict or a
``tvm.target.Target`` into a CUDA target (``tilex.env.resolve_target``: with no GPU, ``"auto"`` means sm_90a),
and raises ValueError for other kinds (``"hip"``, ``"llvm"``, ``"metal"``, ...). The ``target_is_*`` /
``target_has_*`` predicates read the target's ``arch`` (a target without one counts as sm_80, as everywhere in
tilex) and answer False for a target of another kind.
"""
from __future__ import annotations

from tilex import env
from tilex.ir import hardware

__all__ = ["SUPPORTED_TARGETS", "describe_supported_targets", "check_cuda_availability", "determine_target",
           "target_is_cuda", "target_is_volta", "target_is_turing", "target_is_ampere", "target_is_ada",
           "target_is_hopper", "target_is_sm100", "target_is_sm120", "target_is_hip", "target_is_cdna",
           "target_is_metal", "target_has_async_copy", "target_has_ldmatrix", "target_has_stmatrix",
           "target_has_bulk_copy", "target_has_tma", "target_has_wgmma", "target_get_warp_size",
           "compute_capability"]

#: The targets tilex takes, with how to spell them.
SUPPORTED_TARGETS = {
    "auto": "the current GPU's CUDA arch (sm_90a when no GPU is visible)",
    "cuda": "same as 'auto'; give the arch as {'kind': 'cuda', 'arch': 'sm_90a'} or 'sm_90a'",
}


def describe_supported_targets() -> dict:
    """``{target name: how to spell it}`` for the targets tilex compiles for."""
    return dict(SUPPORTED_TARGETS)


def check_cuda_availability() -> bool:
    """Whether a CUDA toolkit is installed (nvcc found; a GPU is not needed to compile)."""
    try:
        env.find_nvcc()
    except env.NvccNotFoundError:
        return False
    return True


def _kind(target) -> str:
    import tvm

    if isinstance(target, tvm.target.Target):
        return target.kind.name
    if isinstance(target, dict):
        return str(target.get("kind", "cuda"))
    if isinstance(target, str):
        word = target.strip().split(" ")[0].lower()
        if word in ("auto", "cuda", ""):
            return "cuda"
        try:
            env.normalize_arch(word)
        except ValueError:
            return word
        return "cuda"
    return type(target).__name__


def determine_target(target="auto", return_object: bool = False):
    """The CUDA target for ``target``: ``"auto"`` is the ``tvm.target.Target.current()`` scope's target if there
    is one, else the current GPU's arch (sm_90a without a GPU), returned as a ``tvm.target.Target``; any other
    spelling is checked and returned as given (as a Target when ``return_object``). Raises ValueError for a
    target tilex does not compile for."""
    import tvm

    if isinstance(target, str) and target.strip().lower() == "auto":
        current = tvm.target.Target.current(allow_none=True)
        if current is not None:
            target = current
        else:
            return env.resolve_target("auto")
    kind = _kind(target)
    if kind != "cuda":
        raise ValueError(f"tilex compiles for CUDA only; target {target!r} is of kind {kind!r}")
    resolved = env.resolve_target(target)  # raises ValueError / TypeError for a spelling it cannot read
    if return_object or isinstance(target, tvm.target.Target):
        return resolved
    return target


def _cuda(target) -> bool:
    try:
        return target.kind.name == "cuda"
    except AttributeError:
        raise TypeError(f"expected a tvm.target.Target, got {type(target).__name__}") from None


def compute_capability(target) -> int:
    """The compute capability of a CUDA target as an int (90 for sm_90a; 80 for a target without an arch)."""
    return hardware.compute_capability(target)[0]


def target_is_cuda(target) -> bool:
    return _cuda(target)


def target_is_volta(target) -> bool:
    return _cuda(target) and 70 <= compute_capability(target) < 75


def target_is_turing(target) -> bool:
    return _cuda(target) and 75 <= compute_capability(target) < 80


def target_is_ampere(target) -> bool:
    return _cuda(target) and 80 <= compute_capability(target) < 89


def target_is_ada(target) -> bool:
    return _cuda(target) and compute_capability(target) == 89


def target_is_hopper(target) -> bool:
    return _cuda(target) and 90 <= compute_capability(target) < 100


def target_is_sm100(target) -> bool:
    return _cuda(target) and 100 <= compute_capability(target) < 110


def target_is_sm120(target) -> bool:
    return _cuda(target) and 120 <= compute_capability(target) < 130


def target_is_hip(target) -> bool:
    """Always False for a target tilex takes (tilex compiles for CUDA only)."""
    return not _cuda(target) and target.kind.name in ("hip", "rocm")


def target_is_cdna(target) -> bool:
    """A ROCm CDNA target: never one tilex compiles for."""
    return target_is_hip(target) and str(target.attrs.get("mcpu", "")).startswith("gfx9")


def target_is_metal(target) -> bool:
    return not _cuda(target) and target.kind.name == "metal"


def target_has_async_copy(target) -> bool:
    """cp.async (sm_80+)."""
    return _cuda(target) and hardware.supports(target, hardware.CP_ASYNC)


def target_has_ldmatrix(target) -> bool:
    """ldmatrix (tilex emits it from sm_80)."""
    return _cuda(target) and hardware.supports(target, hardware.LDMATRIX)


def target_has_stmatrix(target) -> bool:
    """stmatrix (sm_90+)."""
    return _cuda(target) and compute_capability(target) >= 90


def target_has_bulk_copy(target) -> bool:
    """TMA bulk copies (sm_90+)."""
    return _cuda(target) and hardware.supports(target, hardware.TMA_LOAD)


def target_has_tma(target) -> bool:
    """Same as :func:`target_has_bulk_copy`."""
    return target_has_bulk_copy(target)


def target_has_wgmma(target) -> bool:
    """wgmma (sm_90a only)."""
    return _cuda(target) and hardware.supports(target, hardware.WGMMA)


def target_get_warp_size(target) -> int:
    """32 on every CUDA target."""
    if not _cuda(target):
        raise ValueError(f"tilex knows the warp size of CUDA targets only, got {target}")
    return 32
