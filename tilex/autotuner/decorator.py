"""``@tilex.autotune``: a kernel factory, or an ``@tilex.jit`` function (lazy or eager), tuned on the call
(TileLang's ``tilelang.autotune``).

::

    @tilex.autotune(configs=[dict(block_M=128, block_N=128), dict(block_M=64, block_N=256)], ref_prog=...)
    @tilex.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=128, block_N=128): ...; return main

    kernel = matmul(4096, 4096, 4096)          # tuned: the best configuration's kernel (kernel.config, .latency)
    kernel = matmul.compile(4096, 4096, 4096)  # the same
    kernel = matmul(4096, 4096, 4096, block_M=64, block_N=256)   # a tuned parameter given: compiled as given

What a call does (TileLang's rules):

* **A tuned parameter given** (a configuration key passed by position or keyword): nothing is tuned; the factory is
  compiled with the arguments as given (parameters left out take their defaults; one without a default is a
  TypeError). ``kernel.config`` holds the tuned parameters' values, ``kernel.latency`` is None.
* **Otherwise** the configurations are tuned (:class:`~tilex.autotuner.tuner.AutoTuner`: compile phase, benchmark
  phase, the autotune disk cache) once per *tuning key*: the arguments by name, defaults applied (tensors by dtype,
  shape and strides), the parameters named in ``do_not_specialize`` left out. A later call with the same key reuses
  the result (``_tuner_cache``). A call that differs from the tuned one only in ``do_not_specialize`` parameters
  reuses the best configuration without tuning again, and gets a kernel compiled for its own arguments (TileLang
  hands back the kernel compiled for the first call's arguments, which computes wrong results when such a
  parameter is a size the program is built for).
* **Eager functions** (:mod:`tilex.jit.eager`: the function is the program): a call with tensors binds the
  ``T.const`` sizes from them (and from size keywords), tunes per (compile-time arguments, sizes), runs the best
  kernel on the tensors and returns its outputs; ``.compile(M=..., N=..., ...)`` (sizes and/or tensors) returns the
  kernel instead (``__return_kernel=True`` is TileLang's spelling of the same). The configurations set compile-time
  parameters. The benchmark runs on inputs from ``supply`` / ``supply_type`` / ``with set_autotune_inputs(...)``,
  not on the call's tensors (a kernel may write its inputs), as in TileLang.

Also: :meth:`AutotunedFactory.get_tir` / :meth:`~AutotunedFactory.get_kernel_source` (the chosen configuration's
program and CUDA source), :meth:`~AutotunedFactory.tune_results` (the whole :class:`TuneResult`).
"""
from __future__ import annotations

import functools
import inspect
import json
import threading

from tilex.jit.eager import EagerFactory

from . import cache as acache
from .configs import split_config
from .results import TuneResult
from .tuner import AutoTuner
from .workers import unwrap_factory

__all__ = ["AutotunedFactory", "autotune"]

#: TileLang's keyword for "return the kernel, do not run it" (an eager function's call)
RETURN_KERNEL = "__return_kernel"


class _Call:
    """One call, resolved: what the tuner is called with (``args``/``kwargs``: the call's own arguments, or an eager
    function's compile-time arguments and sizes by name), the configurations, the tuned parameters the call gives,
    the tuning key and the full key (None when an argument has no stable representation), an eager call's tensors,
    and the arguments by name (for ``kernel.config`` of an untuned call)."""

    __slots__ = ("args", "kwargs", "configs", "tuned", "given", "key", "full_key", "tensors", "by_name")

    def __init__(self, args, kwargs, configs, tuned, given, key, full_key, tensors, by_name):
        self.args, self.kwargs, self.configs, self.tuned, self.given = args, kwargs, configs, tuned, given
        self.key, self.full_key, self.tensors, self.by_name = key, full_key, tensors, by_name


def _normalized(value):
    """`value` with torch tensors replaced by their dtype, shape and strides (a tuning key never holds data)."""
    if type(value).__module__.startswith("torch") and hasattr(value, "stride") and hasattr(value, "shape"):
        return {"tensor": [str(value.dtype), list(value.shape), list(value.stride())]}
    if isinstance(value, (list, tuple)):
        return type(value)(_normalized(v) for v in value)
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items()}
    return value


def _key(arguments) -> str | None:
    try:
        return json.dumps(acache.stable_repr(_normalized(arguments)), sort_keys=True)
    except acache.UnstableKeyError:
        return None


def _names(do_not_specialize) -> tuple[str, ...]:
    if do_not_specialize is None:
        return ()
    if isinstance(do_not_specialize, str):
        return (do_not_specialize,)
    try:
        names = tuple(do_not_specialize)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(f"tilex.autotune: do_not_specialize takes parameter names (a list of strings), got "
                        f"{do_not_specialize!r}")
    return names


class AutotunedFactory:
    """What ``@tilex.autotune(...)`` makes of a kernel factory or ``@tilex.jit`` function (see the module
    docstring): calling it returns the best configuration's compiled :class:`tilex.JITKernel` (an eager function:
    runs it and returns the outputs), with ``kernel.config`` and ``kernel.latency`` set; ``.compile(...)`` returns
    the kernel. ``tuner`` is the :class:`AutoTuner`, ``last_result`` the latest :class:`TuneResult`."""

    def __init__(self, factory, tuner: AutoTuner, do_not_specialize=None):
        inner = unwrap_factory(factory)
        functools.update_wrapper(self, inspect.unwrap(inner))
        self.__tilex_factory__ = factory
        self.tuner = tuner
        self._eager = inner if isinstance(inner, EagerFactory) else None
        self.do_not_specialize = _names(do_not_specialize)
        if self.do_not_specialize and self._eager is None:
            sig = tuner._signature()
            if sig is not None and not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
                unknown = [n for n in self.do_not_specialize if n not in sig.parameters]
                if unknown:
                    raise TypeError(f"tilex.autotune: do_not_specialize names {unknown}, which are not parameters "
                                    f"of {getattr(inner, '__qualname__', '?')}{sig}")
        self._tuner_cache: dict = {}  # tuning key -> (TuneResult, full key of the arguments it was tuned for)
        self._kernels: dict = {}      # (full key, configuration) -> kernel compiled without tuning
        self._lock = threading.RLock()
        self.last_result: TuneResult | None = None

    # -- a call, resolved
    def _resolve(self, args, kwargs) -> _Call:
        tuner = self.tuner
        configs = tuner._resolve_configs(args, kwargs)
        if self._eager is not None:
            return self._resolve_eager(args, kwargs, configs)
        sig = tuner._signature()
        tuned = tuner.tuned_keys(configs, sig)
        by_name = None
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
                given = [k for k in tuned if k in bound.arguments]
                bound.apply_defaults()
                by_name = dict(bound.arguments)
            except TypeError:  # the tuner reports it, naming the factory
                given = [k for k in tuned if k in kwargs]
        else:
            given = [k for k in tuned if k in kwargs]
        arguments = by_name if by_name is not None else {"args": list(args), "kwargs": kwargs}
        return _Call(args, kwargs, configs, tuned, given, self._tuning_key(arguments), _key(arguments), None,
                     by_name or {})

    def _resolve_eager(self, args, kwargs, configs) -> _Call:
        ef = self._eager
        tuned = self.tuner.tuned_keys(configs, ef.__signature__)
        positional = list(inspect.signature(ef.eager.func).parameters)[:len(args)]
        given = [k for k in tuned if k in kwargs or k in positional]
        if given:  # compiled as given: every parameter from the call or its default
            program, tensors = ef.arguments(args, kwargs)
        else:  # the first configuration stands in for the tuned parameters while the sizes are read
            program, tensors = ef.arguments(args, kwargs, assumed=split_config(configs[0])[0], omit=tuned)
        unknown = [n for n in self.do_not_specialize if n not in program and n not in ef.tensor_params
                   and n not in tuned]
        if unknown:
            raise TypeError(f"tilex.autotune: do_not_specialize names {unknown}, which are neither parameters nor "
                            f"T.const sizes of {ef.__name__}")
        return _Call((), program, configs, tuned, given, self._tuning_key(program), _key(program), tensors, program)

    def _tuning_key(self, arguments) -> str | None:
        if self.do_not_specialize:
            arguments = {k: v for k, v in arguments.items() if k not in self.do_not_specialize}
        return _key(arguments)

    # -- the kernel for a call
    def _kernel(self, call: _Call):
        if call.given:
            return self._untuned(call, None)
        res, tuned_for = self._tune(call)
        if tuned_for == call.full_key:
            return res.kernel
        # same tuning key, other do_not_specialize values: the best configuration, compiled for this call
        return self._untuned(call, res.config)

    def _tune(self, call: _Call):
        """(TuneResult, the full key of the arguments it was tuned for) for the call's tuning key."""
        with self._lock:
            entry = self._tuner_cache.get(call.key) if call.key is not None else None
            if entry is None:
                res = self.tuner._run(call.args, call.kwargs, configs=call.configs)
                entry = (res, call.full_key)
                if call.key is not None:
                    self._tuner_cache[call.key] = entry
            self.last_result = entry[0]
            return entry

    def _untuned(self, call: _Call, config):
        """The kernel of one configuration (None: the call's arguments as given), compiled once per call key."""
        memo = (call.full_key, _key(config)) if call.full_key is not None else None
        with self._lock:
            kernel = self._kernels.get(memo) if memo is not None else None
        if kernel is not None:
            return kernel
        try:
            kernel = self.tuner.compile_config(call.args, call.kwargs, config)
        except TypeError as e:
            if config is None:
                raise TypeError(f"tilex.autotune: tuned parameter(s) {call.given} were given, so nothing is tuned "
                                f"and the call is compiled as given: {e}") from None
            raise
        try:
            kernel.config = dict(config) if config is not None else \
                {k: call.by_name[k] for k in call.tuned if k in call.by_name}
            kernel.latency = None
        except AttributeError:
            pass
        if memo is not None:
            with self._lock:
                kernel = self._kernels.setdefault(memo, kernel)
        return kernel

    # -- the API
    def __call__(self, *args, **kwargs):
        """The tuned (or, with a tuned parameter given, the as-given) kernel for these arguments; for an eager
        function, run on the call's tensors: the outputs (``__return_kernel=True``: the kernel)."""
        return_kernel = bool(kwargs.pop(RETURN_KERNEL, False))
        call = self._resolve(args, kwargs)
        kernel = self._kernel(call)
        if self._eager is None or return_kernel:
            return kernel
        return self._eager.launch(kernel, call.tensors)

    def compile(self, *args, **kwargs):  # noqa: A003
        """The kernel for these arguments, tuned as a call is (an eager function: from size keywords and/or
        tensors, not run)."""
        kwargs.pop(RETURN_KERNEL, None)
        return self._kernel(self._resolve(args, kwargs))

    def tune_results(self, *args, **kwargs) -> TuneResult:
        """The :class:`TuneResult` for these arguments (tuned first if needed; tuned parameters given explicitly
        fix those parameters)."""
        kwargs.pop(RETURN_KERNEL, None)
        call = self._resolve(args, kwargs)
        if call.given:
            return self.tuner._run(call.args, call.kwargs, configs=call.configs)
        return self._tune(call)[0]

    def get_tir(self, *args, **kwargs):
        """The ``T.prim_func`` for these arguments: as given when they set a tuned parameter, else with the best
        configuration (tuned first if needed)."""
        kwargs.pop(RETURN_KERNEL, None)
        call = self._resolve(args, kwargs)
        config = None if call.given else self._tune(call)[0].config
        return self.tuner.program(call.args, call.kwargs, config)

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The CUDA source of :meth:`compile`'s kernel for these arguments."""
        return self.compile(*args, **kwargs).get_kernel_source()

    def cache_clear(self) -> None:
        """Forget the results and kernels of this process (the autotune disk cache is left alone)."""
        with self._lock:
            self._tuner_cache.clear()
            self._kernels.clear()

    def __repr__(self):
        return f"<tilex.autotune {getattr(self, '__qualname__', '?')}>"


def autotune(func=None, *, configs=None, warmup=25, rep=100, ref_prog=None, rtol=1e-2, atol=1e-2, supply=None,
             skip_check=False, cache_input_tensors=True, max_workers=None, timeout=None, out_idx=None,
             target="auto", pass_configs=None, cache=True, progress=True, max_shared_memory=None,
             parallel="auto", supply_prog=None, dynamic=None, top_k=None, record=True, cost_db=None,
             devices=None, runners=None, supply_type=None, early_stop=False, early_stop_factor=2.0,
             backend="event", manual_check_prog=None, max_mismatched_ratio=0.01, do_not_specialize=None):
    """Decorator: tune a kernel factory (or an ``@tilex.jit`` function, lazy or eager) over ``configs``; calling
    the result gives the best configuration's kernel (see the module docstring for the rules).

    ::

        @tilex.autotune(configs=[dict(bm=128, bn=128, bk=64, num_stages=3, threads=128), ...],
                        ref_prog=lambda A, B: A @ B, out_idx=[2])
        def matmul(M, N, K, bm=128, bn=128, bk=32, num_stages=3, threads=128): ...

        kernel = matmul(4096, 4096, 4096)   # tuned (or the cached best); kernel.config is the choice
        matmul.tune_results(4096, 4096, 4096).table()

    ``configs``: a list of dicts of factory keyword arguments (each may hold ``"pass_configs"``, compile options of
    its own), a dict of lists (their product) or a callable returning either. ``out_idx``, ``target``,
    ``pass_configs`` go to ``tilex.compile``; or stack ``@tilex.autotune(...)`` over ``@tilex.jit(out_idx=...)``,
    whose compile arguments the tuner then uses (arguments given here win). See :class:`AutoTuner` and
    :mod:`tilex.autotuner.tuner` for the rest.

    ``dynamic=["m"]`` (or ``{"m": largest value}``): when the factory is called with ``T.dynamic("m")`` for a
    size, every configuration is compiled once with it symbolic, profiled at wave-aligned values of it, and the
    result's kernel is a :class:`~tilex.autotuner.dispatch.DynamicKernel` that picks the configuration for each
    call's value from WaveTune's tables (saved in the autotune cache).

    Every benchmark run is recorded in a local measurement database (``record``; ``cost_db`` names its file,
    default ``<autotune cache>/measurements.jsonl``). ``top_k=5`` measures only the five configurations an XGBoost
    cost model trained on that database ranks fastest (:mod:`tilex.autotuner.cost_model`; all of them until it
    holds measurements of a few other problems).

    Configurations are timed on every visible GPU of the host side by side (``devices``: a count or a list of
    indices instead); ``runners=[RemoteRunner(...)]`` times them on other machines through TVM's RPC tracker.

    TileLang's ``supply_type`` (how inputs are filled when no ``supply`` is given), ``early_stop`` /
    ``early_stop_factor`` (:meth:`AutoTuner.set_early_stop`), ``backend`` (the timing method),
    ``max_mismatched_ratio`` (the share of an output's elements that may differ from ``ref_prog``'s, 1 % by
    default), ``manual_check_prog`` (``manual_check_prog(outputs, ref_outputs)`` judges instead; a configuration
    is wrong when it raises) and ``do_not_specialize`` (parameter names that do not make a new tuning key) are taken
    too; ``with tilex.autotuner.set_autotune_inputs(...)`` around the call gives the inputs.
    """
    if supply is not None and supply_prog is not None:
        raise TypeError("pass supply or supply_prog, not both")
    names = _names(do_not_specialize)

    def wrap(fn):
        tuner = AutoTuner(fn, configs, out_idx=out_idx, target=target, pass_configs=pass_configs, warmup=warmup,
                          rep=rep, ref_prog=ref_prog, supply=supply if supply is not None else supply_prog,
                          rtol=rtol, atol=atol, skip_check=skip_check, cache_input_tensors=cache_input_tensors,
                          max_workers=max_workers, timeout=timeout, cache=cache, progress=progress,
                          max_shared_memory=max_shared_memory, parallel=parallel, dynamic=dynamic, top_k=top_k,
                          record=record, cost_db=cost_db, devices=devices, runners=runners,
                          supply_type=supply_type, early_stop=early_stop, early_stop_factor=early_stop_factor,
                          backend=backend, manual_check_prog=manual_check_prog,
                          max_mismatched_ratio=max_mismatched_ratio)
        return AutotunedFactory(fn, tuner, names)

    if func is not None:
        return wrap(func)
    return wrap
