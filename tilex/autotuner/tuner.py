"""The autotuner: compile a kernel factory for every configuration, check and time the results, keep the best.

A *kernel factory* is a function returning a ``T.prim_func`` from problem arguments and tuning parameters::

    def matmul(M, N, K, bm=128, bn=128, bk=32, num_stages=3, threads=128): ...; return main

Tuning runs in two phases that can be used separately (``AutoTuner.compile`` and ``AutoTuner.benchmark``):

1. **compile** (no GPU needed): every configuration is built in parallel (:mod:`tilex.autotuner.workers`). With
   the default ``parallel="auto"`` each configuration is compiled in a worker process (``ProcessPoolExecutor``,
   *spawn* context): the worker imports the factory by reference (its module and qualified name; a factory of
   the script being run, ``__main__``, is found in the worker's own ``__main__``: spawn runs the script again
   there, its guarded entry point excepted), builds the
   PrimFunc, computes the shared memory it needs (:func:`tilex.autotuner.smem.shared_memory_bytes`; too much for
   the device -> rejected before nvcc), and compiles it with ``tilex.compile``, which runs nvcc (on a machine
   without a GPU too, so ``"compiled"`` always means nvcc accepted the code) and writes the on-disk kernel cache
   on a GPU machine (without one, only ptxas's report is kept, so nvcc does not run twice). The parent then
   re-creates each kernel with ``tilex.compile``, which loads it from that cache. A factory that cannot be
   imported by reference (defined in a closure, a ``functools.partial``, or a ``__main__`` that is no script file:
   an interactive session, ``python -c``), arguments that
   cannot be pickled, or a disabled kernel cache make the tuner compile in *threads* of the parent instead (the
   PrimFuncs are built one after the other, the compilations overlap where TVM and nvcc release the GIL). As
   with any use of ``multiprocessing``, a script that tunes at import time must guard its entry point with
   ``if __name__ == "__main__":``; if the worker processes die before compiling anything the tuner warns and
   falls back to threads.
2. **benchmark** (GPU): inputs are made for the non-output parameters (``supply(params)`` or random tensors,
   :func:`tilex.autotuner.inputs.default_supply`), every compiled kernel is run once and compared against
   ``ref_prog(*inputs)`` within ``rtol``/``atol``, at most ``max_mismatched_ratio`` of the elements off (unless
   ``skip_check``; :func:`tilex.autotuner.inputs.compare_outputs`; or judged by ``manual_check_prog``), then timed
   with :func:`tilex.autotuner.bench.do_bench` (CUDA events, L2 flushed between repetitions). The fastest correct
   configuration wins. Without a GPU the phase cannot run; it is :meth:`AutoTuner.benchmark` alone, so a caller
   can put another choice in its place.

A configuration may hold ``"pass_configs"``: compile options of its own, over the tuner's
(:mod:`tilex.autotuner.configs`). A factory may also be an eager ``@tilex.jit`` function
(:class:`tilex.jit.eager.EagerFactory`: called with compile-time arguments and ``T.const`` sizes by keyword; its
kernels' outputs are its returned ``T.empty`` tensors).

A configuration that fails is recorded with a status and a reason instead of raising
(:mod:`tilex.autotuner.results`); only when *every* configuration fails does tuning raise
:class:`AutotuneError`, whose message holds the table of reasons.

The best configuration is cached on disk (:mod:`tilex.autotuner.cache`); a later run with the same factory,
arguments, configurations, device and versions compiles just that configuration and does not benchmark.

This module holds :class:`AutoTuner`; the ``@autotune`` decorator and what it makes of a factory
(:class:`~tilex.autotuner.decorator.AutotunedFactory`) are in :mod:`tilex.autotuner.decorator`. The ``@jit``
decorator that ``@autotune`` can be stacked on is :func:`tilex.jit` (``tilex.autotuner.jit`` is the same
function).
"""
from __future__ import annotations

import collections
import functools
import hashlib
import inspect
import json
import logging
import os
import pickle
import sys
import threading
import warnings
from typing import Any

import tvm

from tilex import env
from tilex.ir.hardware import num_sms
from tilex.jit import cache as kcache
from tilex.jit import compile as compile_kernel
from tilex.utils.tensor import TensorSupplyType, supply_tensor

from . import smem
from . import cache as acache
from .capture import captured_supply, get_autotune_inputs
from .configs import PASS_CONFIGS, expand_configs, merge_pass_configs, split_config
from .cost_model import CostModel, MeasurementDB, known_before_compiling, program_features
from .devices import bench_devices
from .dynamic import build_dynamic_kernel, profile, sized_supply
from .inputs import as_list, compare_outputs, default_supply, manual_check
from .launch_shape import launch_shape
from .local_bench import LocalBench
from .remote import benchmark_remote
from .results import (COMPILED, OK, RUNTIME_ERROR, SKIPPED, WRONG, AutotuneError, CompileReport, ConfigResult,
                      TuneResult, error_text, format_config, format_table, reason_of)
from .workers import (FactoryRef, call_factory, compile_in_processes, compile_in_threads, kernel_out_idx, load_kernels,
                      picklable, progress_bar, unwrap_factory)

__all__ = ["AutoTuner"]

logger = logging.getLogger("tilex.autotuner")


# --------------------------------------------------------------------------------------------------
# the bound problem
# --------------------------------------------------------------------------------------------------
class _Job:
    """One tuning problem: the factory bound to its arguments, the effective configurations and the compile
    arguments (what the compile phase's workers and the benchmark phase read)."""

    def __init__(self, factory, args, kwargs, configs, call_cfgs, target, target_spec, out_idx, pass_configs,
                 config_pass_configs=None):
        self.factory = factory
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.configs = configs        # effective configurations (with explicitly passed parameters merged in)
        self.call_cfgs = call_cfgs    # what is passed to the factory on top of args/kwargs, per configuration
        self.target = target          # tvm Target
        self.target_spec = target_spec  # JSON-able dict that re-creates `target` in a worker
        self.out_idx = out_idx
        self.pass_configs = pass_configs
        # each configuration's own "pass_configs" (None: the tuner's alone)
        self.config_pass_configs = list(config_pass_configs or [None] * len(configs))
        self.cache_payload = None

    def build_func(self, i):
        return call_factory(self.factory, self.args, self.kwargs, self.call_cfgs[i])

    def pass_configs_of(self, i):
        """The compile options of configuration `i`: the tuner's, with the configuration's own over them."""
        return merge_pass_configs(self.pass_configs, self.config_pass_configs[i])

    def out_idx_for(self, func):
        """The out_idx to compile `func` (one of this job's programs) with."""
        return kernel_out_idx(self.factory, func, self.out_idx)

    @property
    def returns_outputs(self) -> bool:
        """Whether the kernels return outputs (``out_idx``, or an eager function's returned tensors) that a check
        can compare."""
        return bool(as_list(self.out_idx)) or bool(getattr(self.factory, "returns_outputs", False))

    def subset(self, keep):
        """This job restricted to configurations `keep` (indices)."""
        sub = _Job(self.factory, self.args, self.kwargs, [self.configs[i] for i in keep],
                   [self.call_cfgs[i] for i in keep], self.target, self.target_spec, self.out_idx, self.pass_configs,
                   [self.config_pass_configs[i] for i in keep])
        sub.cache_payload = self.cache_payload
        return sub


def _cuda_available() -> bool:
    return env.cuda_available()


def _tilex_version() -> str:
    """``tilex.__version__`` (part of the autotune cache key), read from the loaded package when it is needed:
    the package face ``tilex`` sits above the autotuner and is not imported here."""
    return sys.modules["tilex"].__version__


def _device_name() -> str:
    """The current GPU's name (part of the autotune cache key), "no GPU" without one."""
    if not env.cuda_available():
        return "no GPU"
    import torch

    return str(torch.cuda.get_device_name(torch.cuda.current_device()))


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
    none if it takes none). A configuration may hold ``"pass_configs"``, compile options of its own over the
    tuner's (:mod:`tilex.autotuner.configs`). Factory parameters passed explicitly to ``run`` override the
    configurations' values (the ``@autotune`` decorator instead compiles such a call as given, TileLang's rule).
    The phases are also available one by one: :meth:`compile` (no GPU needed) and :meth:`benchmark`.
    """

    def __init__(self, factory, configs, *, out_idx=None, target="auto", pass_configs=None, warmup=25, rep=100,
                 ref_prog=None, supply=None, rtol=1e-2, atol=1e-2, skip_check=False, cache_input_tensors=True,
                 max_workers=None, timeout=None, cache=True, progress=True, max_shared_memory=None,
                 parallel="auto", dynamic=None, top_k=None, record=True, cost_db=None, devices=None,
                 runners=None, supply_type=None, early_stop=False, early_stop_factor=2.0, backend="event",
                 manual_check_prog=None, max_mismatched_ratio=0.01):
        if configs is None:
            raise ValueError("tilex.autotune: configs is required (a list of dicts, a dict of lists, or a callable)")
        inner = unwrap_factory(factory)
        if isinstance(inner, tvm.tirx.PrimFunc):
            raise TypeError("tilex.autotune: expected a kernel factory (a function returning a T.prim_func), got a "
                            "T.prim_func, which has nothing to tune")
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
        if self.out_idx is not None and getattr(inner, "out_idx_of", None) is not None:
            raise ValueError(f"tilex.autotune: out_idx={self.out_idx!r} is for factories that return a T.prim_func; "
                             f"the eager function '{getattr(inner, '__name__', '?')}' returns its T.empty outputs")
        self.set_profile_args(warmup=warmup, rep=rep, ref_prog=ref_prog, supply=supply, rtol=rtol, atol=atol,
                              skip_check=skip_check, cache_input_tensors=cache_input_tensors, supply_type=supply_type,
                              backend=backend, manual_check_prog=manual_check_prog,
                              max_mismatched_ratio=max_mismatched_ratio)
        self.set_early_stop(early_stop, early_stop_factor)
        self.set_tune_args(max_workers=max_workers, timeout=timeout, cache=cache, progress=progress,
                           max_shared_memory=max_shared_memory, parallel=parallel, devices=devices,
                           runners=runners)
        self.dynamic = normalize_dynamic(dynamic)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"tilex.autotune: top_k must be a positive int, got {top_k!r}")
        self.top_k = top_k
        self.record = record
        self.cost_db = cost_db  # a MeasurementDB path; None: the autotune cache directory's

    # -- TileLang-style builder API
    @classmethod
    def from_kernel(cls, kernel=None, configs=None, **kw) -> "AutoTuner":
        """``AutoTuner.from_kernel(factory, configs)`` (TileLang's spelling; ``kernel`` is the factory)."""
        if kernel is None:
            raise TypeError("AutoTuner.from_kernel: pass the kernel factory")
        return cls(kernel, configs, **kw)

    def set_compile_args(self, out_idx=None, target="auto", pass_configs=None, execution_backend=None,
                         target_host=None, verbose=None) -> "AutoTuner":
        """Arguments for ``tilex.compile`` (``out_idx``, ``target``, ``pass_configs``). TileLang's
        ``execution_backend`` (how the host calls the kernel: "auto", "tvm_ffi", "cython", "nvrtc", "torch") and
        ``verbose`` are accepted and change nothing: tilex has one caller, and the results are the same.
        ``target_host`` other than None raises NotImplementedError (tilex's host code is LLVM for this machine)."""
        if execution_backend not in (None, "auto", "tvm_ffi", "cython", "nvrtc", "torch"):
            raise ValueError(f"tilex.autotune: unknown execution_backend {execution_backend!r}")
        if target_host is not None:
            raise NotImplementedError("tilex AutoTuner.set_compile_args(target_host=...): tilex builds the host "
                                      "code for this machine only")
        self.out_idx = out_idx
        self.target = target
        self.pass_configs = pass_configs
        return self

    def set_profile_args(self, warmup=25, rep=100, ref_prog=None, supply=None, rtol=1e-2, atol=1e-2,
                         skip_check=False, cache_input_tensors=True, supply_prog=None, supply_type=None,
                         backend="event", manual_check_prog=None, max_mismatched_ratio=0.01,
                         timeout=None) -> "AutoTuner":
        """Benchmark and check settings. ``warmup``/``rep`` are milliseconds as in :func:`do_bench`;
        ``supply(params) -> list of tensors`` makes the inputs (``params``: the kernel's non-output
        :class:`tilex.jit.ParamSpec` list; ``supply_prog`` is accepted as TileLang's name for it); without one,
        ``supply_type`` (a :class:`tilex.TensorSupplyType`) fills them as the profiler does, and without that
        :func:`~tilex.autotuner.inputs.default_supply` does. Inputs given by an enclosing
        ``with set_autotune_inputs(...)`` (:mod:`tilex.autotuner.capture`) win over all three. ``backend``: how
        :func:`tilex.jit.bench.do_bench` times ("event", "cupti" or "cudagraph").

        The check (``ref_prog`` given, ``skip_check`` off): each output must be close to ``ref_prog``'s
        (``|out - ref| <= atol + rtol * |ref|``) except at most ``int(numel * max_mismatched_ratio)`` elements
        (TileLang's tolerance, 1 % by default); with ``manual_check_prog``, ``manual_check_prog(outputs,
        ref_outputs)`` (both lists) decides instead: the configuration is wrong when it raises. TileLang's
        ``timeout`` here (a limit on each configuration's benchmark) is accepted only as None or 0, no limit
        (NotImplementedError otherwise; ``AutoTuner(timeout=...)`` limits compilation)."""
        if supply is not None and supply_prog is not None:
            raise TypeError("pass supply or supply_prog, not both")
        if backend not in ("event", "cupti", "cudagraph"):
            raise ValueError(f"tilex.autotune: backend must be 'event', 'cupti' or 'cudagraph', got {backend!r}")
        if manual_check_prog is not None and not callable(manual_check_prog):
            raise TypeError(f"tilex.autotune: manual_check_prog must be callable (outputs, ref_outputs), got "
                            f"{type(manual_check_prog).__name__}")
        if isinstance(max_mismatched_ratio, bool) or not isinstance(max_mismatched_ratio, (int, float)) \
                or not 0 <= max_mismatched_ratio <= 1:
            raise ValueError(f"tilex.autotune: max_mismatched_ratio must be a number in [0, 1], got "
                             f"{max_mismatched_ratio!r}")
        if timeout:
            raise NotImplementedError("tilex AutoTuner.set_profile_args(timeout=...): a time limit on each "
                                      "configuration's benchmark is not implemented (AutoTuner(timeout=...) limits "
                                      "compilation)")
        if manual_check_prog is not None and (ref_prog is None or skip_check):
            logger.warning("tilex autotune: manual_check_prog is used only with ref_prog and skip_check=False "
                           "(it compares the kernel's outputs with ref_prog's); nothing is checked")
        self.manual_check_prog = manual_check_prog
        self.max_mismatched_ratio = float(max_mismatched_ratio)
        self.supply_type = None if supply_type is None else TensorSupplyType.of(supply_type)
        self.backend = backend
        self.warmup = warmup
        self.rep = rep
        self.ref_prog = ref_prog
        self.supply = supply if supply is not None else supply_prog
        self.rtol = rtol
        self.atol = atol
        self.skip_check = skip_check
        self.cache_input_tensors = cache_input_tensors
        return self

    def set_early_stop(self, early_stop=False, early_stop_factor=2.0) -> "AutoTuner":
        """TileLang's early stop: with ``early_stop``, a configuration whose five-call estimate exceeds
        ``early_stop_factor`` times the best latency measured so far is not timed further; its estimate is its
        latency (so it is not chosen). Raises ValueError for a factor below 1."""
        if early_stop and not early_stop_factor >= 1.0:
            raise ValueError(f"tilex.autotune: early_stop_factor must be >= 1.0, got {early_stop_factor}")
        self.early_stop = bool(early_stop)
        self.early_stop_factor = float(early_stop_factor)
        return self

    def set_tune_args(self, max_workers=None, timeout=None, cache=True, progress=True, max_shared_memory=None,
                      parallel="auto", devices=None, runners=None) -> "AutoTuner":
        """``max_workers`` (default :func:`tilex.env.autotune_workers`: one per CPU, or TileLang's
        ``$TILELANG_AUTO_TUNING_CPU_COUNTS`` / ``$TILELANG_AUTO_TUNING_MAX_CPU_COUNT``), ``timeout`` (seconds per
        configuration's compilation; ``None``: no limit), ``cache`` (use the autotune disk cache),
        ``progress`` (tqdm bars), ``max_shared_memory`` (bytes per block; default: the GPU's opt-in limit,
        or the target arch's without a GPU), ``parallel`` (``"auto"``, ``"process"`` or ``"thread"``),
        ``devices`` (the GPUs that time configurations side by side: every visible one by default, a count, or
        a list of indices; see :mod:`tilex.autotuner.devices`), ``runners`` (:class:`~tilex.autotuner.rpc.
        RemoteRunner` s: time the configurations on other machines through TVM's RPC tracker instead, see
        :mod:`tilex.autotuner.remote`; a local GPU, when present, still checks them against ``ref_prog``)."""
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
        self.devices = devices
        self.runners = list(runners) if runners else []
        return self

    def _device_label(self) -> str:
        """Where configurations are timed (part of the cache and measurement keys): the local GPU's name, or the
        RPC keys of the runners."""
        if self.runners:
            return "rpc:" + ",".join(sorted({r.key for r in self.runners}))
        return _device_name()

    # -- binding
    def _resolve_configs(self, args, kwargs, configs=None) -> list:
        """The configuration list for these factory arguments (`configs`, else the tuner's; a callable is called
        with the arguments, or with none if it takes none), checked to be dicts."""
        if configs is None:
            configs = self.configs
        if callable(configs) and not isinstance(configs, (list, tuple, dict)):
            try:
                takes_args = bool(inspect.signature(configs).parameters)
            except (TypeError, ValueError):
                takes_args = True
            configs = configs(*args, **kwargs) if takes_args else configs()
        try:
            configs = expand_configs(configs)
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

    def _signature(self):
        try:
            return inspect.signature(self.factory)
        except (TypeError, ValueError):
            return None

    def tuned_keys(self, configs, sig=None) -> list[str]:
        """The factory parameters the configurations set (their keys, the reserved ``"pass_configs"`` left out
        unless the factory has a parameter of that name)."""
        sig = sig if sig is not None else self._signature()
        takes_pc = sig is not None and PASS_CONFIGS in sig.parameters
        return list(dict.fromkeys(k for c in configs for k in c if takes_pc or k != PASS_CONFIGS))

    def _bind(self, args, kwargs, configs=None) -> _Job:
        """The tuning problem for these factory arguments: every configuration (of `configs`, else the tuner's)
        with the parameters passed explicitly merged in, what each passes to the factory, its own pass_configs."""
        configs = self._resolve_configs(args, kwargs, configs)
        name = getattr(self.factory, "__qualname__", repr(self.factory))
        sig = self._signature()
        takes_pc = sig is not None and PASS_CONFIGS in sig.parameters
        keys = self.tuned_keys(configs, sig)
        given: dict = {}
        if sig is not None:
            # an eager function's **sizes takes T.const sizes, never configuration keys
            open_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()) and \
                not getattr(self.factory, "sizes_by_keyword", False)
            named = {n for n, p in sig.parameters.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
            unknown = [k for k in keys if k not in named and not open_kw]
            if unknown:
                raise TypeError(f"tilex.autotune: configuration key(s) {unknown} are not parameters of "
                                f"{name}{sig}")
            try:
                given = dict(sig.bind_partial(*args, **kwargs).arguments)
            except TypeError as e:
                raise TypeError(f"tilex.autotune: bad arguments for {name}{sig}: {e}") from None
        fixed = {k: given[k] for k in keys if k in given}
        eff, calls, own, seen = [], [], [], set()
        for c in configs:
            factory_args, pass_configs = split_config(c, takes_pc)
            e = {**c, **fixed} if fixed else c
            try:
                tag = json.dumps(acache.stable_repr(e), sort_keys=True)
            except acache.UnstableKeyError:
                tag = repr(sorted(e.items(), key=lambda kv: kv[0]))
            if tag in seen:
                continue
            seen.add(tag)
            eff.append(e)
            calls.append({k: v for k, v in factory_args.items() if k not in given})
            own.append(pass_configs)
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
        return _Job(self.factory, args, kwargs, eff, calls, target, spec, self.out_idx, self.pass_configs, own)

    def _smem_limit(self, job) -> tuple[int | None, str]:
        """(bytes of shared memory a block may use, where that number comes from)."""
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
        program = None
        for i in range(len(job.configs)):
            try:
                program = hashlib.sha256(job.build_func(i).script().encode()).hexdigest()
                break
            except Exception:  # noqa: BLE001 - that configuration fails; try the next one
                continue
        try:
            src = hashlib.sha256(inspect.getsource(inspect.unwrap(self.factory)).encode()).hexdigest()
        except (OSError, TypeError):
            src = None
        return {
            "format": acache.FORMAT_VERSION,
            "factory": f"{getattr(self.factory, '__module__', '?')}.{getattr(self.factory, '__qualname__', '?')}",
            "factory_source": src,
            "args": list(job.args),
            "kwargs": job.kwargs,
            "program": program,
            "configs": job.configs,
            "out_idx": job.out_idx,
            "target": str(job.target),
            "pass_configs": job.pass_configs or {},
            "device": self._device_label(),
            "tilex": _tilex_version(),
            "tvm": tvm.__version__,
            **({"dynamic": self.dynamic} if self.dynamic else {}),
        }

    def cache_key(self, *args, **kwargs) -> str | None:
        """The autotune cache key for these factory arguments (``None`` when an argument or configuration has
        no stable representation, which disables caching)."""
        return self._key(self._bind(args, kwargs))

    def _key(self, job) -> str | None:
        try:
            job.cache_payload = self._cache_payload(job)
            return acache.make_key(job.cache_payload)
        except acache.UnstableKeyError as e:
            logger.info("tilex autotune: not caching (%s)", e)
            return None

    # -- one configuration
    def program(self, args, kwargs, config=None):
        """The PrimFunc the factory builds for these arguments with one configuration's values (None: the
        arguments as given)."""
        return self._bind(args, kwargs, configs=[dict(config or {})]).build_func(0)

    def compile_config(self, args, kwargs, config=None):
        """Compile the factory for these arguments with one configuration's values (None: the arguments as given)
        and the tuner's compile options, the configuration's own ``pass_configs`` over them; nothing is tuned or
        cached here (the kernel cache still applies)."""
        job = self._bind(args, kwargs, configs=[dict(config or {})])
        func = job.build_func(0)
        return compile_kernel(func, out_idx=job.out_idx_for(func), target=job.target,
                              pass_configs=job.pass_configs_of(0))

    # -- phase 1: compile
    def compile(self, *args, **kwargs) -> CompileReport:
        """Compile every configuration (no GPU needed) and re-create the compiled kernels in this process.
        Returns a :class:`CompileReport` to pass to :meth:`benchmark`."""
        return self._compile_job(self._bind(args, kwargs))

    def _choose_mode(self, job) -> tuple[str, str, Any]:
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
                pickle.dumps((picklable(job.args), picklable(job.kwargs), job.call_cfgs, job.out_idx,
                              [job.pass_configs_of(i) for i in range(len(job.configs))], job.target_spec))
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
        workers = self.max_workers or env.autotune_workers(n)
        workers = max(1, min(int(workers), n))
        limit = self._smem_limit(job)
        mode, mode_reason, ref = self._choose_mode(job)
        results = [ConfigResult(i, c) for i, c in enumerate(job.configs)]
        if mode == "process":
            ok = compile_in_processes(job, ref, results, workers, limit, timeout=self.timeout,
                                      progress=self.progress, exact_workers=self.max_workers is not None)
            if not ok:
                mode = "thread"
                mode_reason = ("the worker processes died before compiling anything (a script that tunes at "
                               "import time needs an `if __name__ == \"__main__\":` guard)")
                warnings.warn(f"tilex autotune: {mode_reason}; compiling in threads instead", RuntimeWarning,
                              stacklevel=3)
                results = [ConfigResult(i, c) for i, c in enumerate(job.configs)]
        if mode == "thread":
            compile_in_threads(job, results, workers, limit, timeout=self.timeout, progress=self.progress)
        else:
            load_kernels(job, results)
        return CompileReport(job, results, mode, mode_reason)

    # -- phase 2: benchmark
    def benchmark(self, report: CompileReport) -> TuneResult:
        """Check and time the compiled kernels of ``report`` on the GPU; returns the :class:`TuneResult`.
        Raises :class:`AutotuneError` (with the table of reasons) when no configuration works."""
        results = report.results
        check = self.ref_prog is not None and not self.skip_check
        local = not self.runners or check  # with runners, the local GPU only checks results
        if local and not _cuda_available():
            raise AutotuneError("tilex autotune: benchmarking needs a CUDA GPU (torch sees none); " + (
                "with runners= only the check against ref_prog does: skip_check=True times on the remote "
                "machines unchecked" if self.runners else "AutoTuner.compile(...) runs the compile phase alone"),
                results)
        if check and not report.job.returns_outputs:
            raise AutotuneError("tilex autotune: checking against ref_prog needs out_idx (the kernel must return "
                                "its outputs); set out_idx or skip_check=True", results)
        supply = self._supply()
        todo = [r for r in results if r.status == COMPILED]
        features = self._features(report, todo) if (self.top_k or self.record) else {}
        if self.top_k and len(todo) > self.top_k:
            todo = self._rank(report, todo, features)
        devices = bench_devices(self.devices) if local else []
        bar = progress_bar(self.progress, len(todo), ("tilex autotune: check" if self.runners else
                                                      "tilex autotune: bench")
                           + (f" on {len(devices)} GPUs" if len(devices) > 1 else ""))
        local_bench = LocalBench(supply, self.ref_prog, check, self.rtol, self.atol, self.warmup, self.rep,
                                 cache_inputs=self.cache_input_tensors, time_it=not self.runners, progress=bar,
                                 early_stop_factor=self.early_stop_factor if self.early_stop else None,
                                 backend=self.backend, manual_check_prog=self.manual_check_prog,
                                 max_mismatched_ratio=self.max_mismatched_ratio)
        try:
            if local:
                local_bench.run(todo, devices)
        finally:
            bar.close()
        if self.runners:
            benchmark_remote([r for r in todo if r.status == COMPILED], self.runners, self.rep)
        ok = [r for r in todo if r.ok]
        best = min(ok, key=lambda r: r.latency) if ok else None
        if self.record and features:
            try:
                self._db().add(self._problem_key(report.job, self._device_label()),
                               [(r.config, features[r.index], r.latency) for r in results
                                if r.ok and r.index in features])
            except OSError as e:
                logger.info("tilex autotune: measurements not recorded (%s)", e)
        if best is None:
            raise AutotuneError("tilex autotune: no configuration worked:\n" + format_table(results), results)
        _label(best)
        return TuneResult(best, results, ref_latency=local_bench.ref_latency)

    def _supply(self):
        """The benchmark's ``supply(params)``: inputs captured by ``set_autotune_inputs`` (read in this thread),
        else ``supply``, else ``supply_type``'s tensors, else :func:`default_supply`."""
        captured = get_autotune_inputs()
        if captured is not None:
            if self.supply is not None:
                logger.warning("tilex autotune: supply is ignored inside `with set_autotune_inputs(...)`")
            return captured_supply(captured)
        if self.supply is not None:
            return self.supply
        if self.supply_type is not None:
            kind = self.supply_type
            return lambda params: [supply_tensor(p, kind) for p in params]
        return default_supply

    # -- the cost model (tilex.autotuner.cost_model)
    def _db(self):
        return MeasurementDB(self.cost_db)

    @staticmethod
    def _problem_key(job, device: str | None = None) -> str:
        try:
            return acache.make_key({"factory": f"{getattr(job.factory, '__module__', '?')}."
                                               f"{getattr(job.factory, '__qualname__', '?')}",
                                    "args": list(job.args), "kwargs": job.kwargs, "target": str(job.target),
                                    "device": device or _device_name()})
        except acache.UnstableKeyError:
            return repr((job.args, job.kwargs))

    @staticmethod
    def _sms(job) -> int:
        """Multiprocessors of the job's target (the features' wave counts)."""
        try:
            return num_sms(env.target_arch(job.target))
        except Exception:  # noqa: BLE001
            return 132

    def _training_records(self, job):
        """(this problem's key, the database's records) when the database holds measurements of at least
        MIN_PROBLEMS_TO_RANK other problems, else None (the cost model is not trusted yet)."""
        problem = self._problem_key(job, self._device_label())
        records = self._db().load()
        others = {r["problem"] for r in records} - {problem}
        if len(others) < MIN_PROBLEMS_TO_RANK:
            logger.info("tilex autotune: no ranking (the measurement database has %d other problems; the cost model "
                        "needs %d)", len(others), MIN_PROBLEMS_TO_RANK)
            return None
        return problem, records

    def _features(self, report, todo) -> dict:
        """Static features per compiled configuration (index -> dict), where they can be computed."""
        sms = self._sms(report.job)
        out = {}
        for r in todo:
            try:
                res = r.kernel.resources
                out[r.index] = program_features(report.job.build_func(r.index), r.config, report.job.args,
                                                res.registers if res is not None else None, r.smem, sms)
            except Exception as e:  # noqa: BLE001 - a symbolic or unusual program: no features, no record
                logger.debug("tilex autotune: no features for configuration %d: %s", r.index, e)
        return out

    def _keep_before_compiling(self, job) -> list[int] | None:
        """With ``top_k``: the configurations worth compiling, ranked by a model on the features known before
        compiling (:func:`~tilex.autotuner.cost_model.known_before_compiling`); max(2 top_k, top_k + 3) of them.
        None (compile all) when the database is too small or a program has no features."""
        n = len(job.configs)
        keep_n = max(2 * self.top_k, self.top_k + 3)
        if n <= keep_n:
            return None
        training = self._training_records(job)
        if training is None:
            return None
        problem, records = training
        try:
            sms = self._sms(job)
            feats = [program_features(job.build_func(i), job.configs[i], job.args, None, None, sms) for i in range(n)]
            model = CostModel(only=known_before_compiling).fit(records, exclude={problem})
        except Exception as e:  # noqa: BLE001 - compile everything instead
            logger.info("tilex autotune: no ranking before compiling (%s)", e)
            return None
        return sorted(model.rank(feats)[:keep_n])

    def _compile_subset(self, job, keep) -> CompileReport:
        """Compile configurations `keep` of `job` only; the others are reported as skipped."""
        part = self._compile_job(job.subset(keep))
        results = [ConfigResult(i, c, SKIPPED, reason="ranked out before compiling by the cost model")
                   for i, c in enumerate(job.configs)]
        for i, r in zip(keep, part.results):
            r.index = i
            results[i] = r
        return CompileReport(job, results, part.mode, part.mode_reason)

    def _rank(self, report, todo, features):
        """The `top_k` configurations of `todo` the cost model ranks fastest (all of them when the database holds
        too few other problems to train on); the rest are skipped with that reason."""
        training = None if any(r.index not in features for r in todo) else self._training_records(report.job)
        if training is None:
            return todo
        problem, records = training
        model = CostModel().fit(records, exclude={problem})
        order = model.rank([features[r.index] for r in todo])
        keep = [todo[i] for i in order[:self.top_k]]
        for i in order[self.top_k:]:
            todo[i].status, todo[i].reason = SKIPPED, f"ranked below the top {self.top_k} by the cost model"
        return keep

    # -- both phases + the cache
    def run(self, *args, **kwargs) -> TuneResult:
        """Tune for these factory arguments: return the cached best configuration when there is one, else
        compile every configuration, check and time them, cache and return the best.

        TileLang's ``run`` options are taken too, for this run, when the factory has no parameter of that name:
        ``warmup``, ``rep``, ``early_stop``, ``early_stop_factor``, ``benchmark_devices`` (with
        ``benchmark_multi_gpu=True``: the GPUs that time configurations); ``use_pipeline``,
        ``enable_grouped_compile``, ``group_compile_size`` order TileLang's compile work and change nothing here
        (tilex compiles every configuration in parallel already). ``timeout`` (a time limit on each
        configuration's benchmark) raises NotImplementedError: tilex's ``timeout`` limits compilation only."""
        options = self._run_options(kwargs)
        if not options:
            return self._run(args, kwargs)
        saved = {k: getattr(self, k) for k in ("warmup", "rep", "early_stop", "early_stop_factor", "devices")}
        try:
            if "warmup" in options:
                self.warmup = options["warmup"]
            if "rep" in options:
                self.rep = options["rep"]
            if "early_stop" in options or "early_stop_factor" in options:
                self.set_early_stop(options.get("early_stop", self.early_stop),
                                    options.get("early_stop_factor", self.early_stop_factor))
            if options.get("benchmark_multi_gpu") and options.get("benchmark_devices") is not None:
                self.devices = list(options["benchmark_devices"])
            return self._run(args, {k: v for k, v in kwargs.items() if k not in options})
        finally:
            for k, v in saved.items():
                setattr(self, k, v)

    #: TileLang's AutoTuner.run keyword arguments
    RUN_OPTIONS = ("warmup", "rep", "timeout", "early_stop", "early_stop_factor", "use_pipeline",
                   "enable_grouped_compile", "group_compile_size", "benchmark_devices", "benchmark_multi_gpu")

    def _run_options(self, kwargs) -> dict:
        """The keyword arguments of ``run`` that are TileLang's run options, not factory parameters."""
        try:
            params = inspect.signature(self.factory).parameters
        except (TypeError, ValueError):
            params = {}
        options = {k: kwargs[k] for k in self.RUN_OPTIONS if k in kwargs and k not in params}
        if options.get("timeout"):
            raise NotImplementedError("tilex AutoTuner.run(timeout=...): a time limit on each configuration's "
                                      "benchmark is not implemented (AutoTuner(timeout=...) limits compilation)")
        return options

    def _run(self, args, kwargs, configs=None) -> TuneResult:
        job = self._bind(args, kwargs, configs)
        dim = self._dynamic_dim(job)
        if dim is not None:
            return self._run_dynamic(job, dim)
        key = self._key(job) if self.cache and kcache.enabled() else None
        if key is not None:
            hit = self._from_cache(job, key)
            if hit is not None:
                return hit
        if not _cuda_available():
            raise AutotuneError("tilex autotune: benchmarking needs a CUDA GPU (torch sees none); "
                                "AutoTuner.compile(...) runs the compile phase alone")
        keep = self._keep_before_compiling(job) if self.top_k else None
        report = self._compile_job(job) if keep is None else self._compile_subset(job, keep)
        if not report.compiled:
            raise AutotuneError("tilex autotune: no configuration compiled:\n" + report.table(), report.results)
        res = self.benchmark(report)
        _label(res.best)  # whatever made the choice (benchmark() may be replaced), the kernel carries it
        if key is not None:
            res.cache_key = key
            res.cache_path = acache.save(key, {
                "best_index": res.best.index, "best_config": res.config, "latency": res.latency,
                "ref_latency": res.ref_latency, "results": [r.to_json() for r in res.results],
                "payload": job.cache_payload})
        logger.info("tilex autotune: best %s (%.4f ms)\n%s", format_config(res.config), res.latency, res.table())
        return res

    # -- a dynamic size: one kernel per configuration, a dispatch table per call
    def _dynamic_dim(self, job) -> str | None:
        """The name of the dynamic size the factory was called with (a ``T.dynamic`` variable named in
        ``dynamic=``), or ``None`` (tune for the static sizes given)."""
        if not self.dynamic:
            return None
        for v in list(job.args) + list(job.kwargs.values()):
            if isinstance(v, tvm.tirx.Var) and v.name in self.dynamic:
                return v.name
        return None

    def _run_dynamic(self, job, dim) -> TuneResult:
        """Compile every configuration with `dim` symbolic, profile them at wave-aligned values of it, fit the
        dispatch tables (or load them from the autotune cache) and return a TuneResult whose ``kernel`` is the
        :class:`~tilex.autotuner.dispatch.DynamicKernel`."""
        if self.runners:
            raise AutotuneError("tilex autotune: a dynamic size is profiled on the local GPU; runners= (remote "
                                "timing) takes static shapes only")
        max_value = self.dynamic[dim]
        key = self._key(job) if self.cache and kcache.enabled() else None
        report = self._compile_job(job)
        if not report.compiled:
            raise AutotuneError("tilex autotune: no configuration compiled:\n" + report.table(), report.results)
        results = report.results
        kernels = {r.index: r.kernel for r in results if r.status == COMPILED}
        configs = {r.index: r.config for r in results}
        funcs = {i: job.build_func(i) for i in kernels}
        entry = acache.load(key) if key is not None else None
        if entry is not None and "dispatch" in entry:
            try:
                shapes = {i: launch_shape(f) for i, f in funcs.items()}
                dk = build_dynamic_kernel(kernels, configs, shapes, {}, {}, dim, max_value,
                                          table_json=entry["dispatch"])
                return self._dynamic_result(dk, results, key, entry.get("path"), from_cache=True)
            except Exception as e:  # noqa: BLE001 - a stale entry: profile again
                logger.warning("tilex autotune: cached dispatch table %s is unusable (%s); profiling again",
                               entry.get("path"), e)
        if not _cuda_available():
            raise AutotuneError("tilex autotune: profiling a dynamic size needs a CUDA GPU (torch sees none)")
        import torch

        first = next(iter(kernels.values()))
        supplies: dict = {}  # device -> inputs(value): the check's inputs serve the profile on that device too

        def make_supply():
            dev = torch.cuda.current_device()
            if dev not in supplies:
                supplies[dev] = sized_supply(first.params, dim, max_value, self.supply or default_supply)
            return supplies[dev]

        if self.ref_prog is not None and not self.skip_check:
            self._check_dynamic(kernels, results, make_supply(), min(max_value, 129))
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        devices = bench_devices(self.devices)
        bar = progress_bar(self.progress, None, f"tilex autotune: profile {dim}"
                           + (f" on {len(devices)} GPUs" if len(devices) > 1 else ""))
        try:
            shapes, capacities, samples = profile(kernels, funcs, dim, max_value, make_supply, sms,
                                                  smem={r.index: r.smem for r in results}, progress=bar,
                                                  devices=devices)
        finally:
            bar.close()
        dk = build_dynamic_kernel(kernels, configs, shapes, capacities, samples, dim, max_value)
        for r in results:
            if r.index in samples:
                r.status = OK
                r.latency = min(ms for _, ms in samples[r.index])
        path = None
        if key is not None:
            path = acache.save(key, {"dispatch": dk.table.to_json(), "payload": job.cache_payload,
                                     "samples": {str(i): v for i, v in samples.items()}})
        return self._dynamic_result(dk, results, key, path)

    def _check_dynamic(self, kernels, results, supply, value):
        """Run every kernel once at `value` against ``ref_prog``; wrong or failing ones are left out."""
        import torch

        inputs = supply(value)
        ref = self.ref_prog(*inputs)
        torch.cuda.synchronize()
        for r in results:
            if r.index not in kernels:
                continue
            try:
                out = kernels[r.index](*inputs)
                torch.cuda.synchronize()
                if self.manual_check_prog is not None:
                    reason = manual_check(self.manual_check_prog, out, ref)
                else:
                    reason, r.max_error = compare_outputs(out, ref, self.rtol, self.atol, self.max_mismatched_ratio)
                if reason:
                    r.status, r.reason = WRONG, reason
            except Exception as e:  # noqa: BLE001
                r.status, r.reason, r.error = RUNTIME_ERROR, reason_of(e), error_text(e)
            if r.status != COMPILED:
                del kernels[r.index]
        if not kernels:
            raise AutotuneError("tilex autotune: no configuration worked:\n" + format_table(results), results)

    @staticmethod
    def _dynamic_result(dk, results, key, path, from_cache=False) -> TuneResult:
        best_index = collections.Counter(dk.table.choices[1:]).most_common(1)[0][0]
        best = next(r for r in results if r.index == best_index)
        if best.kernel is not None:
            _label(best)
        return TuneResult(best, results, from_cache=from_cache, cache_key=key, cache_path=path, dynamic=dk)

    def _from_cache(self, job, key) -> TuneResult | None:
        entry = acache.load(key)
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
            func = job.build_func(idx)
            best.kernel = compile_kernel(func, out_idx=job.out_idx_for(func), target=job.target,
                                         pass_configs=job.pass_configs_of(idx))
        except Exception as e:  # noqa: BLE001 - a stale or broken entry: tune again
            logger.warning("tilex autotune: cached entry %s is unusable (%s); tuning again", entry.get("path"), e)
            return None
        _label(best)
        logger.info("tilex autotune: cached best %s from %s", format_config(config), entry.get("path"))
        return TuneResult(best, results or [best], ref_latency=entry.get("ref_latency"), from_cache=True,
                          cache_key=key, cache_path=entry.get("path"))


#: problems (other than the one being tuned) the measurement database must hold before ``top_k`` trusts the model
MIN_PROBLEMS_TO_RANK = 8

#: the largest value of a dynamic size the dispatch table covers when ``dynamic=`` names no bound
DEFAULT_DYNAMIC_MAX = 16384


def normalize_dynamic(dynamic) -> dict:
    """``dynamic=`` as {size name: largest value tabulated}: a name, a list of names (bound
    :data:`DEFAULT_DYNAMIC_MAX`) or a dict of bounds. One size at a time."""
    if dynamic is None:
        return {}
    if isinstance(dynamic, str):
        dynamic = [dynamic]
    items = list(dynamic.items()) if isinstance(dynamic, dict) else [(n, DEFAULT_DYNAMIC_MAX) for n in dynamic]
    for name, bound in items:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"tilex.autotune: dynamic= names sizes by their T.dynamic name, got {name!r}")
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise ValueError(f"tilex.autotune: the bound of dynamic size '{name}' must be a positive int, got "
                             f"{bound!r}")
    if len(items) > 1:
        raise ValueError(f"tilex.autotune: one dynamic size at a time, got {[n for n, _ in items]}")
    return dict(items)


def _label(best: ConfigResult):
    """Attach the chosen configuration to its kernel (``kernel.config``, ``kernel.latency``)."""
    k = best.kernel
    if k is not None:
        try:
            k.config = best.config
            k.latency = best.latency
        except AttributeError:
            pass
