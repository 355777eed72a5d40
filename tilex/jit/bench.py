"""Timing CUDA callables with CUDA events and an L2 flush between repetitions (no triton needed)."""
from __future__ import annotations

import statistics
from typing import Callable

__all__ = ["do_bench", "L2_FLUSH_BYTES"]

#: Size of the buffer zeroed before every timed repetition: larger than the L2 of any current GPU
#: (H100/H200: 50 MB, B200: 126 MB), so every repetition starts with a cold L2.
L2_FLUSH_BYTES = 256 * 1024 * 1024

_flush_buffers: dict = {}


def _flush_buffer(device):
    import torch

    key = str(device)
    buf = _flush_buffers.get(key)
    if buf is None:
        buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        _flush_buffers[key] = buf
    return buf


def do_bench(fn: Callable[[], object], warmup: float = 25, rep: float = 100, *, n_warmup: int | None = None,
             n_repeat: int | None = None, flush_l2: bool = True, return_mode: str = "median",
             device=None):
    """Time ``fn()`` on the current CUDA device and return milliseconds per call (the median by default).

    ``warmup`` and ``rep`` are time budgets in **milliseconds**, as in ``triton.testing.do_bench``: ``fn`` is run
    five times to estimate its duration, then ``max(1, warmup / estimate)`` untimed and ``max(1, rep / estimate)``
    timed repetitions follow. ``n_warmup`` / ``n_repeat`` give the counts directly instead.

    Each timed repetition is bracketed by its own pair of CUDA events on the current stream. Before each one a
    256 MB buffer is zeroed (``flush_l2``), so the call finds a cold L2 and the host-side cost of launching ``fn``
    overlaps with the flush instead of being measured.

    ``return_mode``: ``"median"`` (default), ``"mean"``, ``"min"``, ``"max"`` or ``"all"`` (the list of times).
    """
    import torch

    if return_mode not in ("median", "mean", "min", "max", "all"):
        raise ValueError(f"do_bench: return_mode must be median/mean/min/max/all, got {return_mode!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("tilex do_bench needs a CUDA GPU (torch sees none)")
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    cache = _flush_buffer(device) if flush_l2 else None

    fn()
    torch.cuda.synchronize()

    if n_warmup is None or n_repeat is None:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            if cache is not None:
                cache.zero_()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 5, 1e-6)
        if n_warmup is None:
            n_warmup = max(1, int(warmup / estimate))
        if n_repeat is None:
            n_repeat = max(1, int(rep / estimate))
    n_warmup = max(0, int(n_warmup))
    n_repeat = max(1, int(n_repeat))

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for _ in range(n_warmup):
        fn()
    for i in range(n_repeat):
        if cache is not None:
            cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    if return_mode == "all":
        return times
    if return_mode == "mean":
        return statistics.fmean(times)
    if return_mode == "min":
        return min(times)
    if return_mode == "max":
        return max(times)
    return statistics.median(times)
