"""``with set_autotune_inputs(a, b, ...):`` — the inputs the autotuner benchmarks and checks with, instead of
tensors made from the kernel's parameter declarations (TileLang's ``tilelang.autotuner.set_autotune_inputs``).

The captured inputs are the kernel's non-output arguments in order (tensors and scalars). They apply to
tuning that starts inside the ``with`` block, in this thread; the tuner reads them when it starts benchmarking
and hands a copy of each tensor to every GPU that times configurations (:func:`captured_supply`).
"""
from __future__ import annotations

import threading

__all__ = ["set_autotune_inputs", "get_autotune_inputs", "AutotuneInputsCapture", "captured_supply"]

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class AutotuneInputsCapture:
    """The context manager :func:`set_autotune_inputs` returns; nested blocks stack (the innermost wins)."""

    __slots__ = ("tensors",)

    def __init__(self, tensors: list):
        self.tensors = tensors

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        return False


def set_autotune_inputs(*args) -> AutotuneInputsCapture:
    """``with set_autotune_inputs(a, b, c):`` or ``with set_autotune_inputs([a, b, c]):``: tune with these
    inputs (see the module docstring)."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return AutotuneInputsCapture(list(args[0]))
    return AutotuneInputsCapture(list(args))


def get_autotune_inputs() -> list | None:
    """The inputs of the innermost ``set_autotune_inputs`` block open in this thread, or None."""
    stack = _stack()
    return stack[-1].tensors if stack else None


def captured_supply(inputs: list):
    """A tuner ``supply(params)`` that returns ``inputs``, its tensors copied once to each CUDA device it is asked
    on (the current device of the calling thread)."""
    frozen = list(inputs)
    per_device: dict = {}
    lock = threading.Lock()

    def supply(params):
        import torch

        if params is not None and len(params) != len(frozen):
            names = [getattr(p, "name", "?") for p in params]
            raise ValueError(f"set_autotune_inputs gave {len(frozen)} inputs, the kernel takes {len(params)} "
                             f"({', '.join(names)})")
        dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else \
            torch.device("cpu")
        with lock:
            if dev not in per_device:
                per_device[dev] = [t.to(dev).clone() if isinstance(t, torch.Tensor) else t for t in frozen]
            return per_device[dev]

    return supply
