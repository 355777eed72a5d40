"""The CUDA toolkit and compute capabilities under TileLang's names (``tilelang.contrib.nvcc``).

A *compute version* is a string ``"major.minor"`` (``"9.0"`` for H100 / sm_90a). :func:`get_target_compute_version`
reads it from a target's arch, the current ``tvm.target.Target`` scope or the GPU; the ``have_*`` predicates
answer from it. nvcc is the one :func:`tilex.env.find_nvcc` finds, and :func:`compile_cuda` runs it as tilex's
compiler does (:func:`tilex.engine.nvcc.compile_cuda`: tilex's flags and include directory).
"""
from __future__ import annotations

import os
import re
import subprocess
import warnings

import tvm

from tilex import env
from tilex.engine import nvcc as engine_nvcc

__all__ = ["compile_cuda", "find_cuda_path", "get_nvcc_compiler", "get_cuda_version", "get_target_compute_version",
           "parse_compute_version", "get_target_arch", "have_fp16", "have_int8", "have_tensorcore", "have_bf16",
           "have_fp8", "have_tma", "have_cudagraph", "is_hopper", "have_pdl", "have_mbarrier"]


def get_nvcc_compiler() -> str:
    """Absolute path of nvcc (:func:`tilex.env.find_nvcc`; raises :class:`tilex.env.NvccNotFoundError`)."""
    return env.find_nvcc()


def find_cuda_path() -> str:
    """The CUDA toolkit's root: the directory above nvcc's ``bin``. Raises RuntimeError when nvcc is not found."""
    try:
        nvcc = env.find_nvcc()
    except env.NvccNotFoundError as e:
        raise RuntimeError(f"tilex: no CUDA toolkit found (set CUDA_HOME or put nvcc on PATH)\n{e}") from None
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))


def get_cuda_version(cuda_path: str | None = None) -> tuple:
    """The toolkit's version as a tuple of ints, e.g. ``(13, 0, 88)``, from ``nvcc --version`` (of
    ``cuda_path/bin/nvcc`` when given). Raises RuntimeError when it cannot be read."""
    nvcc = os.path.join(cuda_path, "bin", "nvcc") if cuda_path is not None else get_nvcc_compiler()
    try:
        out = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(f"tilex: cannot run {nvcc} --version: {e}") from None
    m = re.search(r"release [0-9.]+, V([0-9.]+)", out)
    if m is None:
        raise RuntimeError(f"tilex: cannot read the CUDA version from {nvcc} --version:\n{out}")
    return tuple(int(x) for x in m.group(1).split("."))


def _version_of_arch(arch: str) -> str:
    digits = env.normalize_arch(arch)[3:].rstrip("af")  # "90", "100", "120"
    return f"{digits[:-1]}.{digits[-1]}"


def get_target_compute_version(target=None) -> str:
    """The compute version (``"9.0"``) of ``target``'s arch, else of the current ``tvm.target.Target`` scope's,
    else of the current GPU. Raises ValueError when none of them gives one."""
    target = target if target is not None else tvm.target.Target.current(allow_none=True)
    if target is not None:
        if isinstance(target, str):
            target = env.resolve_target(target)
        if "arch" in target.attrs:
            return _version_of_arch(str(target.attrs["arch"]))
    if env.cuda_available():
        import torch

        major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
        return f"{major}.{minor}"
    raise ValueError("tilex: no CUDA arch given and no GPU visible; pass a target such as "
                     "{'kind': 'cuda', 'arch': 'sm_90a'}")


def parse_compute_version(compute_version) -> tuple:
    """``"8.6"`` -> ``(8, 6)``. Raises ValueError for anything else."""
    parts = str(compute_version).split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"tilex: cannot parse compute version {compute_version!r} (expected e.g. '9.0')") from None


def get_target_arch(compute_version) -> str:
    """The arch number nvcc takes after ``sm_`` for a compute version (a string or a ``(major, minor)`` pair):
    ``"8.0"`` -> ``"80"``, ``"9.0"`` -> ``"90a"`` (9.0 and later get the arch-specific ``a`` variant)."""
    major, minor = (parse_compute_version(compute_version) if isinstance(compute_version, str)
                    else (int(compute_version[0]), int(compute_version[1])))
    return f"{major * 10 + minor}" + ("a" if major >= 9 else "")


def have_fp16(compute_version) -> bool:
    """Half-precision arithmetic: compute 5.3 and later."""
    major, minor = parse_compute_version(compute_version)
    return (major == 5 and minor >= 3) or major >= 6


def have_int8(compute_version) -> bool:
    """8-bit integer dot products: compute 6.x and later."""
    return parse_compute_version(compute_version)[0] >= 6


def have_tensorcore(compute_version=None, target=None) -> bool:
    """Tensor cores: compute 7.x and later (the version from the GPU, else from ``target``'s arch; False with a
    warning when neither gives one)."""
    if compute_version is None:
        try:
            compute_version = get_target_compute_version(target)
        except ValueError:
            warnings.warn("tilex: have_tensorcore: no GPU and no target arch; answering False", stacklevel=2)
            return False
    return parse_compute_version(compute_version)[0] >= 7


def have_bf16(compute_version) -> bool:
    """bfloat16 arithmetic: compute 8.x and later."""
    return parse_compute_version(compute_version)[0] >= 8


def have_fp8(compute_version) -> bool:
    """8-bit floats: compute 8.9 (Ada) and later."""
    major, minor = parse_compute_version(compute_version)
    return (major == 8 and minor >= 9) or major >= 9


def _cuda_version_of(target):
    if target.kind.name != "cuda":
        return None
    return parse_compute_version(get_target_compute_version(target))


def have_tma(target) -> bool:
    """The Tensor Memory Accelerator: a CUDA target of compute 9.0 and later."""
    v = _cuda_version_of(target)
    return v is not None and v[0] >= 9


def is_hopper(target) -> bool:
    """A CUDA target of compute 9.0."""
    return _cuda_version_of(target) == (9, 0)


def have_pdl(target) -> bool:
    """Programmatic dependent launch: a CUDA target of compute 9.0 and later."""
    v = _cuda_version_of(target)
    return v is not None and v[0] >= 9


def have_mbarrier(target) -> bool:
    """Hardware mbarriers with transaction counts: a CUDA target of compute 9.0 and later."""
    v = _cuda_version_of(target)
    return v is not None and v[0] >= 9


def have_cudagraph() -> bool:
    """CUDA graphs: a toolkit of version 10 or later."""
    try:
        return get_cuda_version() >= (10, 0)
    except RuntimeError:
        return False


def _arch_of(arch) -> str:
    if arch is None:
        return env.target_arch(tvm.target.Target.current(allow_none=True))
    if isinstance(arch, (list, tuple)):
        if len(arch) != 1:
            raise ValueError(f"compile_cuda: tilex compiles for one arch at a time, got {arch!r}")
        arch = arch[0]
    text = str(arch).strip()
    if text.startswith("-arch="):
        text = text[len("-arch="):]
    return env.normalize_arch(text)


def compile_cuda(code: str, target_format: str = "ptx", arch=None, options=None, path_target: str | None = None,
                 verbose: bool = False) -> bytearray:
    """Compile CUDA C++ ``code`` with nvcc into ``target_format`` (``"ptx"``, ``"cubin"`` or ``"fatbin"``) for
    ``arch`` (``"sm_90a"``, ``"90a"``, ``"-arch=sm_90a"``; default: the current target scope's arch, else the
    GPU's, else sm_90a), with extra nvcc ``options`` (a string or a list). Returns the output's bytes; also writes
    them to ``path_target`` when given. ``verbose`` prints the nvcc command. Raises
    :class:`tilex.TilexCompileError` with nvcc's messages when it fails."""
    if target_format not in ("ptx", "cubin", "fatbin"):
        raise ValueError(f"compile_cuda: target_format must be ptx, cubin or fatbin, got {target_format!r}")
    sm = _arch_of(arch)
    opts = [options] if isinstance(options, str) else list(options or [])
    if verbose:
        print(" ".join(engine_nvcc.nvcc_command("<source>.cu", f"<out>.{target_format}", sm, opts, target_format)))
    data = engine_nvcc.compile_cuda(code, sm, opts, fmt=target_format)
    if path_target is not None:
        with open(path_target, "wb") as f:
            f.write(data)
    return bytearray(data)
