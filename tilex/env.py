"""Environment discovery for tilex: nvcc, the CUDA header directory, the GPU arch and the TVM target.

Everything here is cheap and side-effect free; nothing imports torch or tvm at module import time.
"""
from __future__ import annotations

import functools
import os
import shutil
import site
import sys
from typing import Any

__all__ = [
    "NvccNotFoundError",
    "find_nvcc",
    "include_dir",
    "cuda_available",
    "detect_arch",
    "normalize_arch",
    "resolve_target",
    "DEFAULT_ARCH",
    "cache_dir",
    "autotune_workers",
]

#: Arch used when no GPU is visible and the caller asked for "auto"/"cuda": codegen-only use
#: (inspect or cross-compile the CUDA source) targets Hopper by default.
DEFAULT_ARCH = "sm_90a"

#: Last-resort nvcc locations.
DEFAULT_NVCC_PATHS = ["/usr/local/cuda/bin/nvcc"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


class NvccNotFoundError(RuntimeError):
    """nvcc could not be located."""


def _site_dirs() -> list[str]:
    dirs: list[str] = []
    try:
        dirs.extend(site.getsitepackages())
    except Exception:  # virtualenvs without getsitepackages
        pass
    try:
        dirs.append(site.getusersitepackages())
    except Exception:
        pass
    dirs.extend(p for p in sys.path if p and p.endswith(("site-packages", "dist-packages")))
    out: list[str] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def _nvcc_candidates() -> list[tuple[str, str]]:
    """(description, path) pairs in search order; a path may not exist."""
    cands: list[tuple[str, str]] = []
    which = shutil.which("nvcc")
    cands.append(("PATH", which or "nvcc (not on PATH)"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            cands.append((f"${var}/bin", os.path.join(root, "bin", "nvcc")))
        else:
            cands.append((f"${var}/bin", f"${var} (unset)"))
    for d in _site_dirs():
        cands.append(("nvidia-cuda-nvcc wheel", os.path.join(d, "nvidia", "cuda_nvcc", "bin", "nvcc")))
    for path in DEFAULT_NVCC_PATHS:
        cands.append(("default CUDA install", path))
    return cands


@functools.lru_cache(maxsize=None)
def _find_nvcc_cached() -> str:
    tried = []
    for desc, path in _nvcc_candidates():
        tried.append(f"  - {desc}: {path}")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    raise NvccNotFoundError(
        "tilex could not find nvcc. Looked in:\n" + "\n".join(tried) + "\n"
        "Install the CUDA toolkit (or `pip install nvidia-cuda-nvcc`), put nvcc on PATH, or set CUDA_HOME."
    )


def find_nvcc() -> str:
    """Absolute path of nvcc: PATH, then $CUDA_HOME/bin ($CUDA_PATH/bin), then the pip wheel
    ``nvidia-cuda-nvcc`` (``<site-packages>/nvidia/cuda_nvcc/bin/nvcc``), then /usr/local/cuda/bin.

    Raises :class:`NvccNotFoundError` listing every place searched. The result is cached;
    ``find_nvcc.cache_clear()`` resets it.
    """
    return _find_nvcc_cached()


find_nvcc.cache_clear = _find_nvcc_cached.cache_clear  # type: ignore[attr-defined]


def include_dir() -> str:
    """Directory to pass to nvcc as ``-I`` so that ``#include "tilex/..."`` resolves.

    In a source checkout that is ``<repo>/src``; in an installed package it is ``tilex/_src``
    (setup.py maps ``src/`` there). ``$TILEX_INCLUDE_DIR`` overrides both.
    """
    env = os.environ.get("TILEX_INCLUDE_DIR")
    if env:
        return os.path.abspath(env)
    checkout = os.path.join(os.path.dirname(_PKG_DIR), "src")
    if os.path.isdir(os.path.join(checkout, "tilex")):
        return checkout
    installed = os.path.join(_PKG_DIR, "_src")
    if os.path.isdir(installed):
        return installed
    return checkout  # may not exist yet; callers only add it to -I


def header_files() -> list[str]:
    """All header files under :func:`include_dir`, sorted (relative paths)."""
    root = include_dir()
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            if f.endswith((".h", ".cuh", ".hpp", ".inl")):
                out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(out)


def cuda_available() -> bool:
    """True when torch sees a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def arch_from_capability(major: int, minor: int) -> str:
    """Compute capability -> nvcc arch name. Arch-specific ('a') variants are used where the
    architecture-specific features (wgmma, setmaxnreg, tcgen05, ...) need them: 9.0, 10.x, 12.x."""
    suffix = "a" if (major, minor) == (9, 0) or major in (10, 11, 12) else ""
    return f"sm_{major}{minor}{suffix}"


def detect_arch(device: int | None = None) -> str:
    """Arch of the current (or given) CUDA device, e.g. ``"sm_90a"`` on H100/H200, ``"sm_80"`` on A100.

    Raises RuntimeError when no GPU is visible.
    """
    import torch

    if not cuda_available():
        raise RuntimeError("tilex.env.detect_arch: no CUDA GPU is visible to torch")
    if device is None:
        device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    return arch_from_capability(int(major), int(minor))


def normalize_arch(arch: str) -> str:
    """Accept ``sm_90a``, ``sm90a``, ``90a``, ``compute_90a``, ``sm_80`` ... and return ``sm_XX[a]``."""
    a = str(arch).strip().lower()
    for prefix in ("compute_", "sm_", "sm"):
        if a.startswith(prefix):
            a = a[len(prefix):]
            break
    digits = a.rstrip("af")
    if not digits.isdigit() or len(digits) < 2:
        raise ValueError(f"tilex: cannot understand CUDA arch {arch!r} (expected e.g. 'sm_90a' or 'sm_80')")
    return "sm_" + a


def _auto_arch() -> str:
    return detect_arch() if cuda_available() else DEFAULT_ARCH


def resolve_target(target: Any = "auto"):
    """Turn a user target spec into a ``tvm.target.Target`` of kind cuda.

    Accepts:
      * ``"auto"`` / ``"cuda"`` / ``None``: the arch of the current GPU; with **no GPU** it falls back to
        ``sm_90a`` (:data:`DEFAULT_ARCH`) so that code generation still works (kernels cannot run then);
      * an arch string ``"sm_90a"``, ``"sm_80"``, ``"90a"``, or ``"cuda -arch=sm_90a"``;
      * a dict (``{"kind": "cuda", "arch": "sm_90a", ...}``; arch filled in when missing);
      * a ``tvm.target.Target`` (returned unchanged);
      * any other string is handed to ``tvm.target.Target`` (e.g. a tag like ``"nvidia/nvidia-h100"``).
    """
    import tvm

    if isinstance(target, tvm.target.Target):
        return target
    if target is None or (isinstance(target, str) and target.strip().lower() in ("auto", "cuda")):
        return tvm.target.Target({"kind": "cuda", "arch": _auto_arch()})
    if isinstance(target, dict):
        cfg = dict(target)
        cfg.setdefault("kind", "cuda")
        if cfg["kind"] == "cuda" and "arch" not in cfg:
            cfg["arch"] = _auto_arch()
        elif "arch" in cfg:
            cfg["arch"] = normalize_arch(cfg["arch"])
        return tvm.target.Target(cfg)
    if isinstance(target, str):
        s = target.strip()
        words = s.split()
        if len(words) > 1 and words[0] == "cuda":  # the command-line form older TVM took: "cuda -arch=sm_90a"
            opts = dict(w.lstrip("-").split("=", 1) for w in words[1:] if "=" in w)
            if "arch" not in opts or len(opts) != len(words) - 1:
                raise ValueError(f"tilex: cannot read target {target!r}; write 'sm_90a', 'cuda -arch=sm_90a' or a "
                                 f"dict such as {{'kind': 'cuda', 'arch': 'sm_90a'}}")
            return tvm.target.Target({"kind": "cuda", "arch": normalize_arch(opts.pop("arch")), **opts})
        try:
            arch = normalize_arch(s)
        except ValueError:
            pass
        else:
            return tvm.target.Target({"kind": "cuda", "arch": arch})
        try:
            return tvm.target.Target(s)
        except ValueError as err:
            raise ValueError(f"tilex: cannot read target {target!r} (use 'auto', an arch such as 'sm_90a', "
                             f"'cuda -arch=sm_90a', a target tag, a dict or a tvm.target.Target): {err}") from None
    raise TypeError(f"tilex: unsupported target spec {target!r} (use 'auto', 'sm_90a', a dict or a Target)")


def target_arch(target) -> str:
    """The ``sm_XX`` arch of a cuda Target (falls back to detection / the default)."""
    try:
        arch = target.attrs.get("arch", None) if target is not None else None
    except Exception:
        arch = None
    if arch:
        return normalize_arch(str(arch))
    return _auto_arch()


def cache_dir() -> str:
    """tilex's cache directory: ``$TILEX_CACHE_DIR``, else ``~/.cache/tilex`` (compiled kernels; the autotuner
    keeps its results under ``autotune/`` in it)."""
    return os.environ.get("TILEX_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tilex")


def _positive_int(name: str) -> int:
    """``$name`` as a positive int, 0 when unset; ValueError naming the variable otherwise."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${name} must be a whole number of CPUs, got {raw!r}") from None
    return max(value, 0)


def autotune_workers(configs: int) -> int:
    """How many processes (threads) the autotuner compiles `configs` configurations with when the caller names no
    ``max_workers``: TileLang's ``$TILELANG_AUTO_TUNING_CPU_COUNTS`` when set (> 0), else one per CPU; never more
    than ``$TILELANG_AUTO_TUNING_MAX_CPU_COUNT`` (when > 0) or `configs`; at least 1."""
    workers = _positive_int("TILELANG_AUTO_TUNING_CPU_COUNTS") or (os.cpu_count() or 1)
    cap = _positive_int("TILELANG_AUTO_TUNING_MAX_CPU_COUNT")
    if cap:
        workers = min(workers, cap)
    return max(1, min(workers, configs))


#: Attributes read like TileLang's ``tilelang.env.<NAME>`` (``tilex.env.TILEX_CACHE_DIR``; the TileLang spelling
#: ``TILELANG_CACHE_DIR`` names the same directory), computed when read.
_SETTINGS = {"TILEX_CACHE_DIR": cache_dir, "TILELANG_CACHE_DIR": cache_dir}


def __getattr__(name: str):
    if name in _SETTINGS:
        return _SETTINGS[name]()
    raise AttributeError(f"module 'tilex.env' has no attribute {name!r}")
