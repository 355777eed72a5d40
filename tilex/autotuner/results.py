"""What tuning records: the status of each configuration, its result, the tables, and the one-line reasons.

A configuration that fails is recorded with a status and a reason instead of raising: ``"build error"``
(TileOpError, LayoutConflictError, nvcc errors, ...), ``"shared memory"`` (more than the device's
``shared_memory_per_block_optin``), ``"timeout"``, ``"wrong result"`` (with the largest error) or
``"runtime error"``. Only when *every* configuration fails does tuning raise :class:`AutotuneError`, whose
message holds the table of reasons (:func:`format_table`).
"""
from __future__ import annotations

import traceback
from typing import Sequence

from tilex.engine.nvcc import first_error_line
from tilex.jit import TilexCompileError

__all__ = ["OK", "COMPILED", "BUILD_ERROR", "SMEM", "TIMEOUT", "WRONG", "RUNTIME_ERROR", "SKIPPED", "AutotuneError",
           "ConfigResult", "TuneResult", "CompileReport", "format_table", "format_config", "reason_of", "error_text"]

# statuses
OK = "ok"                          # checked (or check skipped) and timed
COMPILED = "compiled"              # compile phase succeeded, nvcc included (on a machine without a GPU too); not
#                                    benchmarked yet
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
# errors -> reasons
# --------------------------------------------------------------------------------------------------
def reason_of(exc: BaseException) -> str:
    """One line (at most 300 characters) saying why a configuration failed: nvcc's first error line for a
    :class:`tilex.jit.TilexCompileError`, else ``"ExceptionType: first line of the message"``."""
    if isinstance(exc, TilexCompileError):
        text = exc.stderr or str(exc)
        line = first_error_line(text) or (text.strip().splitlines() or ["nvcc failed"])[0]
        reason = f"nvcc: {line}"
    else:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        reason = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return reason if len(reason) <= _REASON_CHARS else reason[: _REASON_CHARS - 3] + "..."


def error_text(exc: BaseException) -> str:
    """The full error with its traceback (the last 8000 characters)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-8000:]


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------
def format_config(cfg) -> str:
    """A configuration as ``"bm=128 bn=128 ..."`` (anything that is not a dict as ``str``)."""
    if isinstance(cfg, dict):
        return " ".join(f"{k}={v}" for k, v in cfg.items())
    return str(cfg)


class ConfigResult:
    """What happened to one configuration.

    ``config`` (dict), ``index`` (position in the configuration list), ``status`` (one of the status strings),
    ``reason`` (one line, empty when fine), ``error`` (the full error text), ``latency`` (ms, median),
    ``compile_time`` (s), ``smem`` (bytes of shared memory per block, when known), ``max_error`` (largest
    absolute difference to ``ref_prog``), ``kernel`` (the :class:`tilex.JITKernel`, when compiled), ``device``
    (the CUDA device it was timed on).
    """

    __slots__ = ("index", "config", "status", "reason", "error", "latency", "compile_time", "smem", "max_error",
                 "kernel", "from_kernel_cache", "device")

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
        self.device = None

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
        return f"ConfigResult(#{self.index} {format_config(self.config)}: {self.status}{lat}{why})"


def format_table(results: Sequence[ConfigResult], best_index: int | None = None) -> str:
    """A plain-text table of ``results`` (one row per configuration)."""
    rows = [("", "#", "config", "status", "ms", "smem KiB", "compile s", "reason")]
    for r in results:
        rows.append(("*" if r.index == best_index else "", str(r.index), format_config(r.config), r.status,
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
    autotune cache, nothing was benchmarked), ``cache_key`` / ``cache_path``, ``dynamic`` (the
    :class:`~tilex.autotuner.dispatch.DynamicKernel` when tuned with ``dynamic=``; ``best`` is then the
    configuration that serves the most values of the size)."""

    def __init__(self, best: ConfigResult, results: Sequence[ConfigResult], ref_latency: float | None = None,
                 from_cache: bool = False, cache_key: str | None = None, cache_path: str | None = None,
                 dynamic=None):
        self.dynamic = dynamic  # a tilex.autotuner.dispatch.DynamicKernel when tuned over a dynamic size
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
        """The best configuration's JITKernel, or the DynamicKernel choosing one per call (``dynamic=``)."""
        return self.dynamic if self.dynamic is not None else self.best.kernel

    def table(self) -> str:
        return format_table(self.results, self.best.index)

    def __repr__(self):
        lat = "?" if self.latency is None else f"{self.latency:.4f} ms"
        src = ", from cache" if self.from_cache else ""
        n_ok = sum(r.ok for r in self.results)
        return (f"<TuneResult best #{self.best.index} {format_config(self.config)} ({lat}{src}); "
                f"{n_ok}/{len(self.results)} configs ok>")


class CompileReport:
    """Output of the compile phase: ``results`` (one :class:`ConfigResult` per configuration; status ``"compiled"``
    with ``kernel`` set -- nvcc compiled it, also on a machine without a GPU, and ``kernel.resources`` holds
    ptxas's registers / spills --, or a failure), ``mode`` (``"process"`` or ``"thread"``) and why
    (``mode_reason``), and the bound problem (``args``, ``kwargs``, ``configs``, ``target``; ``job`` is the
    tuner's bound problem, which :meth:`tilex.autotuner.AutoTuner.benchmark` reads)."""

    def __init__(self, job, results: list[ConfigResult], mode: str, mode_reason: str):
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
