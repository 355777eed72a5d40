"""Performance-regression entry points (TileLang's ``tilelang.testing.process_func`` / ``regression``).

A regression script defines functions named ``regression_<case>`` that call :func:`process_func` with a
benchmark function returning a latency; ``regression()`` at the end of the script runs every such function of
the script (sorted by name) and prints what was recorded: one ``name: latency`` line each, or, with
``TILEX_PERF_REGRESSION_FORMAT=json`` (``TL_PERF_REGRESSION_FORMAT`` is read too), one line
``__TILEX_PERF_RESULTS_JSON__=[{"name": ..., "latency": ..., "case": ...}, ...]``.
``TILEX_PERF_REGRESSION_ONLY`` (or ``TL_...``): a comma-separated or JSON list of case patterns (fnmatch, or a
substring; any case) to run.
"""
from __future__ import annotations

import fnmatch
import inspect
import json
import logging
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["PerfResult", "process_func", "regression", "results", "RESULTS_JSON_PREFIX"]

RESULTS_JSON_PREFIX = "__TILEX_PERF_RESULTS_JSON__="
_PREFIX = "regression_"
_RETRIES = 5


@dataclass(frozen=True)
class PerfResult:
    name: str
    latency: float
    case: str | None = None


_results: list = []
_case: list = [None]  # the regression_* function running now (without the prefix)


def results() -> list:
    """The :class:`PerfResult` s recorded since the last :func:`regression` began."""
    return list(_results)


def _env(name: str) -> str:
    return os.environ.get("TILEX_" + name, os.environ.get("TL_" + name, ""))


def _strip(name: str) -> str:
    return name[len(_PREFIX):] if name.startswith(_PREFIX) else name


def process_func(func: Callable[..., float], name: str | None = None, /, **kwargs: Any) -> None:
    """Record ``func(**kwargs)``'s latency under ``name`` (default: ``func``'s module; a ``regression_`` prefix is
    dropped). A latency <= 0 is measured again, up to five times; if it stays <= 0 a RuntimeWarning is issued
    and nothing is recorded."""
    label = _strip(getattr(func, "__module__", "<unknown>") if name is None else name)
    latency = float(func(**kwargs))
    tries = 0
    while latency <= 0.0 and tries < _RETRIES:
        latency = float(func(**kwargs))
        tries += 1
    if latency <= 0.0:
        warnings.warn(f"{label}: latency {latency} <= 0; check the measurement", RuntimeWarning, stacklevel=2)
        return
    _results.append(PerfResult(label, latency, _case[0]))


def _selected(name: str, patterns: Sequence[str]) -> bool:
    if not patterns:
        return True
    names = (name.lower(), _strip(name).lower())
    return any(fnmatch.fnmatch(n, p.lower()) or p.lower() in n for p in patterns for n in names)


def _patterns() -> list:
    text = _env("PERF_REGRESSION_ONLY").strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text.split(",")
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list):
        raise ValueError(f"PERF_REGRESSION_ONLY must be a list of case patterns, got {text!r}")
    return [str(v).strip() for v in value if str(v).strip()]


def regression(prefixes: Sequence[str] = (_PREFIX,), verbose: bool = True) -> None:
    """Run the caller's module-level functions whose names start with one of ``prefixes`` (sorted by name; warnings
    and log messages below ERROR silenced while they run) and print the recorded results (see the module
    docstring)."""
    scope = inspect.currentframe().f_back.f_globals
    found = sorted((k, v) for k, v in scope.items() if callable(v) and any(k.startswith(p) for p in prefixes))
    patterns = _patterns()
    found = [(k, v) for k, v in found if _selected(k, patterns)]
    _results.clear()
    for i, (name, fn) in enumerate(found, 1):
        _case[0] = _strip(name)
        if verbose:
            print(f"  [{i}/{len(found)}] {_case[0]}", end="", flush=True)
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                logging.disable(logging.WARNING)
                try:
                    fn()
                finally:
                    logging.disable(logging.NOTSET)
        finally:
            _case[0] = None
        if verbose:
            print(f" ({time.perf_counter() - start:.2f}s)", flush=True)
    if _env("PERF_REGRESSION_FORMAT").strip().lower() == "json":
        rows = [dict(name=r.name, latency=r.latency, **({"case": r.case} if r.case is not None else {}))
                for r in _results]
        print(RESULTS_JSON_PREFIX + json.dumps(rows, separators=(",", ":")))
    else:
        for r in _results:
            print(f"{r.name}: {r.latency}")
