"""Timing CUDA callables with an L2 flush between repetitions (no triton needed).

Three ways of timing a repetition (``backend``): ``"event"`` (a pair of CUDA events around each call),
``"cupti"`` (the GPU time of the kernels each call launches, read from torch's profiler, flushes excluded) and
``"cudagraph"`` (the calls captured in one CUDA graph, replayed; the graph's time over the calls).
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import warnings
from typing import Callable

__all__ = ["do_bench", "L2_FLUSH_BYTES", "BACKENDS", "RETURN_MODES"]

#: Size of the buffer zeroed before every timed repetition: larger than the L2 of any current GPU
#: (H100/H200: 50 MB, B200: 126 MB), so every repetition starts with a cold L2.
L2_FLUSH_BYTES = 256 * 1024 * 1024

BACKENDS = ("event", "cupti", "cudagraph")
RETURN_MODES = ("median", "mean", "min", "max", "all")

#: The profiler range around each flush in the ``"cupti"`` backend (its GPU time is subtracted).
_FLUSH_RANGE = "tilex.l2_flush"
#: Graph replays the ``"cudagraph"`` backend times.
_GRAPH_REPLAYS = 10

_flush_buffers: dict = {}


def _flush_buffer(device, nbytes: int = L2_FLUSH_BYTES, fast: bool = True):
    """The zeroed buffer: int32 words (``fast``) or bytes, ``nbytes`` in all, one per device and size."""
    import torch

    key = (str(device), int(nbytes), bool(fast))
    buf = _flush_buffers.get(key)
    if buf is None:
        dt = torch.int32 if fast else torch.int8
        buf = torch.empty(int(nbytes) // dt.itemsize, dtype=dt, device=device)
        _flush_buffers[key] = buf
    return buf


def _check_args(backend, return_mode, quantiles, early_stop_baseline, flush_bytes):
    if backend not in BACKENDS:
        raise ValueError(f"do_bench: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if return_mode not in RETURN_MODES:
        raise ValueError(f"do_bench: return_mode must be median/mean/min/max/all, got {return_mode!r}")
    if quantiles is not None:
        qs = list(quantiles) if isinstance(quantiles, (list, tuple)) else None
        if not qs or not all(isinstance(q, (int, float)) and not isinstance(q, bool) and 0 <= q <= 1 for q in qs):
            raise ValueError(f"do_bench: quantiles must be a non-empty list of numbers in [0, 1], got {quantiles!r}")
        if backend == "cupti":
            raise ValueError("do_bench: backend='cupti' measures one total time; quantiles need 'event' or "
                             "'cudagraph'")
    if early_stop_baseline is not None and not (isinstance(early_stop_baseline, (int, float))
                                                and early_stop_baseline >= 0):
        raise ValueError(f"do_bench: early_stop_baseline must be a non-negative number of ms, got "
                         f"{early_stop_baseline!r}")
    if int(flush_bytes) < 0:
        raise ValueError(f"do_bench: the flush buffer size must be >= 0 bytes, got {flush_bytes}")


def _summary(times: list, quantiles, return_mode):
    if quantiles is not None:
        import torch

        vals = torch.quantile(torch.tensor(times, dtype=torch.float32),
                              torch.tensor(list(quantiles), dtype=torch.float32)).tolist()
        return vals[0] if len(vals) == 1 else vals
    if return_mode == "all":
        return list(times)
    if return_mode == "mean":
        return statistics.fmean(times)
    if return_mode == "min":
        return min(times)
    if return_mode == "max":
        return max(times)
    return statistics.median(times)


def _cuda_device_index(device):
    """``device`` (None, an int, "cuda:1", a torch.device) as a CUDA device index, or None for the current."""
    import torch

    if device is None:
        return None
    if isinstance(device, bool):
        raise ValueError(f"do_bench: device must be a CUDA device, got {device!r}")
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"do_bench: device must be a CUDA device, got {dev}")
    return torch.cuda.current_device() if dev.index is None else dev.index


def do_bench(fn: Callable[[], object], warmup: float = 25, rep: float = 100, *, n_warmup: int | None = None,
             n_repeat: int | None = None, flush_l2: bool = True, return_mode: str = "median", device=None,
             backend: str = "event", quantiles=None, early_stop_baseline: float | None = None,
             flush_bytes: int = L2_FLUSH_BYTES, fast_flush: bool = True):
    """Time ``fn()`` on a CUDA device (the current one by default) and return milliseconds per call.

    ``warmup`` and ``rep`` are time budgets in **milliseconds**, as in ``triton.testing.do_bench``: ``fn`` is run
    five times (each after an L2 flush) to estimate its duration, then ``max(1, warmup / estimate)`` untimed and
    ``max(1, rep / estimate)`` timed repetitions follow. ``n_warmup`` / ``n_repeat`` (None or 0: from the budget)
    give the counts directly instead. With ``early_stop_baseline`` (ms), an estimate above it is returned at once
    (for every quantile asked), without warming up or timing further: the autotuner's early stop.

    Before each timed repetition a ``flush_bytes`` buffer (256 MB) is zeroed (``flush_l2``; ``fast_flush``: as
    int32 words rather than bytes), so the call finds a cold L2 and the host-side cost of launching ``fn`` overlaps
    with the flush instead of being measured. ``backend``: see the module docstring (``"cudagraph"`` flushes
    before each graph replay only).

    The result: ``quantiles`` (a list of numbers in [0, 1]) give the times at those quantiles (one number for a
    one-element list); else ``return_mode``: ``"median"`` (default), ``"mean"``, ``"min"``, ``"max"`` or ``"all"``
    (the list of times). ``"cupti"`` gives one mean. Raises RuntimeError when torch sees no CUDA GPU.
    """
    import torch

    _check_args(backend, return_mode, quantiles, early_stop_baseline, flush_bytes)
    if not torch.cuda.is_available():
        raise RuntimeError("tilex do_bench needs a CUDA GPU (torch sees none)")
    index = _cuda_device_index(device)
    scope = torch.cuda.device(index) if index is not None else contextlib.nullcontext()
    with scope:
        return _bench(fn, warmup, rep, n_warmup, n_repeat, flush_l2, return_mode, backend, quantiles,
                      early_stop_baseline, flush_bytes, fast_flush)


def _bench(fn, warmup, rep, n_warmup, n_repeat, flush_l2, return_mode, backend, quantiles, early_stop_baseline,
           flush_bytes, fast_flush):
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    cache = _flush_buffer(device, flush_bytes, fast_flush) if flush_l2 and flush_bytes else None

    def flush():
        if cache is not None:
            cache.zero_()

    fn()
    torch.cuda.synchronize()

    n_warmup = n_warmup or None
    n_repeat = n_repeat or None
    if n_warmup is None or n_repeat is None or early_stop_baseline is not None:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            flush()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 5, 1e-6)
        if early_stop_baseline is not None and estimate > early_stop_baseline:
            if quantiles is not None:
                return estimate if len(quantiles) == 1 else [estimate] * len(quantiles)
            return [estimate] if return_mode == "all" else estimate
        if n_warmup is None:
            n_warmup = max(1, int(warmup / estimate))
        if n_repeat is None:
            n_repeat = max(1, int(rep / estimate))
    n_warmup = max(0, int(n_warmup))
    n_repeat = max(1, int(n_repeat))

    for _ in range(n_warmup):
        fn()
    if backend == "cupti":
        return _time_with_profiler(fn, flush, n_repeat)
    if backend == "cudagraph":
        times = _time_with_graph(fn, flush, n_repeat)
    else:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
        for i in range(n_repeat):
            flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return _summary(times, quantiles, return_mode)


@contextlib.contextmanager
def _quiet():
    """Silence what CUPTI and the profiler print on the process's stdout / stderr (file descriptors 1 and 2)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        try:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _time_with_profiler(fn, flush, n_repeat) -> float:
    """Mean GPU time per call of the kernels ``fn`` launches (torch's profiler over CUPTI): the device time of
    every kernel of ``n_repeat`` flushed calls, less the flushes' (each run inside a named range)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    def calls():
        for _ in range(n_repeat):
            with record_function(_FLUSH_RANGE):
                flush()
            fn()

    with _quiet(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        calls()  # the same calls once untraced, so the traced ones find everything set up
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            calls()
            torch.cuda.synchronize()
        events = list(prof.events())
    total = flushes = 0.0
    for ev in events:
        if getattr(getattr(ev, "device_type", None), "name", "") != "CUDA":
            continue
        if not ev.is_user_annotation:
            total += ev.self_device_time_total
        elif ev.key == _FLUSH_RANGE:
            flushes += ev.self_device_time_total
    return (total - flushes) / n_repeat * 1e-3  # microseconds -> milliseconds


def _time_with_graph(fn, flush, n_repeat) -> list:
    """Per-call times of ``n_repeat`` calls captured in one CUDA graph (on a side stream) and replayed
    :data:`_GRAPH_REPLAYS` times, each replay after a flush."""
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n_repeat):
                fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(_GRAPH_REPLAYS)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(_GRAPH_REPLAYS)]
        for i in range(_GRAPH_REPLAYS):
            flush()
            starts[i].record()
            graph.replay()
            ends[i].record()
        torch.cuda.synchronize()
    return [s.elapsed_time(e) / n_repeat for s, e in zip(starts, ends)]
