"""User hooks on the generated code (``tilelang.engine.callback``): a function that edits a kernel's CUDA source.

    @register_cuda_postproc_callback            # or (), or (override=False)
    def edit(code: str, target) -> str:
        return code.replace(...)

    register_cuda_postproc(edit)                # the same, as a call

The registered function runs on every kernel tilex compiles from then on, after tilex's own post-processing
(``tilex.engine.nvcc``: the common header, launch bounds, shared-memory alignment) and before nvcc. It gets the
CUDA source (``str``) and the ``tvm.target.Target`` being compiled for, and returns the source to compile. One
function is registered at a time: ``override=True`` (the default) replaces an earlier one, ``override=False``
raises ValueError if one is registered. :func:`clear_cuda_postproc` (tilex's; TileLang has no way back) removes it.

While a function is registered the kernel cache is off (:func:`tilex.jit.cache.enabled`): what the function does
(it may read a file, as TileLang's examples show) is not part of a cache key.

TileLang's hooks for HIP, Metal and C host code raise NotImplementedError: tilex generates CUDA only, and its host
code is TVM's LLVM module, not C source.
"""
from __future__ import annotations

from collections.abc import Callable

__all__ = ["register_cuda_postproc", "register_cuda_postproc_callback", "cuda_postproc", "clear_cuda_postproc",
           "apply_cuda_postproc", "register_hip_postproc", "register_hip_postproc_callback", "register_c_postproc",
           "register_c_postproc_callback", "register_metal_postproc", "register_metal_postproc_callback"]

_cuda_postproc: Callable | None = None


def register_cuda_postproc(func: Callable, override: bool = True) -> None:
    """Register `func(code, target) -> code` as the CUDA post-processor (see the module docstring)."""
    global _cuda_postproc
    if not callable(func):
        raise TypeError(f"register_cuda_postproc: expected a function (code, target) -> code, got {func!r}")
    if not isinstance(override, bool):
        raise TypeError(f"register_cuda_postproc: override must be a bool, got {override!r}")
    if _cuda_postproc is not None and not override:
        raise ValueError(f"register_cuda_postproc: a CUDA post-processor is already registered "
                         f"({_cuda_postproc!r}); pass override=True to replace it")
    _cuda_postproc = func


def register_cuda_postproc_callback(func: Callable | bool | None = None, override: bool = True):
    """Decorator form of :func:`register_cuda_postproc`: ``@register_cuda_postproc_callback``,
    ``@register_cuda_postproc_callback()``, ``@register_cuda_postproc_callback(override=False)`` or
    ``@register_cuda_postproc_callback(False)``; returns the function unchanged."""
    if callable(func):
        register_cuda_postproc(func, override)
        return func
    if func is None or isinstance(func, bool):
        flag = func if isinstance(func, bool) else override

        def register(fn):
            register_cuda_postproc(fn, flag)
            return fn

        return register
    raise TypeError(f"register_cuda_postproc_callback: use it as a decorator (with or without arguments), got "
                    f"{func!r}")


def cuda_postproc() -> Callable | None:
    """The registered CUDA post-processor, or None."""
    return _cuda_postproc


def clear_cuda_postproc() -> None:
    """Remove the registered CUDA post-processor (kernels compile as tilex generates them again)."""
    global _cuda_postproc
    _cuda_postproc = None


def apply_cuda_postproc(code: str, target) -> str:
    """`code` after the registered post-processor (unchanged without one); TypeError if it returns no str."""
    func = _cuda_postproc
    if func is None:
        return code
    out = func(code, target)
    if not isinstance(out, str):
        raise TypeError(f"the CUDA post-processor {func!r} returned {type(out).__name__}, not the CUDA source (str)")
    return out


def _not_generated(api: str, what: str):
    def refuse(func=None, override=True):
        raise NotImplementedError(f"{api}: tilex generates no {what} (it compiles CUDA only, with TVM's LLVM host "
                                  f"module); register_cuda_postproc edits the CUDA source")

    refuse.__name__ = api
    refuse.__doc__ = f"TileLang's {what} post-processing hook: NotImplementedError (tilex generates no {what})."
    return refuse


register_hip_postproc = _not_generated("register_hip_postproc", "HIP code")
register_hip_postproc_callback = _not_generated("register_hip_postproc_callback", "HIP code")
register_c_postproc = _not_generated("register_c_postproc", "C host code")
register_c_postproc_callback = _not_generated("register_c_postproc_callback", "C host code")
register_metal_postproc = _not_generated("register_metal_postproc", "Metal code")
register_metal_postproc_callback = _not_generated("register_metal_postproc_callback", "Metal code")
