"""``JITKernel.get_profiler()``: time a kernel and check it against a reference, as TileLang's profiler does.

    profiler = kernel.get_profiler(tensor_supply_type=tilex.TensorSupplyType.Normal)   # or "normal"
    profiler.assert_allclose(lambda A, B: A @ B, atol=1e-2, rtol=1e-2)
    ms = profiler.do_bench()                    # the kernel, on inputs made by the supply
    ms_ref = profiler.do_bench(lambda A, B: A @ B, backend="cupti")

Inputs are made once per profiler (``profiler.inputs``; :meth:`Profiler.supply_inputs` makes new ones) for the
kernel's non-output parameters, filled as :func:`tilex.utils.tensor.supply_tensor` says. Timing is
:func:`tilex.jit.bench.do_bench` (L2 flushed before every repetition; the mean by default, as TileLang's).
"""
from __future__ import annotations

from typing import Callable, Sequence

from tilex.jit.bench import do_bench
from tilex.utils.tensor import TensorSupplyType, is_float8_dtype, supply_tensor, torch_assert_close

__all__ = ["Profiler", "TensorSupplyType", "supply_tensor"]


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


class _SizedParam:
    """A buffer parameter with its symbolic dimensions replaced by given sizes (what :func:`supply_tensor`
    reads)."""

    def __init__(self, param, shape):
        self.name, self.kind, self.dtype, self.torch_dtype = param.name, param.kind, param.dtype, param.torch_dtype
        self.shape, self.strides = shape, param.strides

    def __repr__(self):
        return f"{self.name}: {self.dtype}{tuple(self.shape)}"


def _with_sizes(param, sizes: dict):
    """``param`` with each symbolic dimension ``("sym", slot, name)`` replaced by ``sizes[name]``."""
    if param.kind != "buffer" or all(isinstance(d, int) for d in param.shape):
        return param
    shape = []
    for d in param.shape:
        if isinstance(d, tuple) and d and d[0] == "sym":
            if d[2] not in sizes:
                raise ValueError(f"tilex profiler: parameter '{param.name}' has the symbolic size '{d[2]}', which "
                                 f"dynamic_symbolic_constraints does not give (it gives {sorted(sizes)})")
            shape.append(int(sizes[d[2]]))
        elif d is None:
            raise ValueError(f"tilex profiler: parameter '{param.name}' has a dimension that is an expression; "
                             "pass input_tensors=")
        else:
            shape.append(d)
    return _SizedParam(param, shape)


class Profiler:
    """Times a :class:`tilex.JITKernel` and checks it against a reference program (``kernel.get_profiler()``).

    ``inputs`` are the tensors for the kernel's non-output parameters, made on first use by
    ``tensor_supply_type`` (a :class:`TensorSupplyType` or its lower-case name) on the current CUDA device.
    """

    def __init__(self, kernel, tensor_supply_type="auto"):
        self.kernel = kernel
        self.supply_type = TensorSupplyType.of(tensor_supply_type)
        self._inputs = None

    @property
    def func(self):
        """The kernel (TileLang's name)."""
        return self.kernel

    @property
    def params(self):
        """The :class:`tilex.jit.ParamSpec` of the parameters the caller passes (outputs excluded)."""
        outs = set(self.kernel.out_idx or ())
        return [p for i, p in enumerate(self.kernel.params) if i not in outs]

    def supply_inputs(self, dynamic_symbolic_constraints: dict | None = None, with_output: bool = False) -> list:
        """New input tensors for the kernel (a GPU is needed); ``dynamic_symbolic_constraints`` (``{"m": 2048}``)
        gives the symbolic sizes; ``with_output`` makes tensors for the output parameters too."""
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("tilex profiler: needs a CUDA GPU (torch sees none)")
        device = torch.device("cuda", torch.cuda.current_device())
        params = self.kernel.params if with_output else self.params
        sizes = dict(dynamic_symbolic_constraints or {})
        return [supply_tensor(_with_sizes(p, sizes), self.supply_type, device) for p in params]

    def _get_inputs(self, with_output: bool = False, dynamic_symbolic_constraints: dict | None = None) -> list:
        """TileLang's spelling of :meth:`supply_inputs`."""
        return self.supply_inputs(dynamic_symbolic_constraints, with_output)

    @property
    def inputs(self) -> list:
        if self._inputs is None:
            self._inputs = self.supply_inputs()
        return self._inputs

    def run_once(self, func: Callable | None = None, input_tensors: Sequence | None = None):
        """``func(*inputs)`` (the kernel by default) once."""
        ins = self.inputs if input_tensors is None else list(input_tensors)
        return (func or self.kernel)(*ins)

    def _outputs(self, reference_program, input_tensors):
        import torch

        ins = self.inputs if input_tensors is None else list(input_tensors)
        ref = _as_list(reference_program(*ins))
        got = _as_list(self.kernel(*ins))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if len(ref) != len(got):
            raise AssertionError(f"tilex profiler: the kernel returned {len(got)} outputs, the reference "
                                 f"{len(ref)}")
        return got, ref

    def assert_allclose(self, reference_program: Callable, input_tensors: Sequence | None = None,
                        atol: float = 1e-2, rtol: float = 1e-2, max_mismatched_ratio: float = 0.01) -> None:
        """Run the kernel and ``reference_program`` on the same inputs and compare each output with
        :func:`tilex.utils.tensor.torch_assert_close`: at most ``int(numel * max_mismatched_ratio)`` elements may
        fail ``isclose(out, ref, rtol, atol)`` (NaN equals NaN); dtypes may differ (compared in the promoted
        dtype, float8 as float32); an output the reference gives as ``None`` is not checked. Raises
        ``AssertionError`` naming the output."""
        import torch

        got, ref = self._outputs(reference_program, input_tensors)
        for i, (g, r) in enumerate(zip(got, ref)):
            if g is None or r is None:
                continue
            r = torch.as_tensor(r, device=g.device)
            if g.shape != r.shape:
                raise AssertionError(f"tilex profiler: output {i} has shape {tuple(g.shape)}, the reference "
                                     f"{tuple(r.shape)}")
            g = g.float() if is_float8_dtype(g.dtype) else g
            r = r.float() if is_float8_dtype(r.dtype) else r
            try:
                torch_assert_close(g, r, rtol=rtol, atol=atol, max_mismatched_ratio=max_mismatched_ratio,
                                   check_dtype=False, check_device=False, base_name="kernel", ref_name="ref")
            except AssertionError as e:
                raise AssertionError(f"tilex profiler: output {i}: {e}") from None

    def manual_assert_close(self, reference_program: Callable, input_tensors: Sequence | None = None,
                            manual_check_prog: Callable | None = None) -> None:
        """Run the kernel and ``reference_program`` on the same inputs and hand both output lists to
        ``manual_check_prog(outputs, reference_outputs)``, which raises when they disagree."""
        if not callable(manual_check_prog):
            raise TypeError("tilex profiler: manual_assert_close needs manual_check_prog(outputs, ref_outputs)")
        got, ref = self._outputs(reference_program, input_tensors)
        manual_check_prog(got, ref)

    def assert_consistent(self, repeat: int = 10) -> None:
        """Run the kernel ``repeat`` more times on the same inputs; every run must give the first run's outputs
        (within torch.allclose): a race shows up as a difference."""
        import torch

        first = [t.clone() for t in _as_list(self.kernel(*self.inputs))]
        for k in range(int(repeat)):
            again = _as_list(self.kernel(*self.inputs))
            for i, (a, b) in enumerate(zip(again, first)):
                if not torch.allclose(a, b):
                    raise AssertionError(f"tilex profiler: output {i} of run {k + 2} differs from the first run's")

    def do_bench(self, func: Callable | None = None, warmup: float = 25, rep: float = 100, n_warmup: int = 0,
                 n_repeat: int = 0, input_tensors: Sequence | None = None, backend: str = "event",
                 quantiles: Sequence[float] | None = None, return_mode: str = "mean",
                 dynamic_symbolic_constraints: dict | None = None, device=None,
                 early_stop_baseline: float | None = None, flush_l2: bool = True):
        """Milliseconds per call of ``func(*inputs)`` (the kernel by default): :func:`tilex.jit.bench.do_bench`
        with ``warmup`` / ``rep`` time budgets in ms (or the counts ``n_warmup`` / ``n_repeat``; 0: from the
        budget), ``backend`` ("event", "cupti", "cudagraph"), ``quantiles`` or ``return_mode`` (mean by default;
        median / min / max / all), ``device`` (a CUDA device), ``early_stop_baseline``. Inputs:
        ``input_tensors``, else new ones for ``dynamic_symbolic_constraints`` when given, else
        :attr:`inputs`."""
        import contextlib

        import torch

        if device is not None and torch.cuda.is_available():
            scope = torch.cuda.device(device)
        else:
            scope = contextlib.nullcontext()
        with scope:
            if input_tensors is not None:
                ins = list(input_tensors)
            elif dynamic_symbolic_constraints is not None:
                ins = self.supply_inputs(dynamic_symbolic_constraints)
            else:
                ins = self.inputs
            fn = func or self.kernel
            return do_bench(lambda: fn(*ins), warmup, rep, n_warmup=n_warmup, n_repeat=n_repeat,
                            flush_l2=flush_l2, return_mode=return_mode, backend=backend, quantiles=quantiles,
                            early_stop_baseline=early_stop_baseline, device=device)

    def __call__(self, *args):
        return self.kernel(*args)
