"""tilex.autotuner: pick the fastest configuration of a kernel factory.

    @tilex.autotune(configs=[dict(bm=128, bn=128, bk=64, num_stages=3, threads=128), ...],
                    ref_prog=lambda A, B: A @ B, out_idx=[2])
    def matmul(M, N, K, bm=128, bn=128, bk=32, num_stages=3, threads=128): ...  # returns a T.prim_func

    kernel = matmul(4096, 4096, 4096)      # compiled JITKernel of the best configuration; kernel.config
    print(matmul.tune_results(4096, 4096, 4096).table())

or ``AutoTuner.from_kernel(factory, configs).set_compile_args(out_idx=...).set_profile_args(ref_prog=...)
.run(*factory_args)``. ``@tilex.autotune(configs=...)`` may also be stacked over ``@tilex.jit(out_idx=...)``
(TileLang's pattern); the tuner then takes ``out_idx``, ``target`` and ``pass_configs`` from it.

Modules: :mod:`~tilex.autotuner.tuner` (AutoTuner; how tuning works), :mod:`~tilex.autotuner.decorator` (the
``autotune`` decorator: what a call tunes, eager functions, ``do_not_specialize``), :mod:`~tilex.autotuner.configs`
(configuration lists, a configuration's own ``pass_configs``),
:mod:`~tilex.autotuner.workers` (the compile phase in worker processes or threads), :mod:`~tilex.autotuner.results`
(statuses, per-configuration results, tables), :mod:`~tilex.autotuner.inputs` (benchmark inputs, output checks),
:mod:`~tilex.autotuner.bench` (:func:`do_bench`, L2 flushed; the timing core is :mod:`tilex.jit.bench`),
:mod:`~tilex.autotuner.smem` (shared memory per block), :mod:`~tilex.autotuner.cache`
(``$TILEX_CACHE_DIR/autotune``; :func:`clear_cache`), :mod:`~tilex.autotuner.capture` (``with
set_autotune_inputs(a, b):`` tunes on those inputs).

``tilex.autotuner.jit`` is the ``@tilex.jit`` decorator itself (:func:`tilex.jit.decorator.jit`), kept here for
code written when it lived in this package.
"""
from tilex.jit.decorator import jit

from .bench import do_bench
from .cache import autotune_cache_dir, clear_cache
from .capture import get_autotune_inputs, set_autotune_inputs
from .inputs import default_supply
from .results import (BUILD_ERROR, COMPILED, OK, RUNTIME_ERROR, SKIPPED, SMEM, TIMEOUT, WRONG, AutotuneError,
                      CompileReport, ConfigResult, TuneResult, format_table)
from .smem import device_shared_memory_limit, shared_memory_bytes, shared_memory_usage
from .decorator import AutotunedFactory, autotune
from .tuner import AutoTuner

__all__ = ["autotune", "AutoTuner", "AutotunedFactory", "AutotuneError", "TuneResult", "ConfigResult",
           "CompileReport", "do_bench", "clear_cache", "autotune_cache_dir", "shared_memory_bytes",
           "device_shared_memory_limit", "shared_memory_usage", "default_supply", "format_table", "jit",
           "OK", "COMPILED", "BUILD_ERROR", "SMEM", "TIMEOUT", "WRONG", "RUNTIME_ERROR", "SKIPPED",
           "set_autotune_inputs", "get_autotune_inputs"]
