"""tilex.testing: TileLang's test helpers (``import tilelang.testing``) for tests of tile programs.

* ``@requires_cuda``: skip unless torch sees a CUDA GPU (and mark the test ``gpu``);
  ``@requires_cuda_compute_version(9, 0, mode="ge")`` and its ``_ge`` / ``_gt`` / ``_le`` / ``_lt`` / ``_eq``
  spellings: also skip unless the GPU's compute capability compares so (given at decoration time);
* ``@requires_package("name", ...)``: skip unless every package is importable;
* ``@requires_rocm`` / ``requires_cdna`` / ``requires_gfx950`` / ``requires_metal`` / ``requires_llvm``: the test
  needs a backend tilex does not compile for (it compiles for CUDA only): always skipped, with that reason;
  ``requires_cuda_or_cdna`` is ``requires_cuda``;
* :func:`main` runs pytest on the calling file; :func:`set_random_seed` seeds Python, NumPy and torch;
* :func:`torch_assert_close` (:mod:`tilex.utils.tensor`); :func:`process_func` / :func:`regression`
  (:mod:`tilex.testing.perf_regression`).

Importing this module imports pytest and ``tvm.testing`` (as TileLang's does), and gives ``tvm.testing`` the
``requires_package`` of TileLang's TVM fork (this one) where TVM lacks it; ``import tilex`` alone imports neither.
"""
from __future__ import annotations

import importlib.util
import inspect
import random
import sys

import pytest
import tvm.testing

from tilex import env
from tilex.contrib import nvcc
from tilex.utils.tensor import torch_assert_close

from .perf_regression import process_func, regression

__all__ = ["requires_cuda", "requires_package", "requires_cuda_compute_version", "requires_cuda_compute_version_ge",
           "requires_cuda_compute_version_gt", "requires_cuda_compute_version_le",
           "requires_cuda_compute_version_lt", "requires_cuda_compute_version_eq", "requires_rocm",
           "requires_cdna", "requires_gfx950", "requires_metal", "requires_llvm", "requires_cuda_or_cdna", "main",
           "set_random_seed", "torch_assert_close", "process_func", "regression"]

_MODES = {
    "ge": lambda have, want: have >= want,
    "gt": lambda have, want: have > want,
    "le": lambda have, want: have <= want,
    "lt": lambda have, want: have < want,
    "eq": lambda have, want: have == want,
}


def _mark(func, marks):
    """``func`` (a test function or class) with pytest ``marks`` applied."""
    for m in marks:
        func = m(func)
    return func


def _cuda_marks():
    return [pytest.mark.gpu, pytest.mark.skipif(not env.cuda_available(), reason="needs a CUDA GPU")]


def requires_cuda(func):
    """Skip the test unless torch sees a CUDA GPU; marks it ``gpu``."""
    return _mark(func, _cuda_marks())


def requires_cuda_or_cdna(func):
    """tilex runs on CUDA only: the same as :func:`requires_cuda`."""
    return requires_cuda(func)


def requires_package(*packages):
    """Decorator: skip the test unless every package in ``packages`` is importable."""
    if not packages or not all(isinstance(p, str) and p for p in packages):
        raise TypeError(f"requires_package takes package names, got {packages!r}")
    missing = [p for p in packages if importlib.util.find_spec(p.split(".")[0]) is None]

    def inner(func):
        return _mark(func, [pytest.mark.skipif(bool(missing), reason=f"needs package(s) {', '.join(missing)}")])

    return inner


if not hasattr(tvm.testing, "requires_package"):  # TileLang's TVM fork has it (see tilex/ir/tvm_fork.py)
    tvm.testing.requires_package = requires_package


def _not_a_tilex_backend(what):
    def decorator(func):
        return _mark(func, [pytest.mark.skip(reason=f"needs {what}, which tilex does not compile for "
                                                    "(tilex compiles for CUDA only)")])

    decorator.__name__ = decorator.__qualname__ = f"requires_{what.split()[0].lower()}"
    return decorator


requires_rocm = _not_a_tilex_backend("ROCm")
requires_cdna = _not_a_tilex_backend("CDNA (ROCm)")
requires_gfx950 = _not_a_tilex_backend("gfx950 (ROCm)")
requires_metal = _not_a_tilex_backend("Metal")
requires_llvm = _not_a_tilex_backend("LLVM (CPU)")


def _compute_version() -> tuple:
    """The current GPU's (major, minor); (0, 0) without one."""
    if not env.cuda_available():
        return (0, 0)
    try:
        return nvcc.parse_compute_version(nvcc.get_target_compute_version())
    except ValueError:
        return (0, 0)


def requires_cuda_compute_version(major_version, minor_version=0, mode="ge"):
    """Decorator: skip the test unless a CUDA GPU is visible and its compute capability compares to
    ``(major_version, minor_version)`` by ``mode`` (``"ge"``, ``"gt"``, ``"le"``, ``"lt"``, ``"eq"``). Raises
    ValueError for another mode."""
    if mode not in _MODES:
        raise ValueError(f"requires_cuda_compute_version: mode must be one of {', '.join(_MODES)}, got {mode!r}")
    want = (int(major_version), int(minor_version))
    have = _compute_version()
    ok = _MODES[mode](have, want)
    reason = (f"needs CUDA compute capability {mode} {want[0]}.{want[1]}, the GPU has {have[0]}.{have[1]}"
              if have != (0, 0) else f"needs a CUDA GPU of compute capability {mode} {want[0]}.{want[1]}")
    marks = [pytest.mark.skipif(not ok, reason=reason), *_cuda_marks()]

    def inner(func):
        return _mark(func, marks)

    return inner


def requires_cuda_compute_version_ge(major_version, minor_version=0):
    """:func:`requires_cuda_compute_version` with mode ``"ge"``."""
    return requires_cuda_compute_version(major_version, minor_version, mode="ge")


def requires_cuda_compute_version_gt(major_version, minor_version=0):
    """:func:`requires_cuda_compute_version` with mode ``"gt"``."""
    return requires_cuda_compute_version(major_version, minor_version, mode="gt")


def requires_cuda_compute_version_le(major_version, minor_version=0):
    """:func:`requires_cuda_compute_version` with mode ``"le"``."""
    return requires_cuda_compute_version(major_version, minor_version, mode="le")


def requires_cuda_compute_version_lt(major_version, minor_version=0):
    """:func:`requires_cuda_compute_version` with mode ``"lt"``."""
    return requires_cuda_compute_version(major_version, minor_version, mode="lt")


def requires_cuda_compute_version_eq(major_version, minor_version=0):
    """:func:`requires_cuda_compute_version` with mode ``"eq"``."""
    return requires_cuda_compute_version(major_version, minor_version, mode="eq")


def main():
    """Run pytest on the file that calls this (``if __name__ == "__main__": tilex.testing.main()``), with the
    command line's arguments; exits with pytest's status."""
    caller = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([caller] + sys.argv[1:]))


def set_random_seed(seed: int = 42) -> None:
    """Seed Python's ``random``, NumPy and torch (every CUDA device too)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
