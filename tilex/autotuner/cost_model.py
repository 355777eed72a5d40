"""A learned cost model for offline tuning: an XGBoost regressor over static program features, trained on the
measurements tilex records, ranks a problem's configurations so that only the top few are measured.

Features (:func:`program_features`) come from the program and its compilation, not from running it: the grid
size G and main-loop count L (:mod:`tilex.autotuner.launch_shape`), threads, ptxas's registers, shared memory,
resident blocks per SM, waves (G over the blocks resident at once) and the wave's tail, work per block, and the
numeric configuration parameters and problem arguments. The target is a configuration's latency relative to the
best one measured for the same problem, log(t / t_best), so problems of different sizes share one scale; a
configuration's rank is the order of its predicted target.

:class:`MeasurementDB` is the local database (JSON lines in the autotune cache directory, reused across runs);
:class:`CostModel` trains on it and ranks. xgboost is imported when a model is fitted, not before: plain
``tilex.compile`` does not pay for it (install ``xgboost-cpu``: ``pip install tilex[tune]``).
"""
from __future__ import annotations

import json
import math
import os
import threading

import numpy as np

from .cache import autotune_cache_dir
from .dispatch import blocks_per_sm
from .launch_shape import launch_shape

__all__ = ["program_features", "known_before_compiling", "MeasurementDB", "CostModel", "default_db_path"]


def default_db_path() -> str:
    return os.path.join(autotune_cache_dir(), "measurements.jsonl")


def _numbers(prefix, value, out):
    """Numeric leaves of a config value (ints, floats, bools; tuples and lists by position) as features."""
    if isinstance(value, (int, float)):  # bools too
        out[prefix] = float(value)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _numbers(f"{prefix}.{i}", v, out)


def program_features(func, config: dict, args=(), registers: int | None = None, smem: int | None = None,
                     sms: int = 132) -> dict:
    """Static features of one configuration of one problem (see the module docstring). `func` is the
    configuration's PrimFunc for the problem (static sizes), `registers` ptxas's count, `smem` bytes per block."""
    shape = launch_shape(func)
    grid, loops = shape.at()
    threads = shape.threads
    blocks = blocks_per_sm(threads, registers, smem)
    waves = grid / (sms * blocks)
    f = {"grid": float(grid), "loops": float(loops), "threads": float(threads),
         "registers": float(registers) if registers else math.nan, "smem": float(smem) if smem else math.nan,
         "blocks_per_sm": float(blocks), "waves": waves, "whole_waves": float(math.ceil(waves)),
         "wave_tail": waves - math.floor(waves), "log_grid": math.log2(max(grid, 1)),
         "loops_per_wave": loops * math.ceil(waves)}
    for k, v in sorted(config.items()):
        _numbers(f"cfg.{k}", v, f)
    for i, a in enumerate(args):
        _numbers(f"arg.{i}", a, f)
    return f


class MeasurementDB:
    """Measurements tilex recorded: one JSON line per (problem, configuration): ``problem`` (a key naming the
    factory, its arguments and the device), ``config``, ``features``, ``ms``."""

    def __init__(self, path: str | None = None):
        self.path = path or default_db_path()
        self._lock = threading.Lock()

    def add(self, problem: str, rows) -> None:
        """Append `rows`: (config, features, ms) tuples of one problem."""
        rows = list(rows)
        if not rows:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        lines = [json.dumps({"problem": problem, "config": repr(c), "features": f, "ms": float(ms)})
                 for c, f, ms in rows]
        with self._lock, open(self.path, "a") as fh:
            fh.write("\n".join(lines) + "\n")

    def load(self) -> list[dict]:
        if not os.path.exists(self.path):
            return []
        out = []
        with open(self.path) as fh:
            for line in fh:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue  # a line cut short by a crash
        return out

    def problems(self) -> set:
        return {r["problem"] for r in self.load()}


def known_before_compiling(name: str) -> bool:
    """Whether feature `name` is known from the program alone (no ptxas report, no shared-memory plan): what a
    model ranking configurations before they are compiled may use."""
    return name in ("grid", "loops", "threads", "log_grid") or name.startswith(("cfg.", "arg."))


class CostModel:
    """XGBoost regressor of log(t / t_best) over :func:`program_features` (those `only` accepts, if given)."""

    def __init__(self, n_estimators: int = 300, max_depth: int = 6, learning_rate: float = 0.1, seed: int = 0,
                 only=None):
        self.only = only
        self.rounds = n_estimators
        self.params = {"max_depth": max_depth, "eta": learning_rate, "seed": seed, "objective": "reg:squarederror",
                       "verbosity": 0}
        self.names: list[str] = []
        self.model = None

    def _matrix(self, features) -> np.ndarray:
        return np.array([[f.get(n, math.nan) for n in self.names] for f in features], dtype=np.float64)

    def fit(self, records, exclude=()) -> "CostModel":
        """Train on `records` (MeasurementDB rows), leaving out problems in `exclude`. Problems with fewer than two
        measured configurations teach nothing about ranking and are skipped."""
        try:
            import xgboost
        except ImportError as e:
            raise ImportError("tilex's cost model needs xgboost: pip install xgboost-cpu (or tilex[tune])") from e
        by_problem: dict = {}
        for r in records:
            if r["problem"] not in exclude and r.get("ms") and math.isfinite(r["ms"]):
                by_problem.setdefault(r["problem"], []).append(r)
        feats, target = [], []
        for rows in by_problem.values():
            if len(rows) < 2:
                continue
            best = min(r["ms"] for r in rows)
            for r in rows:
                feats.append(r["features"])
                target.append(math.log(r["ms"] / best))
        if not feats:
            raise ValueError("CostModel.fit: no problem with two or more measured configurations")
        self.names = sorted({k for f in feats for k in f if self.only is None or self.only(k)})
        data = xgboost.DMatrix(self._matrix(feats), label=np.asarray(target), missing=math.nan)
        self.model = xgboost.train(self.params, data, num_boost_round=self.rounds)
        return self

    def predict(self, features) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("CostModel.predict before fit")
        import xgboost

        return self.model.predict(xgboost.DMatrix(self._matrix(features), missing=math.nan))

    def rank(self, features) -> list[int]:
        """Indices of `features` from the predicted fastest to the slowest."""
        return [int(i) for i in np.argsort(self.predict(features), kind="stable")]
