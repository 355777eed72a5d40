"""The benchmark phase on other machines: ``AutoTuner(..., runners=[RemoteRunner(...), ...])``.

Consumes: the compiled configurations of a compile phase (their kernels) and :class:`~tilex.autotuner.rpc.
RemoteRunner` s, each naming a TVM RPC tracker and a server key. Produces: each configuration's latency (ms, the
median of the remote repeats), measured by TVM's remote ``time_evaluator`` on whichever server the tracker hands
out, the configurations spread over one session per runner (:func:`~tilex.autotuner.rpc.map_measure`).

Each kernel travels as the shared library ``JITKernel.export_library`` writes (the cubin inside when it was
compiled on a GPU machine or found in the kernel cache). The remote machine allocates the arguments (random
values) from their static shapes, so a kernel with a symbolic size or a scalar parameter cannot be timed this way.
Results are not checked against ``ref_prog`` remotely: the tuner checks each kernel on a local GPU first, or the
caller passes ``skip_check=True``.
"""
from __future__ import annotations

import os
import statistics
import tempfile

from . import rpc
from .results import OK, RUNTIME_ERROR, AutotuneError, error_text, reason_of

__all__ = ["arg_specs", "benchmark_remote"]


def arg_specs(params) -> list:
    """``(shape, dtype)`` per parameter, in order (outputs included: the exported function takes them all), for
    :meth:`RemoteRunner.measure`. Raises AutotuneError naming a parameter that has no static shape."""
    specs = []
    for p in params:
        if p.kind != "buffer":
            raise AutotuneError(f"tilex autotune: parameter '{p.name}' is a scalar; timing on remote machines "
                                f"needs every argument to be a tensor of static shape")
        if any(not isinstance(d, int) for d in p.shape):
            raise AutotuneError(f"tilex autotune: parameter '{p.name}' has a symbolic shape {p!r}; timing on "
                                f"remote machines needs static shapes")
        specs.append((tuple(p.shape), p.dtype))
    return specs


def benchmark_remote(todo, runners, rep: float, repeat: int = 3, workdir: str | None = None) -> None:
    """Time the kernels of ``todo`` (ConfigResults with ``kernel`` set) on ``runners``, filling each result's
    ``latency`` and ``status`` (``"ok"``, or ``"runtime_error"`` with the remote error). ``rep`` is the time
    budget in ms of one configuration's measurement, split over ``repeat`` repeats."""
    if not runners:
        raise AutotuneError("tilex autotune: runners is empty")
    with tempfile.TemporaryDirectory(prefix="tilex-remote-", dir=workdir) as d:
        jobs, timed = [], []
        for r in todo:
            try:
                specs = arg_specs(r.kernel.params)
                lib = r.kernel.export_library(os.path.join(d, f"config{r.index}.so"))
            except Exception as e:  # noqa: BLE001
                r.status, r.reason, r.error = RUNTIME_ERROR, reason_of(e), error_text(e)
                continue
            jobs.append(dict(lib_path=lib, func_name=r.kernel.symbol, arg_specs=specs, number=1, repeat=repeat,
                             min_repeat_ms=max(rep / repeat, 0.0)))
            timed.append(r)
        if not jobs:
            return
        for r, out in zip(timed, rpc.map_measure(runners, jobs, return_exceptions=True)):
            if isinstance(out, BaseException):
                r.status, r.reason, r.error = RUNTIME_ERROR, reason_of(out), error_text(out)
            else:
                r.latency = statistics.median(out)
                r.status, r.device = OK, "remote"
