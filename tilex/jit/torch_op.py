"""A compiled kernel as a PyTorch custom operator (``torch.library.custom_op``).

The operator's schema follows the kernel's inputs (tensors, ``SymInt`` for integer scalars, ``float`` for
floating ones) and outputs. Its fake implementation makes empty tensors of the outputs' shapes, read from the
inputs the way the kernel's own call reads them (a symbolic size comes from the first input that carries it), so
``torch.compile(fullgraph=True)`` traces through the operator, symbolic sizes included, and Inductor calls the
kernel at run time. A kernel without outputs writes into its arguments: its operator declares every tensor input
mutated unless told which (``mutates_args``). The kernel runs on torch's current stream, so a CUDA graph
captures it.
"""
from __future__ import annotations

import threading

from tilex.jit.args import recipe_shape

__all__ = ["custom_op", "schema_of"]

#: the torch.library namespace of the operators (``torch.ops.tilex.<name>``)
NAMESPACE = "tilex"

_lock = threading.Lock()
_registered: dict = {}  # qualified name -> (kernel, op)


def _scalar_type(dtype: str) -> str:
    if dtype.startswith(("int", "uint")):
        return "SymInt"
    if dtype.startswith(("float", "bfloat")):
        return "float"
    if dtype == "bool":
        return "bool"
    raise TypeError(f"tilex: a scalar parameter of dtype {dtype} has no PyTorch schema type")


def schema_of(kernel, mutated=()) -> str:
    """The operator schema of `kernel`'s call, e.g. ``(Tensor A, Tensor B) -> Tensor``."""
    args = []
    for s in kernel._checker.inputs:
        if s.kind == "buffer":
            args.append(f"Tensor{'(a!)' if s.name in mutated else ''} {s.name}")
        else:
            args.append(f"{_scalar_type(s.dtype)} {s.name}")
    outs = kernel._checker.outputs
    ret = "()" if not outs else "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return f"({', '.join(args)}) -> {ret}"


def _fake(kernel):
    """The fake implementation: checks what a trace can check (dtype, rank, static sizes) and returns empty
    outputs of the right shapes on the first tensor input's device."""
    checker = kernel._checker
    inputs = checker.inputs
    first = next((pos for pos, s in enumerate(inputs) if s.kind == "buffer"), None)
    outs = list(zip(checker.output_recipes(), checker.outputs))

    def fake(*args):
        for pos, s in enumerate(inputs):
            if s.kind != "buffer":
                continue
            a = args[pos]
            if s.torch_dtype is not None and a.dtype != s.torch_dtype:
                raise TypeError(f"argument '{s.name}' (index {pos}): expected dtype {s.dtype}, got {a.dtype}")
            if a.dim() != len(s.shape):
                raise ValueError(f"argument '{s.name}' (index {pos}): expected {len(s.shape)} dimensions, got "
                                 f"{a.dim()}")
            for axis, d in enumerate(s.shape):
                if d.__class__ is int and a.shape[axis] != d:
                    raise ValueError(f"argument '{s.name}' (index {pos}): dimension {axis} must be {d}, got "
                                     f"{a.shape[axis]}")

        made = [args[first].new_empty(recipe_shape(args, recipe), dtype=s.torch_dtype) for recipe, s in outs]
        if not made:
            return None
        return made[0] if len(made) == 1 else tuple(made)

    return fake


def custom_op(kernel, name: str, mutates_args=None):
    """Register `kernel` as the PyTorch operator ``tilex::<name>`` (or ``<name>`` when it holds ``::``) and
    return it (call it like the kernel, or as ``torch.ops.tilex.<name>``). Registering the same kernel under
    the same name again returns the same operator; another kernel under a taken name is refused."""
    import torch

    qualname = name if "::" in name else f"{NAMESPACE}::{name}"
    with _lock:
        hit = _registered.get(qualname)
        if hit is not None:
            if hit[0] is kernel:
                return hit[1]
            raise ValueError(f"tilex: the operator name '{qualname}' is already taken by another kernel; "
                             "choose another name")
        checker = kernel._checker
        tensors = [s.name for s in checker.inputs if s.kind == "buffer"]
        if mutates_args is None:
            mutated = () if checker.outputs else tuple(tensors)
        else:
            mutated = tuple(mutates_args)
            unknown = [m for m in mutated if m not in tensors]
            if unknown:
                raise ValueError(f"tilex: mutates_args names {unknown}, which are not tensor inputs of the kernel "
                                 f"(those are {tensors})")

        def impl(*args):
            out = kernel(*args)
            return None if not checker.outputs else out

        op = torch.library.custom_op(qualname, impl, mutates_args=mutated, device_types="cuda",
                                     schema=schema_of(kernel, mutated))
        op.register_fake(_fake(kernel))
        _registered[qualname] = (kernel, op)
        return op
