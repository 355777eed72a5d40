"""``do_bench`` with TileLang's signature (``tilelang.profiler.do_bench``), on tilex's timing core
:func:`tilex.jit.bench.do_bench`."""
from __future__ import annotations

from typing import Callable

from tilex.jit import bench

__all__ = ["do_bench"]


def do_bench(fn: Callable, warmup: float = 25, rep: float = 100, _n_warmup: int = 0, _n_repeat: int = 0,
             quantiles: list | None = None, fast_flush: bool = True, backend: str = "event",
             return_mode: str = "mean", device=None, cache_size: int = 256,
             early_stop_baseline: float | None = None):
    """Milliseconds per call of ``fn()`` on a CUDA GPU, L2 flushed before each timed call.

    ``warmup`` / ``rep``: time budgets in ms for the untimed and timed repetitions (their counts come from a
    five-call estimate) unless ``_n_warmup`` / ``_n_repeat`` (> 0) give the counts. ``backend``: ``"event"``
    (CUDA events around each call), ``"cupti"`` (the GPU time of the kernels launched, flushes excluded; one mean)
    or ``"cudagraph"`` (the calls replayed from one CUDA graph). ``quantiles`` (e.g. ``[0.5, 0.2, 0.8]``) give a
    list of times (one number for one quantile); else ``return_mode``: ``"mean"`` (default), ``"median"``,
    ``"min"`` or ``"max"``. ``device``: the CUDA device to time on (default the current one). ``cache_size``: the
    flush buffer in MB, zeroed as int32 words with ``fast_flush`` (else bytes). ``early_stop_baseline`` (ms): an
    estimate above it is returned without timing further. Raises RuntimeError without a CUDA GPU, ValueError for
    a bad argument."""
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
        raise ValueError(f"do_bench: cache_size is the flush buffer in MB (an int >= 0), got {cache_size!r}")
    return bench.do_bench(fn, warmup, rep, n_warmup=_n_warmup, n_repeat=_n_repeat, quantiles=quantiles,
                          backend=backend, return_mode=return_mode, device=device,
                          early_stop_baseline=early_stop_baseline, flush_l2=cache_size > 0,
                          flush_bytes=cache_size * 1024 * 1024, fast_flush=fast_flush)
