"""The wave-aware bilinear latency model of WaveTune, built from measurements (pure numpy; no GPU here).

A kernel launch is reduced to two numbers: G, the thread blocks of its grid, and L, the iterations of its main
loop (k tiles for a GEMM, KV tiles for attention). With `capacity` blocks resident on the GPU at once (SMs times
blocks per SM), the launch runs in w = ceil(G / capacity) waves. Within one wave count, latency is close to

    T(G, L) = alpha * G * L + beta * G + gamma * L + delta

and it jumps where w changes. A :class:`WaveModel` holds one coefficient tuple per wave count it was measured at
(a constant where one launch shape was measured in the wave), interpolates between measured wave counts, and
holds one more fit over its last measured waves for grids past them (extrapolation), and per (wave, loop
anchor) the micro configuration that measured best there. :class:`WaveTable` holds one model per macro configuration (the tile
shape, which sets G and L) and picks, for a call's (G, L) per macro config, the one with the least predicted
latency, then the micro configuration of the nearest loop anchor: a few multiply-adds and two lookups.

Sampling (:func:`wave_aligned_grids`) takes I grid sizes inside each of the first W waves, so every bucket has
enough points for its four coefficients when paired with two or more loop counts.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["waves", "wave_aligned_grids", "fit_bilinear", "WaveModel", "WaveTable", "gemm_shape_map"]


def waves(grid: int, capacity: int) -> int:
    """Waves a launch of `grid` blocks takes with `capacity` blocks resident at once."""
    if capacity < 1 or grid < 1:
        raise ValueError(f"waves: grid and capacity must be positive, got {grid} and {capacity}")
    return -(-grid // capacity)


def wave_aligned_grids(capacity: int, max_waves: int, per_wave: int) -> list[int]:
    """Grid sizes to profile: `per_wave` points spread over each of waves 1 .. `max_waves`, the last of each at
    the wave's full size (the sizes where the next block starts a new wave)."""
    if capacity < 1 or max_waves < 1 or per_wave < 1:
        raise ValueError("wave_aligned_grids: capacity, max_waves and per_wave must be positive")
    grids = []
    for w in range(max_waves):
        lo = w * capacity
        grids += sorted({lo + max(1, round(capacity * (i + 1) / per_wave)) for i in range(per_wave)})
    return grids


def fit_bilinear(grid, loops, latency) -> np.ndarray:
    """Least-squares (alpha, beta, gamma, delta) of T = alpha G L + beta G + gamma L + delta. Where the samples
    cannot tell terms apart (one loop count, say) numpy's minimum-norm solution is taken: any split predicts the
    same along the measured lines."""
    g, l, t = (np.asarray(v, dtype=np.float64) for v in (grid, loops, latency))
    if not (g.shape == l.shape == t.shape) or g.ndim != 1 or g.size == 0:
        raise ValueError("fit_bilinear: grid, loops and latency must be equal-length 1-d sequences")
    a = np.stack([g * l, g, l, np.ones_like(g)], axis=1)
    theta, *_ = np.linalg.lstsq(a, t, rcond=None)
    return theta


def _predict(theta, grid, loops):
    alpha, beta, gamma, delta = theta
    return alpha * grid * loops + beta * grid + gamma * loops + delta


@dataclass
class WaveModel:
    """Latency model of one macro configuration: coefficients per wave count, extrapolation coefficients for wave
    counts past the measured ones, and the best micro configuration per (wave, loop anchor)."""

    capacity: int
    coefficients: dict = field(default_factory=dict)  # wave -> (alpha, beta, gamma, delta)
    extrapolation: np.ndarray | None = None
    micro: dict = field(default_factory=dict)  # wave -> (sorted loop anchors, micro config per anchor)

    @classmethod
    def fit(cls, capacity: int, samples, tail_waves: int = 3) -> "WaveModel":
        """The model from `samples`: (grid, loops, micro config, latency) tuples. Per (wave, loop count) the micro
        config with the least mean latency over that bucket's grids is kept, and only its latencies are fitted
        (a coherent micro config across G, as WaveTune does); the last `tail_waves` measured waves together give
        the extrapolation."""
        buckets: dict = {}
        for grid, loops, micro, latency in samples:
            buckets.setdefault((waves(grid, capacity), loops), {}).setdefault(micro, []).append((grid, latency))
        if not buckets:
            raise ValueError("WaveModel.fit: no samples")
        model = cls(capacity)
        chosen: dict = {}  # wave -> [(grid, loops, latency)]
        anchors: dict = {}  # wave -> {loops: micro}
        for (w, loops), per_micro in buckets.items():
            micro, points = min(per_micro.items(), key=lambda kv: (np.mean([t for _, t in kv[1]]), repr(kv[0])))
            anchors.setdefault(w, {})[loops] = micro
            chosen.setdefault(w, []).extend((g, loops, t) for g, t in points)
        for w, pts in chosen.items():
            g, l, t = zip(*pts)
            if len(set(zip(g, l))) > 1:
                model.coefficients[w] = fit_bilinear(g, l, t)
            else:
                # one launch shape in this wave (a far anchor, or a tile as wide as a wave): its latency, flat
                # across the wave (a least-squares line through one point would tilt with the scale of G and L)
                model.coefficients[w] = np.array([0.0, 0.0, 0.0, float(np.mean(t))])
            loop_list = sorted(anchors[w])
            model.micro[w] = (loop_list, [anchors[w][x] for x in loop_list])
        tail = sorted(chosen)[-tail_waves:]
        g, l, t = zip(*[p for w in tail for p in chosen[w]])
        model.extrapolation = fit_bilinear(g, l, t)
        return model

    def predict(self, grid: int, loops: int) -> float:
        """Predicted latency of a launch of `grid` blocks and `loops` iterations."""
        return float(self.predict_many(np.array([grid]), np.array([loops]))[0])

    def predict_many(self, grid, loops) -> np.ndarray:
        """:meth:`predict` over arrays of grid sizes and loop counts. A measured wave count uses its own
        coefficients; one between measured wave counts interpolates, in G, between the latencies of the two
        neighbours' full waves (a step's height changes smoothly from wave to wave); one past them uses the
        extrapolation."""
        grid = np.asarray(grid, dtype=np.float64)
        loops = np.asarray(loops, dtype=np.float64)
        w = np.ceil(grid / self.capacity).astype(np.int64)
        out = _predict(self.extrapolation, grid, loops)
        measured = sorted(self.coefficients)
        for lo, hi in zip(measured, measured[1:]):
            gap = (w > lo) & (w < hi)
            if hi > lo + 1 and gap.any():
                g_lo, g_hi = lo * self.capacity, hi * self.capacity
                t_lo = _predict(self.coefficients[lo], g_lo, loops)
                t_hi = _predict(self.coefficients[hi], g_hi, loops)
                full = w * self.capacity
                out = np.where(gap, t_lo + (t_hi - t_lo) * (full - g_lo) / (g_hi - g_lo), out)
        for wave, theta in self.coefficients.items():
            here = w == wave
            if here.any():
                out = np.where(here, _predict(theta, grid, loops), out)
        return out

    def micro_config(self, grid: int, loops: int):
        """The micro configuration of the loop anchor nearest `loops`, in this wave count (or the nearest measured
        one)."""
        w = waves(grid, self.capacity)
        if w not in self.micro:
            w = min(self.micro, key=lambda m: (abs(m - w), m))
        anchors, configs = self.micro[w]
        i = bisect.bisect_left(anchors, loops)
        if i == len(anchors) or (i > 0 and loops - anchors[i - 1] <= anchors[i] - loops):
            i -= 1
        return configs[i]


@dataclass
class WaveTable:
    """One WaveModel per macro configuration, and `shape_map(macro, *shape) -> (grid, loops)`: how a call's
    shape becomes (G, L) under that macro configuration."""

    models: dict
    shape_map: object

    def choose(self, *shape):
        """(macro config, micro config, predicted latency) with the least predicted latency for `shape`."""
        best = None
        for macro, model in self.models.items():
            grid, loops = self.shape_map(macro, *shape)
            t = model.predict(grid, loops)
            if best is None or t < best[2]:
                best = (macro, model, t, grid, loops)
        if best is None:
            raise ValueError("WaveTable.choose: no macro configurations")
        macro, model, t, grid, loops = best
        return macro, model.micro_config(grid, loops), t


def gemm_shape_map(macro, m, n, k):
    """(G, L) of a GEMM whose macro configuration is (block_m, block_n, block_k): the output tiles and k tiles."""
    bm, bn, bk = macro
    return math.ceil(m / bm) * math.ceil(n / bn), math.ceil(k / bk)
