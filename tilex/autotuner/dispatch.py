"""Runtime selection over one dynamic size (WaveTune's method): which compiled configuration serves a call.

A :class:`DispatchTable` is built once from sparse, wave-aligned measurements (:mod:`tilex.autotuner.dynamic`
takes them). Configurations whose launches have the same grid size G and loop count L for every value of the
size form one *macro* configuration; the others in it (stages, threads, swizzle, ...) are its *micro*
configurations. Per macro a :class:`~tilex.autotuner.wave_model.WaveModel` holds T = αGL + βG + γL + δ per wave
count, the extrapolation past the measured waves, and the micro configuration measured best per wave. Those
tables are what is saved (JSON, a few kilobytes). Loading them derives the choice for every value up to
``max_value``, so a call's decision is one list lookup; larger values are decided by the model itself (and
remembered).

:class:`DynamicKernel` is the callable: it reads the size from the call's arguments and calls the chosen
configuration's :class:`tilex.JITKernel`.
"""
from __future__ import annotations

import json

import numpy as np
import tvm_ffi

from tilex.jit.kernel import load as load_kernel
from tilex.jit.launcher import SCALAR_AXIS, dispatcher_factory

from . import export as _aot
from .launch_shape import LaunchShape
from .wave_model import WaveModel, WaveTable, wave_aligned_grids

__all__ = ["DispatchTable", "DynamicKernel", "macro_groups", "sample_values", "blocks_per_sm", "load"]

FORMAT = 1


def blocks_per_sm(threads: int, registers: int | None, smem: int | None, smem_per_sm: int = 228 * 1024,
                  max_threads: int = 2048, max_blocks: int = 32) -> int:
    """Thread blocks of one kernel resident on an SM at once (Hopper's limits by default): the fewest that
    threads, registers (64K per SM, allocated per warp in units of 8 per thread) and shared memory (1 KiB
    reserved per block) allow; at least 1."""
    fit = [max_blocks, max_threads // max(threads, 1)]
    if registers:
        warps = -(-threads // 32)
        fit.append(65536 // (warps * 32 * (-(-registers // 8) * 8)))
    if smem:
        fit.append(smem_per_sm // (smem + 1024))
    return max(1, min(fit))


def macro_groups(shapes: list[LaunchShape], dim: str, max_value: int) -> list[list[int]]:
    """Indices of the configurations grouped by their (G, L) over every value 1 .. `max_value` of `dim`."""
    groups: dict = {}
    values = np.arange(1, max_value + 1, dtype=np.int64)
    for i, shape in enumerate(shapes):
        g, l = shape.at_many(**{dim: values})
        groups.setdefault((g.tobytes(), l.tobytes()), []).append(i)
    return list(groups.values())


def sample_values(shape: LaunchShape, dim: str, max_value: int, capacity: int, max_waves: int,
                  per_wave: int, anchors: int = 6) -> list[int]:
    """Values of `dim` to profile a macro configuration at: for each wave-aligned grid size
    (:func:`~tilex.autotuner.wave_model.wave_aligned_grids`), the largest value whose grid does not exceed it,
    plus the value 1; then `anchors` values spaced geometrically from past the last of those to `max_value` (the
    extrapolation's far points: a kernel's cost per wave drifts over many waves, as operands stop fitting in L2)."""
    values = np.arange(1, max_value + 1, dtype=np.int64)
    grids, _ = shape.at_many(**{dim: values})
    out = {1}
    for target in wave_aligned_grids(capacity, max_waves, per_wave):
        i = int(np.searchsorted(grids, target, side="right")) - 1  # grids never shrink as the size grows
        if i >= 0:
            out.add(int(values[i]))
    last = max(out)
    if anchors > 0 and last < max_value:
        for v in np.geomspace(last, max_value, anchors + 1)[1:]:
            out.add(int(round(v)))
    return sorted(out)


class DispatchTable:
    """Which configuration serves each value of the dynamic size `dim` (see the module docstring)."""

    def __init__(self, dim: str, max_value: int, groups: list[list[int]], models: dict, shapes: list[LaunchShape]):
        self.dim = dim
        self.max_value = int(max_value)
        self.groups = [list(g) for g in groups]
        self.models = models  # macro index -> WaveModel
        self.shapes = shapes
        self._table = WaveTable(self.models, self._shape_map)
        self.choices = self._dense()  # the configuration per value 0 .. max_value
        self._far: dict = {}

    # -- building
    @classmethod
    def fit(cls, dim: str, max_value: int, shapes: list[LaunchShape], capacities: list[int], samples: dict,
            tail_waves: int = 3) -> "DispatchTable":
        """The table from measurements: ``samples[config index] = [(value, latency), ...]``; `capacities` are
        the blocks resident at once per configuration (SMs times :func:`blocks_per_sm`). Configurations without
        samples are left out."""
        measured = [i for i in range(len(shapes)) if samples.get(i)]
        groups = [[measured[k] for k in g] for g in macro_groups([shapes[i] for i in measured], dim, max_value)]
        models = {}
        for m, group in enumerate(groups):
            cap = min(capacities[i] for i in group)
            pts = []
            for i in group:
                for value, latency in samples.get(i, ()):
                    grid, loops = shapes[i].at(**{dim: value})
                    pts.append((grid, loops, i, float(latency)))
            models[m] = WaveModel.fit(cap, pts, tail_waves=tail_waves)
        return cls(dim, max_value, groups, models, shapes)

    def _shape_map(self, macro, value):
        return self.shapes[self.groups[macro][0]].at(**{self.dim: value})

    def _dense(self) -> list[int]:
        """The configuration chosen for each value 0 .. max_value (index 0 repeats value 1's choice)."""
        values = np.arange(1, self.max_value + 1, dtype=np.int64)
        best_t = np.full(values.shape, np.inf)
        best_macro = np.zeros(values.shape, dtype=np.int64)
        launches = {}
        for m, model in self.models.items():
            launches[m] = self.shapes[self.groups[m][0]].at_many(**{self.dim: values})
            t = model.predict_many(*launches[m])
            better = t < best_t
            best_t[better] = t[better]
            best_macro[better] = m
        choice = [0] * (self.max_value + 1)
        for k, m in enumerate(best_macro.tolist()):
            grid, loops = launches[m]
            choice[k + 1] = self.models[m].micro_config(int(grid[k]), int(loops[k]))
        choice[0] = choice[1]
        return choice

    # -- deciding
    def choose(self, value: int) -> int:
        """The configuration index for `value` (the least predicted latency over the macro configurations, and
        that macro's micro configuration for the call's wave count)."""
        if 0 <= value <= self.max_value:
            return self.choices[value]
        hit = self._far.get(value)
        if hit is None:
            _, micro, _ = self._table.choose(value)
            hit = self._far[value] = micro
        return hit

    # -- saving
    def to_json(self) -> dict:
        models = {}
        for m, model in self.models.items():
            models[str(m)] = {
                "capacity": model.capacity,
                "coefficients": {str(w): list(map(float, c)) for w, c in model.coefficients.items()},
                "extrapolation": list(map(float, model.extrapolation)),
                "micro": {str(w): [list(map(int, a)), list(map(int, c))] for w, (a, c) in model.micro.items()}}
        return {"format": FORMAT, "dim": self.dim, "max_value": self.max_value, "groups": self.groups,
                "models": models}

    @classmethod
    def from_json(cls, data: dict, shapes: list[LaunchShape]) -> "DispatchTable":
        if data.get("format") != FORMAT:
            raise ValueError(f"dispatch table format {data.get('format')!r}, expected {FORMAT}")
        models = {}
        for m, d in data["models"].items():
            model = WaveModel(int(d["capacity"]))
            model.coefficients = {int(w): np.asarray(c) for w, c in d["coefficients"].items()}
            model.extrapolation = np.asarray(d["extrapolation"])
            model.micro = {int(w): (list(a), list(c)) for w, (a, c) in d["micro"].items()}
            models[int(m)] = model
        return cls(data["dim"], data["max_value"], data["groups"], models, shapes)

    def nbytes(self) -> int:
        """Size of the saved tables (JSON)."""
        return len(json.dumps(self.to_json()))


class DynamicKernel:
    """A callable over several compiled configurations of one program with a dynamic size: each call reads the
    size from its arguments and runs the configuration the :class:`DispatchTable` picks for it.

    ``kernels[i]`` is configuration i's :class:`tilex.JITKernel` (``None`` for one that is never chosen),
    ``configs[i]`` its parameters; ``choose(value)`` says which index serves a value; ``samples`` the measurements
    the table was fitted on (index -> [(value, ms)]; empty when the table was loaded from the cache)."""

    def __init__(self, kernels: list, configs: list, table: DispatchTable, source: tuple[int, int | None]):
        self.kernels = kernels
        self.configs = configs
        self.table = table
        self.source = source  # (input position, dimension), dimension None for a scalar argument
        self.dim = table.dim
        self.samples: dict = {}
        self._fallback = next(k for k in kernels if k is not None)
        self._pos, self._axis = source
        self._dispatch = self._first_call

    def choose(self, value: int) -> int:
        return self.table.choose(value)

    def kernel_for(self, value: int):
        """The :class:`tilex.JITKernel` that serves `value`."""
        return self.kernels[self.table.choose(value)]

    def __call__(self, *args):
        try:
            return self._dispatch(*args)
        except Exception:
            self._kernel_of(args).check_args(*args)  # names a bad argument; arguments that pass re-raise
            raise

    def _kernel_of(self, args):
        try:
            a = args[self._pos]
            value = a if self._axis is None else a.shape[self._axis]
            return self.kernel_for(value) if value >= 0 else self._fallback
        except (AttributeError, TypeError, IndexError):  # not a size: the kernel's checks name the problem
            return self._fallback

    def _first_call(self, *args):
        self._dispatch = self._make_dispatch()
        return self._dispatch(*args)

    def _make_dispatch(self):
        """The per-call decision and launch: the C++ dispatcher over the kernels' C++ callers
        (:mod:`tilex.jit.launcher`), or a Python function over their launchers where those are not built."""
        launchers = [k.launcher() if k is not None else None for k in self.kernels]
        fallback = self.kernels.index(self._fallback)
        make = dispatcher_factory()
        if make is not None and all(f is None or isinstance(f, tvm_ffi.Function) for f in launchers):
            callers = [f if f is not None else launchers[fallback] for f in launchers]
            axis = SCALAR_AXIS if self._axis is None else self._axis
            return make(self._pos, axis, fallback, lambda v: int(self.table.choose(v)), list(self.table.choices),
                        *callers)
        return lambda *args: self._kernel_of(args).launcher()(*args)

    def export(self, path) -> str:
        """Write this kernel (every configuration it holds and its dispatch table) to the directory `path` for
        :func:`tilex.load` in another process (:mod:`tilex.autotuner.export`)."""
        return _aot.write(self, path)

    @property
    def params(self):
        return self._fallback.params

    def __repr__(self):
        used = sorted(set(self.table.choices))
        return (f"<tilex.DynamicKernel over '{self.dim}' (1..{self.table.max_value} tabulated): "
                f"{len(used)} of {len(self.kernels)} configurations used>")


def load(path):
    """The kernel exported to the directory `path`: a :class:`tilex.JITKernel` (``kernel.export``) or a
    :class:`DynamicKernel` (``DynamicKernel.export``), ready to call on a GPU machine without nvcc."""
    parts = _aot.read(path)
    if parts is None:
        return load_kernel(path)
    table = DispatchTable.from_json(parts["table"], parts["shapes"])
    return DynamicKernel(parts["kernels"], parts["configs"], table, parts["source"])
