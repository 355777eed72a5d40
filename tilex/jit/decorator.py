"""``@tilex.jit``: a kernel factory that returns compiled kernels (TileLang's ``@tilelang.jit``).

A *kernel factory* is a function that builds a ``T.prim_func`` from problem sizes and tile parameters.
Decorated with ``@tilex.jit``, calling it returns the compiled :class:`~tilex.jit.JITKernel` instead::

    @tilex.jit(out_idx=[-1])
    def matmul(M, N, K, bm=128, bn=128, bk=32, num_stages=3, threads=128):
        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
            ...
        return main

    kernel = matmul(1024, 1024, 1024)       # tilex.compile(matmul's PrimFunc, out_idx=[-1])
    C = kernel(A, B)
    matmul(1024, 1024, 1024) is kernel      # True: one compiled kernel per argument list

Semantics (those of ``@tilelang.jit``'s lazy mode, where the function returns its PrimFunc):

* ``@tilex.jit`` and ``@tilex.jit(out_idx=..., target=..., pass_configs=..., compile_flags=...)`` both work; the
  options are ``tilex.compile``'s. ``target`` defaults to ``"auto"`` (``None`` means the same, as in TileLang).
  ``compile_flags`` (extra nvcc flags: a list of strings or one string) are checked at decoration and join
  ``pass_configs`` as ``tilex.device_compile_flags``, so every compilation, ``@tilex.autotune`` stacked on top
  included, passes them to nvcc.
* Compilation happens on the first call with a given argument list, not at decoration. The kernel is
  remembered per argument list in this process (arguments are matched after binding them to the factory's
  signature, so ``matmul(1024, 1024, 1024)`` and ``matmul(M=1024, N=1024, K=1024)`` are one entry; arguments
  that cannot be hashed, e.g. a tensor-like object without ``__hash__``, are compiled again on every call, which
  the on-disk kernel cache makes cheap on a GPU machine).
* Decorating a ``T.prim_func`` itself compiles that PrimFunc: call the result with no arguments to get the
  kernel (``kernel = main()``), then call the kernel with tensors. Calling it with arguments is a ``TypeError``
  (it is not the kernel, and there is nothing to specialize).
* ``.get_tir(*args)`` returns the PrimFunc the factory builds, ``.compile(*args)`` compiles without the memo,
  ``.get_kernel_source(*args)`` returns the CUDA source of the (memoized) kernel, ``.par_compile(configs)``
  compiles one kernel per configuration in threads.
* A function in TileLang's eager style (its body declares ``T.const`` sizes, annotates its tensor parameters,
  declares ``T.empty`` outputs and opens ``with T.Kernel`` itself) is the program: calling it with tensors
  compiles (memoized per sizes and compile-time arguments), runs and returns the outputs; ``.compile(M=..., ...)``
  gives the kernel. :mod:`tilex.jit.eager` has the details; ``.mode`` is ``"eager"`` or ``"lazy"``.
* ``@tilex.autotune(configs=...)`` stacked over ``@tilex.jit(...)`` takes ``out_idx``, ``target`` and
  ``pass_configs`` from it (``__tilex_compile_args__``) and tunes the undecorated factory
  (``__tilex_factory__``; of an eager function, its :class:`~tilex.jit.eager.EagerFactory`).

TileLang's other ``jit`` arguments: ``debug_root_path`` is supported (every new compilation writes the kernel's
CUDA source and the program's TVMScript there). ``target_host``, ``execution_backend`` and ``verbose`` are accepted
only with their default values (``None``; ``execution_backend`` also ``"auto"`` or ``"tvm_ffi"``, which is what
tilex uses; ``verbose`` also ``False``); anything else raises a ``TypeError`` that names the argument, because
tilex has no such option.

The package :mod:`tilex.jit` is itself callable and forwards to :func:`jit` here, so ``tilex.jit`` is both the
package (``tilex.jit.compile``, ``tilex.jit.JITKernel``, ...) and this decorator.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import tvm

from tilex import config

from .kernel import JITKernel
from .kernel import compile as compile_kernel
from .eager import EagerFunction, is_eager

__all__ = ["jit", "JitFactory"]

# TileLang `jit` arguments tilex has no counterpart for: the values that ask for what tilex does anyway, and
# what to do instead.
_UNSUPPORTED = {
    "target_host": ((None,), "tilex builds the host side with the CUDA target's own host"),
    "execution_backend": ((None, "auto", "tvm_ffi"),
                          "tilex has one execution backend (the TVM runtime module, called through tvm-ffi)"),
    "verbose": ((None, False), "use logging (logger 'tilex') or TILEX_DUMP_DIR to see what is compiled"),
}


def _check_unsupported(options: dict) -> None:
    for name, value in options.items():
        allowed, instead = _UNSUPPORTED[name]
        if not any(value is a or (isinstance(a, str) and value == a) for a in allowed):
            raise TypeError(f"tilex.jit: {name}={value!r} is not supported ({instead})")


def _freeze(value):
    """A hashable stand-in for a factory argument (lists, tuples, dicts and sets by content, everything else
    as itself, tagged with its type so that ``1``, ``1.0`` and ``True`` stay apart). Raises ``TypeError`` for
    an unhashable value."""
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        items = [(_freeze(k), _freeze(v)) for k, v in value.items()]
        return (dict, frozenset(items))
    if isinstance(value, (set, frozenset)):
        return (type(value), frozenset(_freeze(v) for v in value))
    hash(value)
    return (type(value), value)


class JitFactory:
    """What :func:`jit` makes of a kernel factory (or of a ``T.prim_func``): calling it returns the compiled
    :class:`~tilex.jit.JITKernel` of the PrimFunc the factory builds, one per argument list (see the module
    docstring). ``out_idx``, ``target``, ``pass_configs`` (``compile_flags`` folded in) and ``debug_root_path`` are
    the compile options; ``compile_flags`` keeps the flags as given."""

    def __init__(self, func, out_idx=None, target="auto", pass_configs=None, debug_root_path=None,
                 compile_flags=None):
        if isinstance(func, tvm.tirx.PrimFunc):
            self.prim_func = func
            self._signature = None
            name = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "main"
            self.__name__ = self.__qualname__ = name
            self.__doc__ = None
        else:
            functools.update_wrapper(self, func)  # first: it copies the wrapped object's __dict__
            self.prim_func = None
            try:
                self._signature = inspect.signature(func)
            except (TypeError, ValueError):
                self._signature = None
        self.func = func
        # what is under the wrapper, for @tilex.autotune stacked on top (tilex.autotuner.workers.unwrap_factory)
        self.__tilex_factory__ = func
        self.compile_flags = compile_flags
        self.__tilex_compile_args__ = {"out_idx": out_idx, "target": "auto" if target is None else target,
                                       "pass_configs": config.with_compile_flags(pass_configs, compile_flags)}
        self.debug_root_path = os.path.abspath(debug_root_path) if debug_root_path is not None else None
        self._memo: dict = {}
        self._lock = threading.Lock()
        # TileLang's eager style (the function is the program: T.const / T.empty / annotated tensors): tilex.jit.eager
        self._eager = EagerFunction(func, self) if is_eager(func) else None
        self.mode = "lazy" if self._eager is None else "eager"
        if self._eager is not None:  # @tilex.autotune tunes the program it builds (tilex.jit.eager.EagerFactory)
            self.__tilex_factory__ = self._eager.factory

    # -- the compile options, by name
    @property
    def out_idx(self):
        return self.__tilex_compile_args__["out_idx"]

    @property
    def target(self):
        return self.__tilex_compile_args__["target"]

    @property
    def pass_configs(self):
        return self.__tilex_compile_args__["pass_configs"]

    # -- building
    def get_tir(self, *args, **kwargs):
        """The ``T.prim_func`` (``tvm.tirx.PrimFunc``) the factory builds for these arguments."""
        if self._eager is not None:
            return self._eager.get_tir(*args, **kwargs)
        if self.prim_func is not None:
            self._no_arguments(args, kwargs)
            return self.prim_func
        func = self.func(*args, **kwargs)
        if not isinstance(func, tvm.tirx.PrimFunc):
            raise TypeError(f"tilex.jit: the kernel factory {self._label()} returned {type(func).__name__}, "
                            "not a T.prim_func (tvm.tirx.PrimFunc)")
        return func

    def compile(self, *args, **kwargs) -> JITKernel:  # noqa: A003
        """Build and compile the PrimFunc for these arguments (not looked up in, nor added to, the memo)."""
        if self._eager is not None:
            return self._eager.compile(*args, **kwargs)
        func = self.get_tir(*args, **kwargs)
        a = self.__tilex_compile_args__
        kernel = compile_kernel(func, out_idx=a["out_idx"], target=a["target"], pass_configs=a["pass_configs"])
        if self.debug_root_path is not None:
            self._dump(func, kernel)
        return kernel

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The CUDA source of the kernel for these arguments (compiled first if needed)."""
        if self._eager is not None:
            return self._eager.kernel(*args, **kwargs).get_kernel_source()
        return self(*args, **kwargs).get_kernel_source()

    def __call__(self, *args, **kwargs) -> JITKernel:
        if self._eager is not None:  # compile (memoized) and run: the outputs
            return self._eager(*args, **kwargs)
        if self.prim_func is not None:
            self._no_arguments(args, kwargs)
        key = self._key(args, kwargs)
        if key is None:
            return self.compile(*args, **kwargs)
        with self._lock:
            kernel = self._memo.get(key)
        if kernel is None:
            kernel = self.compile(*args, **kwargs)
            with self._lock:  # two threads may have compiled the same kernel; keep the first
                kernel = self._memo.setdefault(key, kernel)
        return kernel

    def cache_clear(self) -> None:
        """Forget the kernels compiled so far (the on-disk kernel cache is left alone)."""
        with self._lock:
            self._memo.clear()
        if self._eager is not None:
            self._eager.cache_clear()

    def par_compile(self, configs, num_workers=None, ignore_error=False) -> list:
        """Compile one kernel per configuration in threads (TileLang's ``par_compile``): a configuration is a
        tuple of positional arguments or a dict of keywords for :meth:`compile`. Returns the kernels in the order
        of `configs`; with ``ignore_error`` a configuration that fails is logged and gives ``None``."""
        configs = list(configs)
        for c in configs:
            if not isinstance(c, (tuple, dict)):
                raise TypeError(f"tilex.jit: par_compile takes tuples or dicts of arguments, got {c!r}")
        workers = num_workers or max(1, min(len(configs), os.cpu_count() or 1))
        with ThreadPoolExecutor(workers, thread_name_prefix="tilex-par-compile") as pool:
            futures = [pool.submit(self.compile, **c) if isinstance(c, dict) else pool.submit(self.compile, *c)
                       for c in configs]
        kernels = []
        for c, future in zip(configs, futures):
            try:
                kernels.append(future.result())
            except Exception as err:
                if not ignore_error:
                    raise
                logging.getLogger("tilex").warning("tilex.jit: par_compile of %s failed: %s", c, err)
                kernels.append(None)
        return kernels

    # -- helpers
    def _no_arguments(self, args, kwargs):
        if args or kwargs:
            name = self._label()
            raise TypeError(f"tilex.jit: {name} is a T.prim_func compiled by @tilex.jit; call it with no "
                            f"arguments to get the kernel (kernel = {name}()), then call the kernel "
                            "with the tensors")

    def _key(self, args, kwargs):
        if self._signature is not None:
            try:
                bound = self._signature.bind(*args, **kwargs)
            except TypeError:
                pass  # calling the factory raises the real error
            else:
                bound.apply_defaults()
                args, kwargs = bound.args, bound.kwargs
        try:
            return (_freeze(tuple(args)), _freeze(dict(kwargs)))
        except TypeError:
            return None

    def _label(self) -> str:
        """The factory's name for messages (a ``functools.partial`` or callable object has none)."""
        return getattr(self, "__qualname__", None) or getattr(self, "__name__", None) or repr(self.func)

    def _dump(self, func, kernel):
        """Write the kernel's CUDA source and the program's TVMScript under ``debug_root_path``."""
        os.makedirs(self.debug_root_path, exist_ok=True)
        name = getattr(self, "__name__", None) or "jit_kernel"
        with open(os.path.join(self.debug_root_path, f"tilex_jit_kernel_{name}.cu"), "w") as f:
            f.write(kernel.get_kernel_source())
        with open(os.path.join(self.debug_root_path, f"tilex_jit_program_{name}.py"), "w") as f:
            f.write(func.script())

    def __repr__(self):
        return f"<tilex.jit {self._label()}>"


def jit(func: Callable | None = None, *, out_idx=None, target: Any = "auto", pass_configs: dict | None = None,
        debug_root_path: str | None = None, target_host=None, execution_backend=None, verbose=None,
        compile_flags=None):
    """Decorator: calling the decorated kernel factory returns ``tilex.compile(factory(...), out_idx=...,
    target=..., pass_configs=..., compile_flags=...)``, memoized per argument list.

    ``@tilex.jit`` or ``@tilex.jit(out_idx=[-1], target="auto", pass_configs={...})``; over a ``T.prim_func``
    too (then ``main()`` is its kernel). ``debug_root_path``: a directory where each compilation writes the
    CUDA source and the TVMScript program. ``compile_flags``: extra nvcc flags (checked here: ``TypeError`` /
    ``ValueError``). TileLang's ``target_host``, ``execution_backend`` and ``verbose`` are accepted with their
    default values only (``TypeError`` otherwise). Returns a :class:`JitFactory`. See the module docstring for the
    details.
    """
    _check_unsupported({"target_host": target_host, "execution_backend": execution_backend, "verbose": verbose})
    config.with_compile_flags(None, compile_flags)  # bad flags fail at decoration

    def wrap(fn):
        if not (isinstance(fn, tvm.tirx.PrimFunc) or callable(fn)):
            raise TypeError(f"tilex.jit decorates a kernel factory or a T.prim_func, got {type(fn).__name__}; "
                            "pass compile options as keywords: @tilex.jit(out_idx=[-1])")
        return JitFactory(fn, out_idx=out_idx, target=target, pass_configs=pass_configs,
                          debug_root_path=debug_root_path, compile_flags=compile_flags)

    if func is not None:
        return wrap(func)
    return wrap
