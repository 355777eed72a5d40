"""JITKernel: a compiled tilex program callable with torch tensors."""
from __future__ import annotations

import logging

from tilex import engine, env
from tilex.engine import nvcc as _nvcc
from tilex.jit import cache as _cache
from tilex.jit.args import ArgChecker

__all__ = ["JITKernel", "compile"]

logger = logging.getLogger("tilex.jit")

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
    ``module`` (the TVM runtime module), ``from_cache`` (loaded from the disk cache), ``cache_key``.
    """

    def __init__(self, func, out_idx=None, target="auto", pass_configs=None):
        import tvm

        if not isinstance(func, tvm.tirx.PrimFunc):
            raise TypeError(f"tilex.compile expects a tvm.tirx.PrimFunc, got {type(func).__name__}")
        self.func = func
        self.target = env.resolve_target(target)
        self.pass_configs = dict(pass_configs or {})
        self._checker = ArgChecker(func, out_idx)
        self.out_idx = self._checker.out_idx
        self.params = self._checker.params
        self.executable = None
        self.from_cache = False
        self.cache_key = None
        self.cache_path = None
        self._source = ""

        use_cache = _cache.enabled()
        entry = None
        if use_cache:
            self.cache_key = _cache.make_key(func, self.out_idx, self.target, self.pass_configs)
            entry = _cache.load(self.cache_key)
        if entry is not None:
            self.module = entry.module
            self._source = entry.source
            self.from_cache = True
            self.cache_path = entry.path
        else:
            n0 = _nvcc.compile_count()
            ex = _build(func, self.target, self.pass_configs)
            self.executable = ex
            self.module = ex.mod if hasattr(ex, "mod") else ex
            self._source = _cuda_source(self.module)
            has_binary = _nvcc.compile_count() > n0
            if use_cache:
                if has_binary:
                    self.cache_path = _cache.save(self.cache_key, ex, self._source, {
                        "symbol": self._checker.func_name, "target": str(self.target),
                        "out_idx": self.out_idx})
                else:
                    # CPU-only machine: the CUDA module only holds source (nvcc runs when it is loaded on
                    # a GPU), so there is nothing worth caching.
                    _cache.stats["skipped"] += 1
        self._fn = None
        self._symbol = self._checker.func_name

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
        full, outs = self._checker.prepare(args)
        fn = self._fn if self._fn is not None else self._get_function()
        fn(*full)
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

    @property
    def symbol(self) -> str:
        return self._symbol

    def __repr__(self):
        ins = ", ".join(s.name for s in self._checker.inputs)
        outs = ", ".join(s.name for s in self._checker.outputs)
        arch = self.target.attrs.get("arch", "?")
        return f"<tilex.JITKernel {self._symbol}({ins}) -> ({outs}) on {arch}{' [cached]' if self.from_cache else ''}>"


def compile(func, out_idx=None, target="auto", pass_configs=None) -> JITKernel:  # noqa: A001
    """Compile a tilex/TIR ``PrimFunc`` into a :class:`JITKernel`.

    Args:
        func: the ``tvm.tirx.PrimFunc``.
        out_idx: parameter index (or list of indices; negative allowed) of outputs the kernel allocates
            and returns. The caller passes only the remaining parameters.
        target: ``"auto"`` (current GPU; ``sm_90a`` without a GPU), an arch string like ``"sm_90a"``,
            a dict, or a ``tvm.target.Target``.
        pass_configs: dict of PassContext options for tilex's pipeline.
    """
    return JITKernel(func, out_idx=out_idx, target=target, pass_configs=pass_configs)
