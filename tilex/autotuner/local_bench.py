"""The benchmark phase on this host's GPUs: check each compiled configuration against ``ref_prog`` and time it.

Consumes: ConfigResults whose ``kernel`` is compiled, a supply of inputs and the tuner's check and timing settings.
Produces: each result's status (``"ok"``, ``"wrong"`` or ``"runtime_error"``), ``max_error``, ``latency`` and
``device``; with ``time_it=False`` only the check (a result that passes keeps status ``"compiled"``, for the
remote machines to time). Items run on one thread per GPU (:func:`~tilex.autotuner.devices.run_on_devices`), so
inputs and reference outputs are made once per device and input signature; ``ref_prog`` itself is timed once.
An output matches ``ref_prog``'s when at most ``max_mismatched_ratio`` of its elements differ beyond the
tolerances (:func:`~tilex.autotuner.inputs.compare_outputs`); ``manual_check_prog(outputs, ref_outputs)`` decides
instead when given (:func:`~tilex.autotuner.inputs.manual_check`).
With ``early_stop_factor`` (TileLang's early stop), a configuration whose five-call estimate exceeds that factor
times the best latency measured so far (on any device) gets the estimate as its latency without further timing.
"""
from __future__ import annotations

import logging
import threading

from . import bench
from .devices import run_on_devices
from .inputs import compare_outputs, manual_check
from .results import OK, RUNTIME_ERROR, WRONG, error_text, reason_of

__all__ = ["LocalBench"]

logger = logging.getLogger("tilex.autotuner")


class LocalBench:
    """Checks and times configurations on local GPUs (see the module docstring)."""

    def __init__(self, supply, ref_prog, check: bool, rtol: float, atol: float, warmup: float, rep: float,
                 cache_inputs: bool = True, time_it: bool = True, progress=None,
                 early_stop_factor: float | None = None, backend: str = "event", manual_check_prog=None,
                 max_mismatched_ratio: float = 0.0):
        self.supply, self.ref_prog, self.check = supply, ref_prog, check
        self.rtol, self.atol, self.warmup, self.rep = rtol, atol, warmup, rep
        self.cache_inputs, self.time_it, self.progress = cache_inputs, time_it, progress
        self.ref_latency = None  # ms of ref_prog on the first inputs made, when it is given
        self._inputs: dict = {}  # (device, input signature) -> (inputs, reference outputs)
        self._lock = threading.Lock()
        self._ref_timed = False
        self.early_stop_factor, self.backend = early_stop_factor, backend
        self.manual_check_prog, self.max_mismatched_ratio = manual_check_prog, max_mismatched_ratio
        self.best_latency = None  # the lowest latency measured so far (early stop's baseline)

    def run(self, todo, devices) -> None:
        run_on_devices(todo, self.measure, devices)

    def _inputs_for(self, kernel, dev):
        import torch

        specs = [p for p in kernel.params if not p.is_output]
        sig = (dev, tuple((p.name, p.kind, p.dtype, tuple(map(str, p.shape))) for p in specs))
        entry = self._inputs.get(sig) if self.cache_inputs else None
        if entry is not None:
            return entry
        inputs = list(self.supply(specs))
        ref = None
        if self.check:
            ref = self.ref_prog(*inputs)
            torch.cuda.synchronize()
        entry = (inputs, ref)
        if self.cache_inputs:
            self._inputs[sig] = entry
        with self._lock:
            first = self.ref_prog is not None and not self._ref_timed
            self._ref_timed = True
        if first:
            try:
                self.ref_latency = bench.do_bench(lambda: self.ref_prog(*inputs), self.warmup, self.rep,
                                                  backend=self.backend)
            except Exception as e:  # noqa: BLE001
                logger.info("tilex autotune: timing ref_prog failed: %s", e)
        return entry

    def measure(self, r, dev) -> None:
        """Check (and time) one configuration on device `dev`, filling its result."""
        import torch

        kernel = r.kernel
        try:
            inputs, ref = self._inputs_for(kernel, dev)
            out = kernel(*inputs)
            torch.cuda.synchronize()
            if self.check:
                if self.manual_check_prog is not None:
                    reason = manual_check(self.manual_check_prog, out, ref)
                else:
                    reason, r.max_error = compare_outputs(out, ref, self.rtol, self.atol, self.max_mismatched_ratio)
                if reason:
                    r.status, r.reason = WRONG, reason
                    return
            del out
            if self.time_it:
                with self._lock:
                    best = self.best_latency
                baseline = best * self.early_stop_factor if self.early_stop_factor and best is not None else None
                extra = {"early_stop_baseline": baseline} if baseline is not None else {}
                r.latency = bench.do_bench(lambda: kernel(*inputs), self.warmup, self.rep, backend=self.backend,
                                           **extra)
                r.status, r.device = OK, dev
                with self._lock:
                    if self.best_latency is None or r.latency < self.best_latency:
                        self.best_latency = r.latency
        except Exception as e:  # noqa: BLE001
            r.status, r.reason, r.error = RUNTIME_ERROR, reason_of(e), error_text(e)
        finally:
            if self.progress is not None:
                self.progress.update(1)
