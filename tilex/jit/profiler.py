"""``JITKernel.get_profiler()``: time a kernel and check it against a reference, as TileLang's profiler does.

    profiler = kernel.get_profiler(tensor_supply_type="randn")
    profiler.assert_allclose(lambda A, B: A @ B, atol=1e-2, rtol=1e-2)
    ms = profiler.do_bench()                    # the kernel, on inputs made by the supply
    ms_ref = profiler.do_bench(lambda A, B: A @ B)

Inputs are made once per profiler (``profiler.inputs``; :meth:`Profiler.supply_inputs` makes new ones) for the
kernel's non-output parameters. Timing is :func:`tilex.jit.bench.do_bench` (CUDA events, L2 flushed before every
repetition, the median by default).
"""
from __future__ import annotations

import enum
from typing import Callable, Sequence

from tilex.jit.bench import do_bench

__all__ = ["Profiler", "TensorSupplyType", "supply_tensor"]


class TensorSupplyType(enum.Enum):
    """How the profiler fills input tensors (TileLang's names): ``Auto`` (``randn`` for floating types, small
    integers for integer types, random booleans), ``Randn``, ``Normal`` (same as ``Randn``), ``Uniform``
    (in [-1, 1)), ``Integer`` (small integers, cast), ``Zero``, ``One``."""

    Auto = "auto"
    Randn = "randn"
    Normal = "normal"
    Uniform = "uniform"
    Integer = "integer"
    Zero = "zero"
    One = "one"

    @classmethod
    def of(cls, value) -> "TensorSupplyType":
        if isinstance(value, cls):
            return value
        if isinstance(value, enum.Enum):  # another library's enum with the same member names
            value = value.name
        text = str(value).strip().lower()
        for member in cls:
            if text in (member.value, member.name.lower()):
                return member
        raise ValueError(f"tilex: unknown tensor_supply_type {value!r}; use one of "
                         f"{', '.join(m.value for m in cls)}")


def supply_tensor(param, supply_type, device):
    """A torch tensor for one buffer :class:`tilex.jit.ParamSpec` (static shape, no strides)."""
    import torch

    name = getattr(param, "name", "?")
    if param.kind != "buffer":
        raise ValueError(f"tilex profiler: parameter '{name}' is a scalar ({param.dtype}); pass input_tensors=")
    if param.torch_dtype is None:
        raise ValueError(f"tilex profiler: parameter '{name}' has dtype {param.dtype}, which torch cannot "
                         "allocate; pass input_tensors=")
    if not all(isinstance(d, int) for d in param.shape):
        raise ValueError(f"tilex profiler: parameter '{name}' has a symbolic shape; pass input_tensors=")
    if param.strides is not None:
        raise ValueError(f"tilex profiler: parameter '{name}' declares strides; pass input_tensors=")
    dt, shape = param.torch_dtype, tuple(param.shape)
    kind = TensorSupplyType.of(supply_type)
    if kind is TensorSupplyType.Zero:
        return torch.zeros(shape, dtype=dt, device=device)
    if kind is TensorSupplyType.One:
        return torch.ones(shape, dtype=dt, device=device)
    if dt == torch.bool:
        return torch.randint(0, 2, shape, device=device).bool()
    floating = dt.is_floating_point or dt.is_complex
    if kind is TensorSupplyType.Integer or not floating:
        low = 0 if dt in (torch.uint8, getattr(torch, "uint16", None), getattr(torch, "uint32", None),
                          getattr(torch, "uint64", None)) else -4
        return torch.randint(low, 5, shape, device=device).to(dt)
    native = dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64) or dt.is_complex
    make_dt = dt if native else torch.float32  # float8 and friends: made in fp32, then cast
    if kind is TensorSupplyType.Uniform:
        t = torch.rand(shape, dtype=make_dt, device=device) * 2 - 1
    else:
        t = torch.randn(shape, dtype=make_dt, device=device)
    return t if make_dt == dt else t.to(dt)


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


class Profiler:
    """Times a :class:`tilex.JITKernel` and checks it against a reference program (``kernel.get_profiler()``).

    ``inputs`` are the tensors for the kernel's non-output parameters, made on first use by
    ``tensor_supply_type`` on the current CUDA device.
    """

    def __init__(self, kernel, tensor_supply_type="auto"):
        self.kernel = kernel
        self.supply_type = TensorSupplyType.of(tensor_supply_type)
        self._inputs = None

    @property
    def params(self):
        """The :class:`tilex.jit.ParamSpec` of the parameters the caller passes (outputs excluded)."""
        outs = set(self.kernel.out_idx or ())
        return [p for i, p in enumerate(self.kernel.params) if i not in outs]

    def supply_inputs(self) -> list:
        """New input tensors for the kernel (a GPU is needed)."""
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("tilex profiler: needs a CUDA GPU (torch sees none)")
        device = torch.device("cuda", torch.cuda.current_device())
        return [supply_tensor(p, self.supply_type, device) for p in self.params]

    @property
    def inputs(self) -> list:
        if self._inputs is None:
            self._inputs = self.supply_inputs()
        return self._inputs

    def run_once(self, func: Callable | None = None, input_tensors: Sequence | None = None):
        """``func(*inputs)`` (the kernel by default) once."""
        ins = self.inputs if input_tensors is None else list(input_tensors)
        return (func or self.kernel)(*ins)

    def assert_allclose(self, reference_program: Callable, input_tensors: Sequence | None = None,
                        atol: float = 1e-2, rtol: float = 1e-2, max_mismatched_ratio: float = 0.01) -> None:
        """Run the kernel and ``reference_program`` on the same inputs and compare each output. At most
        ``max_mismatched_ratio`` of the elements may be outside ``atol + rtol * |ref|`` (TileLang's check);
        raises ``AssertionError`` naming the output, the mismatch ratio and the largest difference."""
        import torch

        ins = self.inputs if input_tensors is None else list(input_tensors)
        ref = _as_list(reference_program(*ins))
        got = _as_list(self.kernel(*ins))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if len(ref) != len(got):
            raise AssertionError(f"tilex profiler: the kernel returned {len(got)} outputs, the reference "
                                 f"{len(ref)}")
        for i, (g, r) in enumerate(zip(got, ref)):
            r = torch.as_tensor(r, device=g.device)
            if g.shape != r.shape:
                raise AssertionError(f"tilex profiler: output {i} has shape {tuple(g.shape)}, the reference "
                                     f"{tuple(r.shape)}")
            g64, r64 = g.double(), r.double()
            diff = (g64 - r64).abs()
            bad = ~(diff <= atol + rtol * r64.abs())
            bad |= torch.isnan(g64) != torch.isnan(r64)
            n = max(1, g.numel())
            ratio = float(bad.sum().item()) / n
            if ratio > max_mismatched_ratio:
                worst = float(torch.nan_to_num(diff, nan=float("inf")).max().item()) if g.numel() else 0.0
                raise AssertionError(
                    f"tilex profiler: output {i}: {ratio:.2%} of {g.numel()} elements differ from the reference "
                    f"by more than atol={atol} + rtol={rtol} * |ref| (allowed: {max_mismatched_ratio:.2%}); "
                    f"largest absolute difference {worst:g}")

    def do_bench(self, func: Callable | None = None, warmup: float = 25, rep: float = 100,
                 n_warmup: int | None = None, n_repeat: int | None = None, input_tensors: Sequence | None = None,
                 return_mode: str = "median", flush_l2: bool = True):
        """Milliseconds per call of ``func(*inputs)`` (the kernel by default): :func:`tilex.jit.bench.do_bench`
        with ``warmup`` / ``rep`` time budgets in ms (or the counts ``n_warmup`` / ``n_repeat``), the median
        by default (``return_mode``: median / mean / min / max / all)."""
        ins = self.inputs if input_tensors is None else list(input_tensors)
        fn = func or self.kernel
        return do_bench(lambda: fn(*ins), warmup, rep, n_warmup=n_warmup, n_repeat=n_repeat, flush_l2=flush_l2,
                        return_mode=return_mode)

    def __call__(self, *args):
        return self.kernel(*args)
