"""Tuning for a dynamic size: profile every compiled configuration sparsely at wave-aligned values of the size,
fit WaveTune's tables (:class:`~tilex.autotuner.dispatch.DispatchTable`) and return the
:class:`~tilex.autotuner.dispatch.DynamicKernel` that picks a configuration per call.

Each configuration is compiled once with the size symbolic (``T.dynamic``), so one kernel serves every value;
what is measured per value is only a launch of it on inputs of that size (views of one allocation where the size
is a tensor's outermost dimension).
"""
from __future__ import annotations

import logging

from tilex.jit.args import first_bindings

from . import bench
from .devices import run_on_devices
from .dispatch import DispatchTable, DynamicKernel, blocks_per_sm, macro_groups, sample_values
from .launch_shape import launch_shape
from .results import AutotuneError

__all__ = ["size_source", "sized_supply", "profile", "build_dynamic_kernel"]

logger = logging.getLogger("tilex.autotuner")


def size_source(params, dim: str) -> tuple[int, int | None]:
    """(input position, dimension) of the first input whose shape uses the symbolic size `dim`, or (position,
    None) for a scalar input named `dim`: where a call's value of the size is read."""
    inputs = [p for p in params if not p.is_output]
    for pos, axis, name in sorted(first_bindings(inputs).values(), key=lambda b: b[0]):
        if name == dim:
            return pos, axis
    raise AutotuneError(f"tilex autotune: no input of the kernel is sized by '{dim}' (dynamic={dim!r}); its "
                        f"inputs are {[repr(p) for p in inputs]}")


def sized_supply(params, dim: str, max_value: int, make):
    """``inputs(value)`` for the kernel's inputs with the symbolic size `dim` set to `value` (other symbolic sizes
    are not supported). `make(specs_with_shapes)` creates tensors, like the tuner's supply. Tensors whose
    outermost dimension is `dim` are made once at `max_value` rows and sliced (contiguous views); others are made
    per value."""
    inputs = [p for p in params if not p.is_output]
    for p in inputs:
        for d in p.shape:
            if isinstance(d, tuple) and d[2] != dim:
                raise AutotuneError(f"tilex autotune: input '{p.name}' also has the symbolic size '{d[2]}'; only "
                                    f"'{dim}' may vary when tuning dynamically")

    def concrete(p, value):
        return _Sized(p, tuple(value if isinstance(d, tuple) else d for d in p.shape))

    sliced = {}
    for k, p in enumerate(inputs):
        if p.kind == "buffer" and p.shape and isinstance(p.shape[0], tuple) and all(
                not isinstance(d, tuple) for d in p.shape[1:]):
            sliced[k] = make([concrete(p, max_value)])[0]

    def supply(value):
        out = []
        for k, p in enumerate(inputs):
            if p.kind == "scalar":
                out.append(value)
            elif k in sliced:
                out.append(sliced[k][:value])
            else:
                out.append(make([concrete(p, value)])[0])
        return out

    return supply


class _Sized:
    """A ParamSpec with its symbolic dimensions replaced by values (what a supply function reads)."""

    def __init__(self, spec, shape):
        self.name, self.kind, self.dtype, self.torch_dtype = spec.name, spec.kind, spec.dtype, spec.torch_dtype
        self.strides, self.is_output, self.index = spec.strides, spec.is_output, spec.index
        self.shape = shape


def profile(kernels: dict, funcs: dict, dim: str, max_value: int, make_supply, sms: int, smem: dict | None = None,
            max_waves: int = 8, per_wave: int = 3, warmup: float = 5, rep: float = 20, progress=None,
            devices=(0,)):
    """Measure each compiled configuration (``kernels[i]``, built from ``funcs[i]``; ``smem[i]`` its shared memory
    per block, when known) at the wave-aligned sample values of its macro configuration, spreading the values
    over ``devices`` (:func:`~tilex.autotuner.devices.run_on_devices`; the members of a macro configuration are
    timed one after the other on one GPU at each value). ``make_supply()`` is called once per device, on it, and
    returns that device's ``inputs(value)``. Returns ``(shapes, capacities, samples)`` for
    :meth:`DispatchTable.fit`: ``samples[i] = [(value, ms), ...]``; a configuration that fails at any value is
    left out."""
    order = sorted(kernels)
    shapes = {i: launch_shape(funcs[i]) for i in order}
    capacities = {}
    for i in order:
        res = kernels[i].resources
        regs = res.registers if res is not None else None
        capacities[i] = sms * blocks_per_sm(shapes[i].threads, regs, (smem or {}).get(i))
    items = []
    for group in macro_groups([shapes[i] for i in order], dim, max_value):
        members = [order[k] for k in group]
        cap = min(capacities[i] for i in members)
        items += [(members, value) for value in sample_values(shapes[members[0]], dim, max_value, cap, max_waves,
                                                              per_wave)]
    supplies: dict = {}
    failed: dict = {}

    def measure(item, dev):
        members, value = item
        if dev not in supplies:
            supplies[dev] = make_supply()
        inputs = supplies[dev](value)
        out = []
        for i in members:
            if i in failed:
                continue
            try:
                out.append((i, bench.do_bench(lambda k=kernels[i]: k(*inputs), warmup, rep)))
            except Exception as e:  # noqa: BLE001 - leave the configuration out
                failed.setdefault(i, (value, e))
            if progress is not None:
                progress.update(1)
        return value, out

    samples: dict = {}
    for value, out in run_on_devices(items, measure, list(devices)):
        for i, ms in out:
            samples.setdefault(i, []).append((value, ms))
    for i, (value, e) in failed.items():
        logger.warning("tilex autotune: configuration %d failed at %s=%d: %s", i, dim, value, e)
        samples.pop(i, None)
    return shapes, capacities, samples


def build_dynamic_kernel(kernels: dict, configs: dict, shapes: dict, capacities: dict, samples: dict, dim: str,
                         max_value: int, table_json: dict | None = None) -> DynamicKernel:
    """The :class:`DynamicKernel` over `kernels` (index -> JITKernel) from measurements, or from a saved table."""
    n = max(kernels) + 1
    shape_list = [shapes.get(i) for i in range(n)]
    if table_json is not None:
        table = DispatchTable.from_json(table_json, shape_list)
    else:
        if not samples:
            raise AutotuneError("tilex autotune: no configuration could be measured at any value of "
                                f"'{dim}'")
        cap_list = [capacities.get(i, 1) for i in range(n)]
        table = DispatchTable.fit(dim, max_value, shape_list, cap_list, samples)
    kernel_list = [kernels.get(i) for i in range(n)]
    config_list = [configs.get(i) for i in range(n)]
    first = next(k for k in kernel_list if k is not None)
    dk = DynamicKernel(kernel_list, config_list, table, size_source(first.params, dim))
    dk.samples = dict(samples)
    return dk
