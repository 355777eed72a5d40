"""Measuring on every GPU of the host at once: the tuner's benchmark and dynamic-profile phases hand their work
items to one thread per GPU, each pulling the next item when it is done (so a slow configuration does not hold
up the others).

Threads, not processes: the compiled kernels, their inputs and the reference outputs are already in this process,
and a thread's launches go to its own device (``torch.cuda.set_device`` is per thread). The host work per timed
repetition (an L2 flush, two events, one launch: tens of microseconds) is small beside a repetition's GPU time,
so the threads keep every GPU busy. Timings are CUDA events, so they are GPU time either way.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

__all__ = ["bench_devices", "run_on_devices"]


def bench_devices(devices=None) -> list[int]:
    """The CUDA devices to measure on: for ``None`` or ``"all"`` every visible GPU of the current one's model
    (timings of different models do not compare), the first ``n`` for an int, or the given indices. Raises
    ValueError for a device that does not exist or a list mixing GPU models."""
    import torch

    count = torch.cuda.device_count()
    if devices is None or devices == "all":
        if count == 0:
            return []
        model = torch.cuda.get_device_name(torch.cuda.current_device())
        return [d for d in range(count) if torch.cuda.get_device_name(d) == model]
    if isinstance(devices, bool):
        raise ValueError(f"tilex autotune: devices must be 'all', a count or a list of GPU indices, got {devices!r}")
    if isinstance(devices, int):
        if not 1 <= devices <= count:
            raise ValueError(f"tilex autotune: devices={devices} but {count} GPU(s) are visible")
        out = list(range(devices))
    else:
        out = [int(d) for d in devices]
    if not out:
        raise ValueError("tilex autotune: devices is empty")
    bad = [d for d in out if not 0 <= d < count]
    if bad:
        raise ValueError(f"tilex autotune: GPU index(es) {bad} out of range: {count} GPU(s) are visible")
    models = {torch.cuda.get_device_name(d) for d in out}
    if len(models) > 1:
        raise ValueError(f"tilex autotune: devices {out} mix GPU models {sorted(models)}; their timings do not "
                         f"compare")
    return out


def _cuda_device(dev):
    import torch

    return torch.cuda.device(dev)


def run_on_devices(items: Sequence, fn: Callable, devices: Sequence[int], bind: Callable | None = None) -> list:
    """``[fn(item, device) for item in items]``, each item run on one of ``devices`` (one thread per entry of
    ``devices``; an index may repeat to run two threads on one GPU) inside ``bind(device)`` (a context manager
    making it the thread's current device; default ``torch.cuda.device``). Returns the results in the order of
    ``items``. The first exception raised by ``fn`` stops the other threads after their current item and is
    raised again here."""
    items = list(items)
    bind = bind or _cuda_device
    if not devices:
        raise ValueError("run_on_devices: no devices")
    if len(devices) == 1 or len(items) <= 1:
        with bind(devices[0]):
            return [fn(item, devices[0]) for item in items]
    results: list = [None] * len(items)
    lock = threading.Lock()
    state = {"next": 0, "error": None}

    def worker(dev):
        try:
            with bind(dev):
                while True:
                    with lock:
                        k = state["next"]
                        if k >= len(items) or state["error"] is not None:
                            return
                        state["next"] = k + 1
                    results[k] = fn(items[k], dev)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            with lock:
                if state["error"] is None:
                    state["error"] = e

    threads = [threading.Thread(target=worker, args=(d,), name=f"tilex-bench-gpu{d}", daemon=True)
               for d in devices[:len(items)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if state["error"] is not None:
        raise state["error"]
    return results
