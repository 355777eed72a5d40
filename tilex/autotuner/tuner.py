"""The autotuner: compile a kernel factory for every configuration, check and time the results, keep the best.

A *kernel factory* is a function returning a ``T.prim_func`` from problem arguments and tuning parameters::

    def matmul(M, N, K, bm=128, bn=128, bk=32, num_stages=3, threads=128): ...; return main

Tuning runs in two phases that can be used separately (``AutoTuner.compile`` and ``AutoTuner.benchmark``):

1. **compile** (no GPU needed): every configuration is built in parallel. With the default ``parallel="auto"``
   each configuration is compiled in a worker process (``ProcessPoolExecutor``, *spawn* context): the worker
   imports the factory by reference (its module and qualified name), builds the PrimFunc, computes the shared
   memory it needs (:func:`tilex.autotuner.smem.shared_memory_bytes`; too much for the device -> rejected before
   nvcc), and compiles it with ``tilex.compile``, which runs nvcc and writes the on-disk kernel cache on a GPU
   machine. The parent then re-creates each kernel with ``tilex.compile``, which loads it from that cache.
   A factory that cannot be imported by reference (defined in ``__main__``, in a closure, or a
   ``functools.partial``), arguments that cannot be pickled, or a disabled kernel cache make the tuner compile in
   *threads* of the parent instead (the PrimFuncs are built one after the other, the compilations overlap where
   TVM and nvcc release the GIL). As with any use of ``multiprocessing``, a script that tunes at import time
   must guard its entry point with ``if __name__ == "__main__":``; if the worker processes die before compiling
   anything the tuner warns and falls back to threads.
2. **benchmark** (GPU): inputs are made for the non-output parameters (``supply(params)`` or random tensors),
   every compiled kernel is run once and compared against ``ref_prog(*inputs)`` with
   ``torch.testing.assert_close`` (unless ``skip_check``), then timed with :func:`tilex.autotuner.bench.do_bench`
   (CUDA events, L2 flushed between repetitions). The fastest correct configuration wins.

A configuration that fails is recorded with a status and a reason instead of raising: ``"build error"``
(TileOpError, LayoutConflictError, nvcc errors, ...), ``"shared memory"`` (more than the device's
``shared_memory_per_block_optin``), ``"timeout"``, ``"wrong result"`` (with the largest error) or
``"runtime error"``. Only when *every* configuration fails does tuning raise :class:`AutotuneError`, whose
message holds the table of reasons.

The best configuration is cached on disk (:mod:`tilex.autotuner.cache`); a later run with the same factory,
arguments, configurations, device and versions compiles just that configuration and does not benchmark.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import hashlib
import importlib
import inspect
import itertools
import json
import logging
import os
import pickle
import threading
import time
import traceback
import warnings
from typing import Any, Callable, Sequence

from . import cache as _acache

__all__ = ["AutoTuner", "AutotuneError", "ConfigResult", "TuneResult", "CompileReport", "AutotunedFactory",
           "autotune", "jit", "OK", "COMPILED", "BUILD_ERROR", "SMEM", "TIMEOUT", "WRONG", "RUNTIME_ERROR",
           "SKIPPED"]

logger = logging.getLogger("tilex.autotuner")

# statuses
OK = "ok"                          # checked (or check skipped) and timed
COMPILED = "compiled"              # compile phase succeeded; not benchmarked yet
BUILD_ERROR = "build error"        # the factory, tilex's passes, TVM or nvcc failed
SMEM = "shared memory"             # needs more shared memory than the device allows
TIMEOUT = "timeout"                # compilation took longer than `timeout`
WRONG = "wrong result"             # output differs from ref_prog
RUNTIME_ERROR = "runtime error"    # launching or timing failed
SKIPPED = "skipped"                # not tried (e.g. the cached best was used)

_REASON_CHARS = 300


class AutotuneError(RuntimeError):
    """Tuning could not produce a kernel. ``results`` holds every configuration's :class:`ConfigResult`."""

    def __init__(self, message: str, results: Sequence["ConfigResult"] = ()):
        super().__init__(message)
        self.results = list(results)


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------
class ConfigResult:
    """What happened to one configuration.

    ``config`` (dict), ``index`` (position in the configuration list), ``status`` (one of the status strings),
    ``reason`` (one line, empty when fine), ``error`` (the full error text), ``latency`` (ms, median),
    ``compile_time`` (s), ``smem`` (bytes of shared memory per block, when known), ``max_error`` (largest
    absolute difference to ``ref_prog``), ``kernel`` (the :class:`tilex.JITKernel`, when compiled).
    """

    __slots__ = ("index", "config", "status", "reason", "error", "latency", "compile_time", "smem", "max_error",
                 "kernel", "from_kernel_cache")

    def __init__(self, index: int, config: dict, status: str = SKIPPED, reason: str = "", error: str = "",
                 latency: float | None = None, compile_time: float | None = None, smem: int | None = None,
                 max_error: float | None = None, kernel=None):
        self.index = index
        self.config = config
        self.status = status
        self.reason = reason
        self.error = error
        self.latency = latency
        self.compile_time = compile_time
        self.smem = smem
        self.max_error = max_error
        self.kernel = kernel
        self.from_kernel_cache = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict:
        return {"index": self.index, "config": self.config, "status": self.status, "reason": self.reason,
                "latency": self.latency, "compile_time": self.compile_time, "smem": self.smem,
                "max_error": self.max_error}

    @classmethod
    def from_json(cls, d: dict, config: dict | None = None) -> "ConfigResult":
        return cls(int(d["index"]), config if config is not None else d.get("config"), d.get("status", SKIPPED),
                   d.get("reason", ""), "", d.get("latency"), d.get("compile_time"), d.get("smem"),
                   d.get("max_error"))

    def __repr__(self):
        lat = f", {self.latency:.4f} ms" if self.latency is not None else ""
        why = f", {self.reason}" if self.reason else ""
        return f"ConfigResult(#{self.index} {_fmt_config(self.config)}: {self.status}{lat}{why})"


def _fmt_config(cfg) -> str:
    if isinstance(cfg, dict):
        return " ".join(f"{k}={v}" for k, v in cfg.items())
    return str(cfg)


def format_table(results: Sequence[ConfigResult], best_index: int | None = None) -> str:
    """A plain-text table of ``results`` (one row per configuration)."""
    rows = [("", "#", "config", "status", "ms", "smem KiB", "compile s", "reason")]
    for r in results:
        rows.append(("*" if r.index == best_index else "", str(r.index), _fmt_config(r.config), r.status,
                     "" if r.latency is None else f"{r.latency:.4f}",
                     "" if r.smem is None else f"{r.smem / 1024:.1f}",
                     "" if r.compile_time is None else f"{r.compile_time:.1f}",
                     r.reason))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1])
    return "\n".join(line.rstrip() for line in lines)


class TuneResult:
    """The outcome of tuning: ``config`` (the best configuration), ``latency`` (its ms), ``kernel`` (its
    compiled :class:`tilex.JITKernel`), ``results`` (every :class:`ConfigResult`), ``ref_latency`` (ms of
    ``ref_prog`` on the same inputs, when given), ``from_cache`` (the best configuration came from the
    autotune cache, nothing was benchmarked), ``cache_key`` / ``cache_path``."""

    def __init__(self, best: ConfigResult, results: Sequence[ConfigResult], ref_latency: float | None = None,
                 from_cache: bool = False, cache_key: str | None = None, cache_path: str | None = None):
        self.best = best
        self.results = list(results)
        self.ref_latency = ref_latency
        self.from_cache = from_cache
        self.cache_key = cache_key
        self.cache_path = cache_path

    @property
    def config(self) -> dict:
        return self.best.config

    @property
    def latency(self) -> float | None:
        return self.best.latency

    @property
    def kernel(self):
        return self.best.kernel

    def table(self) -> str:
        return format_table(self.results, self.best.index)

    def __repr__(self):
        lat = "?" if self.latency is None else f"{self.latency:.4f} ms"
        src = ", from cache" if self.from_cache else ""
        n_ok = sum(r.ok for r in self.results)
        return (f"<TuneResult best #{self.best.index} {_fmt_config(self.config)} ({lat}{src}); "
                f"{n_ok}/{len(self.results)} configs ok>")


class CompileReport:
    """Output of the compile phase: ``results`` (one :class:`ConfigResult` per configuration; status
    ``"compiled"`` with ``kernel`` set, or a failure), ``mode`` (``"process"`` or ``"thread"``) and why
    (``mode_reason``), and the bound problem (``args``, ``kwargs``, ``configs``, ``target``)."""

    def __init__(self, job: "_Job", results: list[ConfigResult], mode: str, mode_reason: str):
        self.job = job
        self.results = results
        self.mode = mode
        self.mode_reason = mode_reason

    @property
    def args(self):
        return self.job.args

    @property
    def kwargs(self):
        return self.job.kwargs

    @property
    def configs(self):
        return self.job.configs

    @property
    def target(self):
        return self.job.target

    @property
    def compiled(self) -> list[ConfigResult]:
        return [r for r in self.results if r.status == COMPILED]

    def table(self) -> str:
        return format_table(self.results)

    def __repr__(self):
        return (f"<CompileReport {len(self.compiled)}/{len(self.results)} compiled in {self.mode} mode>")


# --------------------------------------------------------------------------------------------------
# factories: unwrapping and references for worker processes
# --------------------------------------------------------------------------------------------------
def unwrap_factory(obj):
    """The plain function under ``@autotune`` / ``@jit`` wrappers."""
    seen = 0
    while hasattr(obj, "__tilex_factory__") and seen < 16:
        obj = obj.__tilex_factory__
        seen += 1
    return obj


class FactoryRef:
    """A factory named by module and qualified name, which a spawned worker process can import."""

    def __init__(self, module: str, qualname: str):
        self.module = module
        self.qualname = qualname

    def as_tuple(self):
        return (self.module, self.qualname)

    @staticmethod
    def resolve_tuple(ref) -> Callable:
        module, qualname = ref
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return unwrap_factory(obj)

    @classmethod
    def of(cls, factory) -> tuple["FactoryRef | None", str]:
        """``(ref, "")`` when ``factory`` can be imported by reference, else ``(None, why not)``."""
        module = getattr(factory, "__module__", None)
        qualname = getattr(factory, "__qualname__", None)
        if not module or not qualname:
            return None, f"{type(factory).__name__} object has no module/qualified name"
        if module == "__main__":
            return None, f"'{qualname}' is defined in __main__"
        if "<locals>" in qualname or "<lambda>" in qualname:
            return None, f"'{qualname}' is a local function (closure or lambda)"
        try:
            found = cls.resolve_tuple((module, qualname))
        except Exception as e:  # noqa: BLE001
            return None, f"'{module}.{qualname}' cannot be imported ({type(e).__name__}: {e})"
        if found is not factory:
            return None, f"'{module}.{qualname}' names a different object"
        return cls(module, qualname), ""


# --------------------------------------------------------------------------------------------------
# errors -> reasons
# --------------------------------------------------------------------------------------------------
def _reason_of(exc: BaseException) -> str:
    from tilex.jit.nvcc import TilexCompileError

    if isinstance(exc, TilexCompileError):
        text = exc.stderr or str(exc)
        errs = [ln.strip() for ln in text.splitlines() if "error" in ln.lower()]
        line = errs[0] if errs else (text.strip().splitlines() or ["nvcc failed"])[0]
        # drop the temporary file's path in front of "error"
        if ": error" in line:
            line = "error" + line.split(": error", 1)[1]
        reason = f"nvcc: {line}"
    else:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        reason = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return reason if len(reason) <= _REASON_CHARS else reason[: _REASON_CHARS - 3] + "..."


def _error_text(exc: BaseException) -> str:
    """The full error with its traceback (the last 8000 characters)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-8000:]


# --------------------------------------------------------------------------------------------------
# building one configuration (used by worker processes and by the thread mode)
# --------------------------------------------------------------------------------------------------
def _build_kernel(func, out_idx, target, pass_configs, smem_limit) -> tuple[dict, Any]:
    """Shared-memory check (``smem_limit``: (bytes or None, where the limit comes from)), then
    ``tilex.compile``. Returns ``(info, kernel or None)``."""
    import tilex

    from .smem import shared_memory_bytes

    t0 = time.perf_counter()
    info: dict = {"status": COMPILED, "reason": "", "error": "", "smem": None}
    try:
        try:
            info["smem"] = shared_memory_bytes(func, target, pass_configs)
        except Exception as e:  # noqa: BLE001 - the build below reports real errors with their own type
            from tilex.op.base import LayoutConflictError, TileOpError

            if isinstance(e, (TileOpError, LayoutConflictError)):
                raise
            logger.debug("shared memory estimate failed: %s", e)
        if smem_limit[0] is not None and info["smem"] is not None and info["smem"] > smem_limit[0]:
            limit, source = smem_limit
            info.update(status=SMEM, reason=f"needs {info['smem']} bytes of shared memory per block; the device "
                                            f"allows {limit} ({source})")
            return _timed(info, t0), None
        kernel = tilex.compile(func, out_idx=out_idx, target=target, pass_configs=pass_configs)
        return _timed(info, t0), kernel
    except Exception as e:  # noqa: BLE001 - recorded, not raised
        info.update(status=BUILD_ERROR, reason=_reason_of(e), error=_error_text(e))
        return _timed(info, t0), None


def _timed(info, t0):
    info["compile_time"] = time.perf_counter() - t0
    return info


def _call_factory(factory, args, kwargs, call_cfg):
    func = factory(*args, **kwargs, **call_cfg)
    import tvm

    if not isinstance(func, tvm.tirx.PrimFunc):
        raise TypeError(f"the kernel factory returned {type(func).__name__}, not a T.prim_func (PrimFunc)")
    return func


def _worker_ping() -> int:
    return os.getpid()


def _worker_compile(task: dict) -> dict:
    """Runs in a worker process: import the factory, build and compile one configuration (filling the
    on-disk kernel cache), return a small picklable summary."""
    t0 = time.perf_counter()
    try:
        factory = FactoryRef.resolve_tuple(task["ref"])
        func = _call_factory(factory, task["args"], task["kwargs"], task["call_cfg"])
    except Exception as e:  # noqa: BLE001
        return {"status": BUILD_ERROR, "reason": _reason_of(e), "error": _error_text(e), "smem": None,
                "compile_time": time.perf_counter() - t0}
    from tilex import env

    target = env.resolve_target(task["target"])
    info, _kernel = _build_kernel(func, task["out_idx"], target, task["pass_configs"], task["smem_limit"])
    info["compile_time"] = time.perf_counter() - t0
    return info


# --------------------------------------------------------------------------------------------------
# progress bars (tqdm when installed)
# --------------------------------------------------------------------------------------------------
class _NoBar:
    def __init__(self, *a, **k):
        pass

    def update(self, n=1):
        pass

    def set_postfix_str(self, s, refresh=True):
        pass

    def close(self):
        pass


def _bar(enabled: bool, total: int, desc: str):
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    # disable=None: no bar when stderr is not a terminal (logs, CI)
    return tqdm(total=total, desc=desc, unit="cfg", leave=False, disable=None)


# --------------------------------------------------------------------------------------------------
# the bound problem
# --------------------------------------------------------------------------------------------------
class _Job:
    def __init__(self, factory, args, kwargs, configs, call_cfgs, target, target_spec, out_idx, pass_configs):
        self.factory = factory
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.configs = configs        # effective configurations (with explicitly passed parameters merged in)
        self.call_cfgs = call_cfgs    # what is passed to the factory on top of args/kwargs, per configuration
        self.target = target          # tvm Target
        self.target_spec = target_spec  # JSON-able dict that re-creates `target` in a worker
        self.out_idx = out_idx
        self.pass_configs = pass_configs
        self.cache_payload = None

    def build_func(self, i):
        return _call_factory(self.factory, self.args, self.kwargs, self.call_cfgs[i])


def _expand_configs(configs) -> list:
    if isinstance(configs, dict):  # {"bm": [64, 128], "bn": [...]} -> cartesian product
        keys = list(configs)
        values = [v if isinstance(v, (list, tuple)) else [v] for v in configs.values()]
        return [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    return list(configs)


def _cuda_available() -> bool:
    from tilex import env

    return env.cuda_available()


def _device_name() -> str:
    """The current GPU's name (part of the autotune cache key), "no GPU" without one."""
    from tilex import env

    if not env.cuda_available():
        return "no GPU"
    import torch

    return str(torch.cuda.get_device_name(torch.cuda.current_device()))


# --------------------------------------------------------------------------------------------------
# inputs and checking
# --------------------------------------------------------------------------------------------------
def default_supply(params) -> list:
    """Random CUDA tensors for the given input :class:`tilex.jit.ParamSpec` list: ``randn`` for floating
    types, small ``randint`` values for integers, random booleans. Scalars and symbolic shapes need a
    ``supply``."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    out = []
    for p in params:
        if p.kind != "buffer":
            raise AutotuneError(f"parameter '{p.name}' is a scalar ({p.dtype}); the default supply cannot "
                                "invent it: pass supply=lambda params: [...] to the autotuner")
        if p.torch_dtype is None:
            raise AutotuneError(f"parameter '{p.name}' has dtype {p.dtype}, which torch cannot allocate; "
                                "pass supply=")
        if not all(isinstance(d, int) for d in p.shape):
            raise AutotuneError(f"parameter '{p.name}' has a symbolic shape {p!r}; pass supply= to give the "
                                "autotuner concrete inputs")
        if p.strides is not None:
            raise AutotuneError(f"parameter '{p.name}' declares strides; pass supply= to give the autotuner "
                                "suitable inputs")
        dt = p.torch_dtype
        shape = tuple(p.shape)
        if dt == torch.bool:
            t = torch.randint(0, 2, shape, device=device).bool()
        elif dt.is_floating_point:
            if dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                t = torch.randn(shape, dtype=dt, device=device)
            else:  # float8 and friends
                t = torch.randn(shape, dtype=torch.float32, device=device).to(dt)
        elif dt.is_complex:
            t = torch.randn(shape, dtype=dt, device=device)
        elif dt in (torch.uint8, getattr(torch, "uint16", None), getattr(torch, "uint32", None),
                    getattr(torch, "uint64", None)):
            t = torch.randint(0, 8, shape, device=device).to(dt)
        else:
            t = torch.randint(-4, 5, shape, device=device).to(dt)
        out.append(t)
    return out


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _compare(out, ref, rtol, atol) -> tuple[str, float | None]:
    """('' when equal within tolerance, else the reason), largest absolute error."""
    import torch

    outs, refs = _as_list(out), _as_list(ref)
    if len(outs) != len(refs):
        return f"the kernel returned {len(outs)} output(s) but ref_prog {len(refs)}", None
    worst = 0.0
    reason = ""
    for k, (o, r) in enumerate(zip(outs, refs)):
        r = torch.as_tensor(r, device=o.device)
        if tuple(o.shape) != tuple(r.shape):
            return f"output {k}: shape {tuple(o.shape)} but ref_prog gives {tuple(r.shape)}", None
        if o.is_complex() or r.is_complex():
            o2, r2 = o.to(torch.complex128), r.to(torch.complex128)
        else:
            wide = torch.float64 if torch.float64 in (o.dtype, r.dtype) else torch.float32
            o2, r2 = o.to(wide), r.to(wide)
        diff = (o2 - r2).abs()
        err = float(diff.nan_to_num(float("inf")).max().item()) if diff.numel() else 0.0
        worst = max(worst, err)
        try:
            torch.testing.assert_close(o2, r2, rtol=rtol, atol=atol, check_dtype=False, check_device=False)
        except AssertionError:
            bad = int((diff > atol + rtol * r2.abs()).sum().item()) if diff.numel() else 0
            if not reason:
                reason = (f"output {k}: max abs error {err:.4g} (rtol={rtol}, atol={atol}), "
                          f"{bad}/{o.numel()} elements mismatched")
    return reason, worst


# --------------------------------------------------------------------------------------------------
# the tuner
# --------------------------------------------------------------------------------------------------
class AutoTuner:
    """Tune a kernel factory over a list of configurations.

    ``AutoTuner.from_kernel(factory, configs).set_compile_args(out_idx=..., target=...)
    .set_profile_args(warmup=..., rep=..., ref_prog=..., supply=...).run(*factory_args)`` returns a
    :class:`TuneResult` (``.config``, ``.latency``, ``.kernel``, ``.results``).

    ``configs``: a list of dicts of factory keyword arguments, a dict of lists (their cartesian product), or a
    callable returning a list; the callable is called with the factory arguments given to ``run`` (or with
    none if it takes none). Factory parameters passed explicitly to ``run`` override the configurations'
    values. The phases are also available one by one: :meth:`compile` (no GPU needed) and :meth:`benchmark`.
    """

    def __init__(self, factory, configs, *, out_idx=None, target="auto", pass_configs=None, warmup=25, rep=100,
                 ref_prog=None, supply=None, rtol=1e-2, atol=1e-2, skip_check=False, cache_input_tensors=True,
                 max_workers=None, timeout=None, cache=True, progress=True, max_shared_memory=None,
                 parallel="auto"):
        if configs is None:
            raise ValueError("tilex.autotune: configs is required (a list of dicts, a dict of lists, or a callable)")
        inner = unwrap_factory(factory)
        if not callable(inner):
            raise TypeError(f"tilex.autotune: the kernel factory must be callable, got {type(inner).__name__}")
        self.factory = inner
        self.configs = configs
        jit_args = getattr(factory, "__tilex_compile_args__", None) or {}
        self.out_idx = jit_args.get("out_idx", None)
        self.target = jit_args.get("target", "auto")
        self.pass_configs = jit_args.get("pass_configs", None)
        if out_idx is not None:
            self.out_idx = out_idx
        if target != "auto":
            self.target = target
        if pass_configs is not None:
            self.pass_configs = pass_configs
        self.set_profile_args(warmup=warmup, rep=rep, ref_prog=ref_prog, supply=supply, rtol=rtol, atol=atol,
                              skip_check=skip_check, cache_input_tensors=cache_input_tensors)
        self.set_tune_args(max_workers=max_workers, timeout=timeout, cache=cache, progress=progress,
                           max_shared_memory=max_shared_memory, parallel=parallel)

    # -- TileLang-style builder API
    @classmethod
    def from_kernel(cls, kernel=None, configs=None, **kw) -> "AutoTuner":
        """``AutoTuner.from_kernel(factory, configs)`` (TileLang's spelling; ``kernel`` is the factory)."""
        if kernel is None:
            raise TypeError("AutoTuner.from_kernel: pass the kernel factory")
        return cls(kernel, configs, **kw)

    def set_compile_args(self, out_idx=None, target="auto", pass_configs=None) -> "AutoTuner":
        """Arguments for ``tilex.compile`` (``out_idx``, ``target``, ``pass_configs``)."""
        self.out_idx = out_idx
        self.target = target
        self.pass_configs = pass_configs
        return self

    def set_profile_args(self, warmup=25, rep=100, ref_prog=None, supply=None, rtol=1e-2, atol=1e-2,
                         skip_check=False, cache_input_tensors=True, supply_prog=None) -> "AutoTuner":
        """Benchmark and check settings. ``warmup``/``rep`` are milliseconds as in :func:`do_bench`;
        ``supply(params) -> list of tensors`` makes the inputs (``params``: the kernel's non-output
        :class:`tilex.jit.ParamSpec` list; ``supply_prog`` is accepted as TileLang's name for it)."""
        if supply is not None and supply_prog is not None:
            raise TypeError("pass supply or supply_prog, not both")
        self.warmup = warmup
        self.rep = rep
        self.ref_prog = ref_prog
        self.supply = supply if supply is not None else supply_prog
        self.rtol = rtol
        self.atol = atol
        self.skip_check = skip_check
        self.cache_input_tensors = cache_input_tensors
        return self

    def set_tune_args(self, max_workers=None, timeout=None, cache=True, progress=True, max_shared_memory=None,
                      parallel="auto") -> "AutoTuner":
        """``max_workers`` (default ``min(len(configs), os.cpu_count())``), ``timeout`` (seconds per
        configuration's compilation; ``None``: no limit), ``cache`` (use the autotune disk cache),
        ``progress`` (tqdm bars), ``max_shared_memory`` (bytes per block; default: the GPU's opt-in limit,
        or the target arch's without a GPU), ``parallel`` (``"auto"``, ``"process"`` or ``"thread"``)."""
        if parallel not in ("auto", "process", "thread"):
            raise ValueError(f"parallel must be 'auto', 'process' or 'thread', got {parallel!r}")
        if max_workers is not None and int(max_workers) < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.timeout = timeout
        self.cache = cache
        self.progress = progress
        self.max_shared_memory = max_shared_memory
        self.parallel = parallel
        return self

    # -- binding
    def _resolve_configs(self, args, kwargs) -> list:
        configs = self.configs
        if callable(configs) and not isinstance(configs, (list, tuple, dict)):
            try:
                takes_args = bool(inspect.signature(configs).parameters)
            except (TypeError, ValueError):
                takes_args = True
            configs = configs(*args, **kwargs) if takes_args else configs()
        try:
            configs = _expand_configs(configs)
        except TypeError:
            raise TypeError(f"tilex.autotune: configs must be a list of dicts (or a callable returning one), "
                            f"got {type(configs).__name__}") from None
        if not configs:
            raise ValueError("tilex.autotune: the configuration list is empty")
        for c in configs:
            if not isinstance(c, dict):
                raise TypeError(f"tilex.autotune: every configuration must be a dict of factory keyword "
                                f"arguments, got {c!r}")
        return configs

    def _bind(self, args, kwargs) -> _Job:
        from tilex import env

        configs = self._resolve_configs(args, kwargs)
        name = getattr(self.factory, "__qualname__", repr(self.factory))
        try:
            sig = inspect.signature(self.factory)
        except (TypeError, ValueError):
            sig = None
        keys = list(dict.fromkeys(k for c in configs for k in c))
        given: dict = {}
        if sig is not None:
            has_var_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
            unknown = [k for k in keys if k not in sig.parameters and not has_var_kw]
            if unknown:
                raise TypeError(f"tilex.autotune: configuration key(s) {unknown} are not parameters of "
                                f"{name}{sig}")
            try:
                given = dict(sig.bind_partial(*args, **kwargs).arguments)
            except TypeError as e:
                raise TypeError(f"tilex.autotune: bad arguments for {name}{sig}: {e}") from None
        fixed = {k: given[k] for k in keys if k in given}
        eff, calls, seen = [], [], set()
        for c in configs:
            e = {**c, **fixed} if fixed else c
            try:
                tag = json.dumps(_acache.stable_repr(e), sort_keys=True)
            except _acache.UnstableKeyError:
                tag = repr(sorted(e.items(), key=lambda kv: kv[0]))
            if tag in seen:
                continue
            seen.add(tag)
            eff.append(e)
            calls.append({k: v for k, v in c.items() if k not in given})
        if sig is not None:
            try:
                sig.bind(*args, **kwargs, **calls[0])
            except TypeError as e:
                raise TypeError(f"tilex.autotune: cannot call {name}{sig} with the arguments given and the "
                                f"configuration's {sorted(calls[0])}: {e}. Pass the factory's problem arguments "
                                f"(e.g. sizes) when calling the autotuned factory / AutoTuner.run") from None
        target = env.resolve_target(self.target)
        try:
            spec = json.loads(str(target))
        except ValueError:
            spec = str(target)
        return _Job(self.factory, args, kwargs, eff, calls, target, spec, self.out_idx, self.pass_configs)

    def _smem_limit(self, job) -> tuple[int | None, str]:
        """(bytes of shared memory a block may use, where that number comes from)."""
        from tilex import env

        from . import smem

        if self.max_shared_memory is not None:
            return int(self.max_shared_memory), "max_shared_memory"
        if _cuda_available():
            lim = smem.device_shared_memory_limit()
            if lim:
                return lim, "shared_memory_per_block_optin"
        try:
            arch = env.target_arch(job.target)
            lim = smem.arch_shared_memory_limit(arch)
            return lim, f"the {arch} limit"
        except Exception:  # noqa: BLE001
            return None, ""

    # -- cache key
    def _cache_payload(self, job) -> dict:
        import tvm

        import tilex

        program = None
        for i in range(len(job.configs)):
            try:
                program = hashlib.sha256(job.build_func(i).script().encode()).hexdigest()
                break
            except Exception:  # noqa: BLE001 - that configuration fails; try the next one
                continue
        try:
            src = hashlib.sha256(inspect.getsource(self.factory).encode()).hexdigest()
        except (OSError, TypeError):
            src = None
        return {
            "format": _acache.FORMAT_VERSION,
            "factory": f"{getattr(self.factory, '__module__', '?')}.{getattr(self.factory, '__qualname__', '?')}",
            "factory_source": src,
            "args": list(job.args),
            "kwargs": job.kwargs,
            "program": program,
            "configs": job.configs,
            "out_idx": job.out_idx,
            "target": str(job.target),
            "pass_configs": job.pass_configs or {},
            "device": _device_name(),
            "tilex": tilex.__version__,
            "tvm": tvm.__version__,
        }

    def cache_key(self, *args, **kwargs) -> str | None:
        """The autotune cache key for these factory arguments (``None`` when an argument or configuration has
        no stable representation, which disables caching)."""
        return self._key(self._bind(args, kwargs))

    def _key(self, job) -> str | None:
        try:
            job.cache_payload = self._cache_payload(job)
            return _acache.make_key(job.cache_payload)
        except _acache.UnstableKeyError as e:
            logger.info("tilex autotune: not caching (%s)", e)
            return None

    # -- phase 1: compile
    def compile(self, *args, **kwargs) -> CompileReport:
        """Compile every configuration (no GPU needed) and re-create the compiled kernels in this process.
        Returns a :class:`CompileReport` to pass to :meth:`benchmark`."""
        return self._compile_job(self._bind(args, kwargs))

    def _choose_mode(self, job) -> tuple[str, str, Any]:
        from tilex.jit import cache as kcache

        if self.parallel == "thread":
            return "thread", "parallel='thread'", None
        ref, why = FactoryRef.of(self.factory)
        if ref is None:
            reason = why + "; compiling in threads"
        elif not kcache.enabled():
            reason = "the kernel cache is disabled, so kernels built in worker processes could not be reused"
            ref = None
        else:
            try:
                pickle.dumps((job.args, job.kwargs, job.call_cfgs, job.out_idx, job.pass_configs, job.target_spec))
                reason = ""
            except Exception as e:  # noqa: BLE001
                ref, reason = None, f"the factory arguments cannot be pickled ({e})"
        if ref is None:
            if self.parallel == "process":
                raise AutotuneError(f"tilex.autotune: parallel='process' is impossible: {reason}")
            logger.info("tilex autotune: compiling in threads: %s", reason)
            return "thread", reason, None
        return "process", "", ref

    def _compile_job(self, job) -> CompileReport:
        n = len(job.configs)
        workers = self.max_workers or min(n, os.cpu_count() or 1)
        workers = max(1, min(int(workers), n))
        limit = self._smem_limit(job)
        mode, mode_reason, ref = self._choose_mode(job)
        results = [ConfigResult(i, c) for i, c in enumerate(job.configs)]
        if mode == "process":
            ok = self._compile_processes(job, ref, results, workers, limit)
            if not ok:
                mode = "thread"
                mode_reason = ("the worker processes died before compiling anything (a script that tunes at "
                               "import time needs an `if __name__ == \"__main__\":` guard)")
                warnings.warn(f"tilex autotune: {mode_reason}; compiling in threads instead", RuntimeWarning,
                              stacklevel=3)
                results = [ConfigResult(i, c) for i, c in enumerate(job.configs)]
        if mode == "thread":
            self._compile_threads(job, results, workers, limit)
        else:
            self._load_kernels(job, results)
        return CompileReport(job, results, mode, mode_reason)

    def _task(self, job, ref, i, limit) -> dict:
        return {"ref": ref.as_tuple(), "args": job.args, "kwargs": job.kwargs, "call_cfg": job.call_cfgs[i],
                "out_idx": job.out_idx, "target": job.target_spec, "pass_configs": job.pass_configs,
                "smem_limit": limit}

    def _collect(self, futures: dict, results, bar, on_result) -> list:
        """Wait for ``futures`` (future -> index), honouring ``timeout``; returns the indices whose worker
        broke (BrokenProcessPool)."""
        started: dict = {}
        broken = []
        pending = set(futures)
        while pending:
            done, pending = cf.wait(pending, timeout=0.25, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                i = futures[fut]
                try:
                    on_result(i, fut.result())
                except cf.process.BrokenProcessPool:
                    broken.append(i)
                    continue
                except Exception as e:  # noqa: BLE001 - e.g. the task could not be pickled
                    r = results[i]
                    r.status, r.reason, r.error = BUILD_ERROR, _reason_of(e), _error_text(e)
                bar.update(1)
            if self.timeout is not None:
                now = time.monotonic()
                for fut in list(pending):
                    if fut.running():
                        t0 = started.setdefault(fut, now)
                        if now - t0 > self.timeout:
                            i = futures[fut]
                            r = results[i]
                            r.status, r.compile_time = TIMEOUT, now - t0
                            r.reason = f"compilation did not finish within {self.timeout} s"
                            pending.discard(fut)
                            fut.cancel()
                            bar.update(1)
        return broken

    def _compile_processes(self, job, ref, results, workers, limit) -> bool:
        """Compile in worker processes; returns False when the workers cannot start (the caller falls back
        to threads)."""
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        todo = list(range(len(job.configs)))
        bar = _bar(self.progress, len(todo), "tilex autotune: compile")

        def on_result(i, info):
            r = results[i]
            r.status, r.reason, r.error = info["status"], info["reason"], info["error"]
            r.smem, r.compile_time = info["smem"], info["compile_time"]

        try:
            pool_size = workers
            first = True
            while todo:
                ex = cf.ProcessPoolExecutor(max_workers=min(pool_size, len(todo)), mp_context=ctx)
                broken: list = []
                try:
                    if first:
                        first = False
                        # start every worker first (so that `timeout` does not count their start-up); a worker that
                        # cannot start at all (e.g. an unguarded __main__) breaks the pool here
                        try:
                            for f in [ex.submit(_worker_ping) for _ in range(min(pool_size, len(todo)))]:
                                f.result()
                        except cf.process.BrokenProcessPool:
                            _terminate_pool(ex)
                            return False
                    futures = {ex.submit(_worker_compile, self._task(job, ref, i, limit)): i for i in todo}
                    broken = sorted(self._collect(futures, results, bar, on_result))
                finally:
                    if broken or any(results[i].status == TIMEOUT for i in todo):
                        _terminate_pool(ex)
                    else:
                        ex.shutdown(wait=True)
                if not broken:
                    break
                # a configuration crashed its worker: retry the unfinished ones one at a time, so that the
                # crash is pinned on the configuration that causes it (the first unfinished one)
                if pool_size == 1:
                    r = results[broken[0]]
                    r.status = BUILD_ERROR
                    r.reason = "the worker process died while compiling this configuration (crash or out of memory)"
                    bar.update(1)
                    broken = broken[1:]
                pool_size = 1
                todo = broken
        finally:
            bar.close()
        return True

    def _load_kernels(self, job, results):
        """Re-create the kernels compiled by the workers in this process (``tilex.compile`` finds them in the
        on-disk kernel cache)."""
        for r in results:
            if r.status != COMPILED:
                continue
            try:
                func = job.build_func(r.index)
                import tilex

                r.kernel = tilex.compile(func, out_idx=job.out_idx, target=job.target, pass_configs=job.pass_configs)
                r.from_kernel_cache = r.kernel.from_cache
            except Exception as e:  # noqa: BLE001
                r.status, r.reason, r.error = BUILD_ERROR, _reason_of(e), _error_text(e)

    def _compile_threads(self, job, results, workers, limit):
        funcs = {}
        for r in results:
            t0 = time.perf_counter()
            try:
                funcs[r.index] = job.build_func(r.index)
            except Exception as e:  # noqa: BLE001
                r.status, r.reason, r.error = BUILD_ERROR, _reason_of(e), _error_text(e)
                r.compile_time = time.perf_counter() - t0
        bar = _bar(self.progress, len(results), "tilex autotune: compile")
        bar.update(len(results) - len(funcs))

        def on_result(i, out):
            info, kernel = out
            r = results[i]
            r.status, r.reason, r.error = info["status"], info["reason"], info["error"]
            r.smem, r.compile_time, r.kernel = info["smem"], info["compile_time"], kernel

        ex = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tilex-autotune")
        try:
            futures = {ex.submit(_build_kernel, f, job.out_idx, job.target, job.pass_configs, limit): i
                       for i, f in funcs.items()}
            self._collect(futures, results, bar, on_result)
        finally:
            # threads that timed out cannot be stopped; leave them behind
            ex.shutdown(wait=not any(r.status == TIMEOUT for r in results), cancel_futures=True)
            bar.close()

    # -- phase 2: benchmark
    def benchmark(self, report: CompileReport) -> TuneResult:
        """Check and time the compiled kernels of ``report`` on the GPU; returns the :class:`TuneResult`.
        Raises :class:`AutotuneError` (with the table of reasons) when no configuration works."""
        import torch

        from .bench import do_bench

        results = report.results
        if not _cuda_available():
            raise AutotuneError("tilex autotune: benchmarking needs a CUDA GPU (torch sees none); "
                                "AutoTuner.compile(...) runs the compile phase alone", results)
        if self.ref_prog is not None and not self.skip_check and not _as_list(report.job.out_idx):
            raise AutotuneError("tilex autotune: checking against ref_prog needs out_idx (the kernel must return "
                                "its outputs); set out_idx or skip_check=True", results)
        supply = self.supply or default_supply
        shared: dict = {}  # input signature -> (inputs, ref outputs)
        ref_latency = None
        todo = [r for r in results if r.status == COMPILED]
        bar = _bar(self.progress, len(todo), "tilex autotune: bench")
        best = None
        try:
            for r in todo:
                kernel = r.kernel
                specs = [p for p in kernel.params if not p.is_output]
                sig = tuple((p.name, p.kind, p.dtype, tuple(map(str, p.shape))) for p in specs)
                entry = shared.get(sig) if self.cache_input_tensors else None
                if entry is None:
                    inputs = list(supply(specs))
                    ref = None
                    if self.ref_prog is not None and not self.skip_check:
                        ref = self.ref_prog(*inputs)
                        torch.cuda.synchronize()
                    entry = (inputs, ref)
                    if self.cache_input_tensors:
                        shared[sig] = entry
                    if ref_latency is None and self.ref_prog is not None:
                        try:
                            ref_latency = do_bench(lambda: self.ref_prog(*inputs), self.warmup, self.rep)
                        except Exception as e:  # noqa: BLE001
                            logger.info("tilex autotune: timing ref_prog failed: %s", e)
                inputs, ref = entry
                try:
                    out = kernel(*inputs)
                    torch.cuda.synchronize()
                    if ref is not None:
                        reason, err = _compare(out, ref, self.rtol, self.atol)
                        r.max_error = err
                        if reason:
                            r.status, r.reason = WRONG, reason
                            bar.update(1)
                            continue
                    del out
                    r.latency = do_bench(lambda: kernel(*inputs), self.warmup, self.rep)
                    r.status = OK
                except Exception as e:  # noqa: BLE001
                    r.status, r.reason, r.error = RUNTIME_ERROR, _reason_of(e), _error_text(e)
                if r.ok and (best is None or r.latency < best.latency):
                    best = r
                    bar.set_postfix_str(f"best {best.latency:.4f} ms (#{best.index})")
                bar.update(1)
        finally:
            bar.close()
        if best is None:
            raise AutotuneError("tilex autotune: no configuration worked:\n" + format_table(results), results)
        _label(best)
        return TuneResult(best, results, ref_latency=ref_latency)

    # -- both phases + the cache
    def run(self, *args, **kwargs) -> TuneResult:
        """Tune for these factory arguments: return the cached best configuration when there is one, else
        compile every configuration, check and time them, cache and return the best."""
        job = self._bind(args, kwargs)
        key = self._key(job) if self.cache else None
        if key is not None:
            hit = self._from_cache(job, key)
            if hit is not None:
                return hit
        if not _cuda_available():
            raise AutotuneError("tilex autotune: benchmarking needs a CUDA GPU (torch sees none); "
                                "AutoTuner.compile(...) runs the compile phase alone")
        report = self._compile_job(job)
        if not report.compiled:
            raise AutotuneError("tilex autotune: no configuration compiled:\n" + report.table(), report.results)
        res = self.benchmark(report)
        if key is not None:
            res.cache_key = key
            res.cache_path = _acache.save(key, {
                "best_index": res.best.index, "best_config": res.config, "latency": res.latency,
                "ref_latency": res.ref_latency, "results": [r.to_json() for r in res.results],
                "payload": job.cache_payload})
        logger.info("tilex autotune: best %s (%.4f ms)\n%s", _fmt_config(res.config), res.latency, res.table())
        return res

    def _from_cache(self, job, key) -> TuneResult | None:
        import tilex

        entry = _acache.load(key)
        if entry is None:
            return None
        try:
            idx = int(entry["best_index"])
            config = job.configs[idx]
            results = []
            for d in entry.get("results", []):
                i = int(d["index"])
                results.append(ConfigResult.from_json(d, job.configs[i] if 0 <= i < len(job.configs) else None))
            best = next((r for r in results if r.index == idx), None) or ConfigResult(idx, config, OK)
            best.kernel = tilex.compile(job.build_func(idx), out_idx=job.out_idx, target=job.target,
                                        pass_configs=job.pass_configs)
        except Exception as e:  # noqa: BLE001 - a stale or broken entry: tune again
            logger.warning("tilex autotune: cached entry %s is unusable (%s); tuning again", entry.get("path"), e)
            return None
        _label(best)
        logger.info("tilex autotune: cached best %s from %s", _fmt_config(config), entry.get("path"))
        return TuneResult(best, results or [best], ref_latency=entry.get("ref_latency"), from_cache=True,
                          cache_key=key, cache_path=entry.get("path"))


def _terminate_pool(ex):
    """Stop a process pool without waiting for running tasks (timeouts, crashes)."""
    procs = list(getattr(ex, "_processes", {}).values()) if getattr(ex, "_processes", None) else []
    try:
        ex.shutdown(wait=False, cancel_futures=True)
    except Exception:  # noqa: BLE001
        pass
    for p in procs:
        try:
            if p.is_alive():
                p.terminate()
        except Exception:  # noqa: BLE001
            pass
    for p in procs:
        try:
            p.join(timeout=5)
        except Exception:  # noqa: BLE001
            pass


def _label(best: ConfigResult):
    """Attach the chosen configuration to its kernel (``kernel.config``, ``kernel.latency``)."""
    k = best.kernel
    if k is not None:
        try:
            k.config = best.config
            k.latency = best.latency
        except AttributeError:
            pass


# --------------------------------------------------------------------------------------------------
# decorators
# --------------------------------------------------------------------------------------------------
class AutotunedFactory:
    """What ``@tilex.autotune(...)`` makes of a kernel factory. Calling it with the factory's problem
    arguments tunes (or loads the cached best configuration) and returns the best configuration's compiled
    :class:`tilex.JITKernel`, with ``kernel.config`` and ``kernel.latency`` set. Results are remembered per
    argument list in this process; :meth:`tune_results` returns the full :class:`TuneResult`.

    When every tuned parameter is passed explicitly, nothing is tuned: the kernel is compiled as given.
    """

    def __init__(self, factory, tuner: AutoTuner):
        functools.update_wrapper(self, unwrap_factory(factory))
        self.__tilex_factory__ = factory
        self.tuner = tuner
        self._memo: dict = {}
        self._lock = threading.Lock()
        self.last_result: TuneResult | None = None

    def _memo_key(self, args, kwargs):
        try:
            return json.dumps(_acache.stable_repr([list(args), kwargs]), sort_keys=True)
        except _acache.UnstableKeyError:
            return None

    def tune_results(self, *args, **kwargs) -> TuneResult:
        """The :class:`TuneResult` for these factory arguments (tunes first if needed)."""
        mk = self._memo_key(args, kwargs)
        with self._lock:
            if mk is not None and mk in self._memo:
                return self._memo[mk]
            res = self.tuner.run(*args, **kwargs)
            if mk is not None:
                self._memo[mk] = res
            self.last_result = res
            return res

    def __call__(self, *args, **kwargs):
        import tilex

        tuner = self.tuner
        job = tuner._bind(args, kwargs)
        if len(job.configs) == 1 and all(not c for c in job.call_cfgs):
            # every tuned parameter was given explicitly: compile as asked
            kernel = tilex.compile(job.build_func(0), out_idx=job.out_idx, target=job.target,
                                   pass_configs=job.pass_configs)
            kernel.config = job.configs[0]
            kernel.latency = None
            return kernel
        return self.tune_results(*args, **kwargs).kernel

    def __repr__(self):
        return f"<tilex.autotune {getattr(self, '__qualname__', '?')}>"


def autotune(func=None, *, configs=None, warmup=25, rep=100, ref_prog=None, rtol=1e-2, atol=1e-2, supply=None,
             skip_check=False, cache_input_tensors=True, max_workers=None, timeout=None, out_idx=None,
             target="auto", pass_configs=None, cache=True, progress=True, max_shared_memory=None,
             parallel="auto", supply_prog=None):
    """Decorator: tune a kernel factory over ``configs`` and return the best compiled kernel.

    ::

        @tilex.autotune(configs=[dict(bm=128, bn=128, bk=64, num_stages=3, threads=128), ...],
                        ref_prog=lambda A, B: A @ B, out_idx=[2])
        def matmul(M, N, K, bm=128, bn=128, bk=32, num_stages=3, threads=128): ...

        kernel = matmul(4096, 4096, 4096)   # tuned (or the cached best); kernel.config is the choice
        matmul.tune_results(4096, 4096, 4096).table()

    ``out_idx``, ``target``, ``pass_configs`` go to ``tilex.compile`` (or stack ``@autotune`` over
    ``@tilex.autotuner.jit(out_idx=...)``). See :class:`AutoTuner` and the module docstring for the rest.
    """
    if supply is not None and supply_prog is not None:
        raise TypeError("pass supply or supply_prog, not both")

    def wrap(fn):
        tuner = AutoTuner(fn, configs, out_idx=out_idx, target=target, pass_configs=pass_configs, warmup=warmup,
                          rep=rep, ref_prog=ref_prog, supply=supply if supply is not None else supply_prog,
                          rtol=rtol, atol=atol, skip_check=skip_check, cache_input_tensors=cache_input_tensors,
                          max_workers=max_workers, timeout=timeout, cache=cache, progress=progress,
                          max_shared_memory=max_shared_memory, parallel=parallel)
        return AutotunedFactory(fn, tuner)

    if func is not None:
        return wrap(func)
    return wrap


class JitFactory:
    """What :func:`jit` makes of a kernel factory: calling it compiles the PrimFunc the factory returns."""

    def __init__(self, fn, out_idx=None, target="auto", pass_configs=None):
        functools.update_wrapper(self, fn)
        self.__tilex_factory__ = fn
        self.__tilex_compile_args__ = {"out_idx": out_idx, "target": target, "pass_configs": pass_configs}

    def __call__(self, *args, **kwargs):
        import tilex

        a = self.__tilex_compile_args__
        return tilex.compile(self.__tilex_factory__(*args, **kwargs), out_idx=a["out_idx"], target=a["target"],
                             pass_configs=a["pass_configs"])

    def __repr__(self):
        return f"<tilex.autotuner.jit {getattr(self, '__qualname__', '?')}>"


def jit(func=None, *, out_idx=None, target="auto", pass_configs=None):
    """``@jit(out_idx=...)`` over a kernel factory: calling it returns ``tilex.compile(factory(...), ...)``.
    ``@tilex.autotune`` stacked on top takes its compile arguments from here (TileLang's ``@tilelang.jit``
    pattern; the name ``tilex.jit`` itself is the JIT subpackage, so import this one from
    ``tilex.autotuner``)."""
    def wrap(fn):
        return JitFactory(fn, out_idx=out_idx, target=target, pass_configs=pass_configs)

    if func is not None:
        return wrap(func)
    return wrap

