"""JITKernel: a compiled tilex program callable with torch tensors."""
from __future__ import annotations

import logging
import os
import shutil
import threading
import warnings

from tilex import config, engine, env
from tilex.engine import nvcc as _nvcc
from tilex.jit import cache as _cache
from tilex.jit import export as _export
from tilex.jit import torch_op as _torch_op
from tilex.jit.args import ArgChecker
from tilex.jit.profiler import Profiler
from tilex.jit.resources import KernelResources, parse_ptxas, warn_spills
from tilex.layout import banks as _banks

__all__ = ["JITKernel", "compile", "load"]

logger = logging.getLogger("tilex.jit")

_no_nvcc_lock = threading.Lock()
_no_nvcc_warned = False


def _warn_no_nvcc() -> None:
    """Once per process: without a GPU and without nvcc, kernels are only generated, never compiled."""
    global _no_nvcc_warned
    with _no_nvcc_lock:
        if _no_nvcc_warned:
            return
        _no_nvcc_warned = True
    warnings.warn("tilex: nvcc was not found and no GPU is visible, so tilex.compile only generates CUDA source "
                  "(TVM codegen); nvcc does not check it and kernel.resources is None. Install the CUDA toolkit "
                  "or set CUDA_HOME to compile it.", RuntimeWarning, stacklevel=4)


def _resources_of(runs) -> KernelResources:
    funcs = {}
    for run in runs:
        funcs.update(parse_ptxas(run.output, run.arch).functions)
    return KernelResources(funcs)


def _build(func, target, pass_configs):
    with target:
        return engine.build(func, target, pass_configs)


def _find_cuda_module(mod):
    stack = [mod]
    seen = 0
    while stack and seen < 64:
        m = stack.pop()
        seen += 1
        try:
            if m.kind == "cuda":
                return m
        except Exception:
            pass
        try:
            stack.extend(m.imports)
        except Exception:
            pass
    return None


def _cuda_source(mod) -> str:
    m = _find_cuda_module(mod)
    if m is None:
        return ""
    for fmt in ("", "cu", "cuda"):
        try:
            src = m.inspect_source(fmt) if fmt else m.inspect_source()
        except Exception:
            continue
        if src:
            return str(src)
    return ""


class JITKernel:
    """A compiled tilex program. Call it with the non-output arguments (torch CUDA tensors / Python
    scalars); outputs named by ``out_idx`` are allocated and returned.

    The kernel runs on torch's current CUDA stream (tvm-ffi queries torch's current stream when torch
    CUDA tensors are passed).

    Attributes: ``func`` (the PrimFunc), ``target``, ``out_idx``, ``params`` (list of :class:`ParamSpec`),
    ``module`` (the TVM runtime module), ``from_cache`` (loaded from the disk cache), ``cache_key``,
    ``resources`` (a :class:`tilex.jit.resources.KernelResources`: ptxas's registers per thread, spill stores /
    loads, stack frame and static shared memory of each kernel function; ``None`` only when nvcc could not run).

    nvcc always runs: on a GPU machine TVM calls it while building; without a GPU TVM keeps the CUDA module as
    source, and tilex compiles that source with nvcc itself, so a kernel nvcc rejects raises
    :class:`tilex.TilexCompileError` on every machine (the cubin is then only checked and measured, not
    loaded). When ptxas reports spilled registers a :class:`tilex.jit.TilexPerformanceWarning` names the kernel.

    ``get_profiler(tensor_supply_type="auto")`` returns a :class:`tilex.jit.Profiler` (``do_bench``,
    ``assert_allclose(ref_prog)``, ``run_once``), and ``export_library(path)`` writes the compiled module as a
    shared library for ``tvm.runtime.load_module``.
    """

    def __init__(self, func, out_idx=None, target="auto", pass_configs=None, cache=None):
        import tvm

        if not isinstance(func, tvm.tirx.PrimFunc):
            raise TypeError(f"tilex.compile expects a tvm.tirx.PrimFunc, got {type(func).__name__}")
        self._init_args(func, out_idx, target, pass_configs)

        use_cache = _cache.enabled() if cache is None else bool(cache) and _cache.enabled()
        entry = None
        if use_cache:
            self.cache_key = _cache.make_key(func, self.out_idx, self.target, self.pass_configs)
            entry = _cache.load(self.cache_key)
        if entry is not None:
            self.module = entry.module
            self._source = entry.source
            self.from_cache = True
            self.has_binary = True
            self.cache_path = entry.path
            res = entry.meta.get("resources")
            self.resources = KernelResources.from_json(res) if res is not None else None
        else:
            with _nvcc.capture() as runs:
                ex = _build(func, self.target, self.pass_configs)
            self.executable = ex
            self.module = ex.mod if hasattr(ex, "mod") else ex
            self._source = _cuda_source(self.module)
            if runs:  # GPU machine: TVM ran nvcc through tvm_callback_cuda_compile, the module holds the cubin
                self.has_binary = True
                self.resources = _resources_of(runs)
                if use_cache:
                    self.cache_path = _cache.save(self.cache_key, ex, self._source, {
                        "symbol": self._checker.func_name, "target": str(self.target),
                        "out_idx": self.out_idx, "resources": self.resources.to_json()})
            else:
                # No GPU: the CUDA module only holds source (TVM would run nvcc when loading it on a GPU), so
                # there is no binary worth caching; nvcc still compiles the source here, to check it.
                self.resources = self._compile_source_only(use_cache)
                if use_cache:
                    _cache.stats["skipped"] += 1
        warn_spills(self.resources, self._checker.func_name, stacklevel=3)
        self._ready()

    def _init_args(self, func, out_idx, target, pass_configs):
        self.func = func
        self.target = env.resolve_target(target)
        self.pass_configs = dict(pass_configs or {})
        self._checker = ArgChecker(func, out_idx)
        self.out_idx = self._checker.out_idx
        self.params = self._checker.params
        self.executable = None
        self.from_cache = False
        self.has_binary = False  # the module holds a cubin (not only CUDA source): it can be exported
        self.cache_key = None
        self.cache_path = None
        self.resources = None
        self._source = ""

    def _ready(self):
        self._symbol = self._checker.func_name
        self._fn = None
        self._call = self._first_call

    @classmethod
    def from_module(cls, func, out_idx, target, module, source="", resources=None, path=None) -> "JITKernel":
        """A kernel over an already built runtime `module` (:func:`tilex.load`): `func` only gives the
        parameters its calls are checked against; nothing is compiled."""
        self = cls.__new__(cls)
        self._init_args(func, out_idx, target, None)
        self.module = module
        self._source = source
        self.resources = resources
        self.has_binary = True
        self.cache_path = path
        self._ready()
        return self

    def _compile_source_only(self, use_cache: bool) -> KernelResources | None:
        """Run nvcc on the generated CUDA source of a source-only module (a machine without a GPU). Its report
        is kept in the kernel cache's ptxas store (under the kernel's key), so compiling the same kernel again
        skips nvcc. Returns the resources, or ``None`` when there is no nvcc (warned once)."""
        if not self._source:
            return None
        if not _nvcc.nvcc_available():
            _warn_no_nvcc()
            return None
        if use_cache:
            report = _cache.load_ptxas_report(self.cache_key)
            if report is not None:
                return KernelResources.from_json(report)
        options = config.split(self.pass_configs)[0]
        with _nvcc.capture() as runs:
            _nvcc.compile_cuda(self._source, env.target_arch(self.target), _nvcc.option_flags(options),
                               dump_dir=options.get("kernels_output_dir"))
        resources = _resources_of(runs)
        if use_cache:
            _cache.save_ptxas_report(self.cache_key, resources.to_json())
        return resources

    # -- the compiled function
    def _get_function(self):
        if self._fn is None:
            last = None
            for name in dict.fromkeys([self._symbol, "main"]):
                try:
                    f = self.module[name]
                except Exception as e:  # noqa: PERF203
                    last = e
                    continue
                if f is not None:
                    self._fn = f
                    return f
            raise RuntimeError(f"tilex: compiled module has no function '{self._symbol}'") from last
        return self._fn

    def __call__(self, *args):
        try:
            return self._call(*args)
        except Exception:
            # name the problem (argument, expected vs got); arguments that pass every check re-raise the error
            self._checker.prepare(args)
            raise

    def _first_call(self, *args):
        return self.launcher()(*args)

    def launcher(self):
        """The function a call runs (chosen on first use, when the compiled function is loaded): the fast path
        of :meth:`ArgChecker.fast_call` (a tvm-ffi function when the C++ caller is built), or the checked one.
        The fast path leaves the checks to TVM's host code, so a refused call raises TVM's message;
        :meth:`check_args` then names the problem, as ``__call__`` does."""
        if self._call == self._first_call:
            fast = self._checker.fast_call(self._get_function())
            self._call = fast if fast is not None else self._checked_call
        return self._call

    def _checked_call(self, *args):
        full, outs = self._checker.prepare(args)
        self._get_function()(*full)
        return outs

    def check_args(self, *args):
        """Run the argument checks (and output allocation) without launching; returns
        ``(full_args, outputs)``."""
        return self._checker.prepare(args)

    # -- introspection
    def get_kernel_source(self) -> str:
        """The generated CUDA C++ source."""
        return self._source

    def get_host_source(self) -> str:
        """The host-side code (LLVM IR) when available, else ''."""
        try:
            return str(self.module.inspect_source())
        except Exception:
            return ""

    def bank_conflicts(self) -> dict:
        """Modelled shared-memory bank conflicts per shared buffer of this kernel, and the swizzle that would remove
        them (:func:`tilex.layout.banks.bank_conflicts` on the program lowered again by tilex's tile passes; empty
        for a kernel loaded with ``tilex.load``, which has no program). Accesses through ldmatrix / cp.async / TMA /
        wgmma are not modelled yet."""
        import tvm

        if self.func.body is None or isinstance(self.func.body, tvm.tirx.Evaluate):
            return {}
        lowered = engine.lower_to_tir(self.func, self.target, self.pass_configs)["main"]
        return _banks.bank_conflicts(lowered)

    def get_profiler(self, tensor_supply_type="auto") -> Profiler:
        """A :class:`tilex.jit.Profiler` for this kernel: ``do_bench()`` times it (ms, CUDA events, L2 flushed)
        on inputs made by ``tensor_supply_type`` (``"auto"``, ``"randn"``, ``"uniform"``, ``"integer"``,
        ``"zero"``, ``"one"`` or a :class:`tilex.jit.TensorSupplyType`), ``assert_allclose(ref_prog)`` compares
        its outputs with ``ref_prog``'s on the same inputs."""
        return Profiler(self, tensor_supply_type)

    def export_library(self, path: str) -> str:
        """Write the compiled module (host code + CUDA module) as a shared library loadable with
        ``tvm.runtime.load_module(path)``; returns ``path``. Compiled on a GPU machine (or loaded from the
        kernel cache), the CUDA module holds the cubin. Without a GPU, TVM's CUDA module holds only the CUDA
        source (nvcc checked it, but TVM's CPU-only runtime cannot embed a cubin), and loading it needs TVM's
        CUDA runtime. Needs a host C++ compiler (TVM links the library with it). A stream-K kernel's host code
        calls ``tilex.streamk_workspace``: a process without tilex imported loads
        ``tilex.jit.launcher.native_library()`` first (``--load-library`` of TVM's RPC server), which registers it."""
        path = os.fspath(path)
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        if self.executable is not None:
            self.executable.export_library(path)
        elif self.cache_path is not None and os.path.isfile(os.path.join(self.cache_path, _cache.LIB_NAME)):
            shutil.copyfile(os.path.join(self.cache_path, _cache.LIB_NAME), path)
        else:
            self.module.export_library(path)
        return path

    def export(self, path) -> str:
        """Write this kernel to the directory `path` for :func:`tilex.load` in another process (no nvcc, no
        cache, no program needed there): the library with the cubin, the CUDA source and the argument metadata
        (:mod:`tilex.jit.export`). Raises ``ExportError`` for a kernel built without a GPU (no cubin)."""
        return _export.export(self, path)

    def to_torch_op(self, name: str, mutates_args=None):
        """This kernel as a PyTorch custom operator ``tilex::<name>`` (``torch.library.custom_op``) with a fake
        implementation from its output shapes, so ``torch.compile(fullgraph=True)`` traces through it and CUDA
        graphs capture it (:mod:`tilex.jit.torch_op`)."""
        return _torch_op.custom_op(self, name, mutates_args=mutates_args)

    def output_recipes(self) -> list:
        """Per output, its shape as static extents and ``(input position, axis)`` pairs naming the input dimension
        a symbolic size is read from (axis None: a scalar input) -- what a caller allocating the outputs needs."""
        return self._checker.output_recipes()

    @property
    def symbol(self) -> str:
        return self._symbol

    def __repr__(self):
        ins = ", ".join(s.name for s in self._checker.inputs)
        outs = ", ".join(s.name for s in self._checker.outputs)
        arch = self.target.attrs.get("arch", "?")
        return f"<tilex.JITKernel {self._symbol}({ins}) -> ({outs}) on {arch}{' [cached]' if self.from_cache else ''}>"


def compile(func, out_idx=None, target="auto", pass_configs=None, cache=None,  # noqa: A001
            compile_flags=None, *, execution_backend=None, target_host=None, verbose=None) -> JITKernel:
    """Compile a tilex/TIR ``PrimFunc`` into a :class:`JITKernel`.

    Args:
        func: the ``tvm.tirx.PrimFunc``.
        out_idx: parameter index (or list of indices; negative allowed) of outputs the kernel allocates
            and returns. The caller passes only the remaining parameters.
        target: ``"auto"`` (current GPU; ``sm_90a`` without a GPU), an arch string like ``"sm_90a"``,
            a dict, or a ``tvm.target.Target``.
        pass_configs: dict of compile options: ``tilex.*`` options, TileLang's keys (``tilex.PassConfigKey``) and
            TVM PassContext options (``tilex.config.split``).
        cache: False to neither read nor write the kernel cache for this kernel (None: the process setting).
        compile_flags: extra nvcc flags for this kernel (a list of strings or one string), after those of
            ``pass_configs``; they join ``tilex.device_compile_flags`` in ``kernel.pass_configs`` (so the cache key).
            Flags that change the output file, its kind or the target arch (``-o``, ``-arch``, ``-gencode``, ...)
            are a ValueError.
        execution_backend, target_host, verbose: TileLang's, accepted with the values that ask for what tilex does
            (``None``; ``"auto"`` / ``"tvm_ffi"``: tilex's one backend, the TVM module called through tvm-ffi;
            ``verbose=False``); others raise NotImplementedError.
    """
    for name, value, allowed in (("execution_backend", execution_backend, (None, "auto", "tvm_ffi")),
                                 ("target_host", target_host, (None,)), ("verbose", verbose, (None, False))):
        if not any(value is a or (isinstance(a, str) and value == a) for a in allowed):
            raise NotImplementedError(f"tilex.compile({name}={value!r}) is not supported by tilex (accepted: "
                                      f"{', '.join(repr(a) for a in allowed)})")
    pass_configs = config.with_compile_flags(pass_configs, compile_flags)
    return JITKernel(func, out_idx=out_idx, target=target, pass_configs=pass_configs, cache=cache)


def load(path) -> JITKernel:
    """The kernel ``JITKernel.export`` wrote to the directory `path`, ready to call: needs TVM's CUDA runtime and a
    GPU, not nvcc, the kernel cache or the tile program (:mod:`tilex.jit.export`)."""
    import tvm

    meta = _export.read(path)
    module = tvm.runtime.load_module(meta["lib"])
    res = meta.get("resources")
    return JITKernel.from_module(_export.stand_in_func(meta), meta["out_idx"], meta["target"], module,
                                 meta["source"], KernelResources.from_json(res) if res is not None else None,
                                 os.path.dirname(meta["lib"]))
