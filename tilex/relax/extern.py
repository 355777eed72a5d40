"""tilex kernels as external functions of a Relax module.

A tile program is compiled by tilex's own pipeline under a unique global symbol (``tilex_<name>_<digest>``), and
called from Relax with ``call_dps_packed``: Relax allocates the outputs (destination-passing style, the kernel's
outputs are its last parameters) and binds their symbolic sizes from the arguments' shapes. The compiled runtime
modules travel in the IRModule's ``external_mods`` attribute, which ``tvm.compile`` links into the executable, so
the VM finds each kernel by its symbol; everything else in the module goes through TVM's own pipeline.
"""
from __future__ import annotations

import hashlib

from tvm import relax

from tilex.jit import compile as compile_kernel

__all__ = ["compile_extern", "call_kernel", "attach_kernels", "output_types"]

EXTERNAL_MODS = "external_mods"  # the IRModule attribute tvm.compile links into the executable

_built: dict = {}  # (symbol, target, pass configs) -> JITKernel: a program is compiled once per process


def _digest(func, out_idx) -> str:
    return hashlib.sha256((func.script() + repr(out_idx)).encode()).hexdigest()[:12]


def compile_extern(func, name: str, out_idx=-1, target="auto", pass_configs=None):
    """`func` (a tile program) compiled under the symbol ``tilex_<name>_<digest of the program>``; its outputs
    (`out_idx`) must be its last parameters, as ``call_dps_packed`` passes them."""
    n = len(func.params)
    outs = sorted(i % n for i in ([out_idx] if isinstance(out_idx, int) else out_idx))
    if outs != list(range(n - len(outs), n)):
        raise ValueError(f"tilex.relax: the outputs of '{name}' (out_idx={out_idx}) must be its last parameters "
                         "for call_dps_packed")
    symbol = f"tilex_{name}_{_digest(func, outs)}"
    key = (symbol, str(target), repr(sorted((pass_configs or {}).items())))
    kernel = _built.get(key)
    if kernel is None:
        # not from the kernel cache: a module loaded from a shared library cannot be packed into another one
        # (the executable tvm.compile links), a freshly built one can
        kernel = _built[key] = compile_kernel(func.with_attr("global_symbol", symbol), out_idx=outs, target=target,
                                              pass_configs=pass_configs, cache=False)
    return kernel


def output_types(kernel, arg_types):
    """The Relax types of `kernel`'s outputs for arguments of types `arg_types` (TensorType, one per input): a
    symbolic size takes the argument dimension the kernel itself reads it from."""
    inputs = [p for p in kernel.params if not p.is_output]
    if len(arg_types) != len(inputs):
        raise ValueError(f"tilex.relax: kernel {kernel.symbol} takes {len(inputs)} inputs, got {len(arg_types)}")
    out = []
    for recipe, idx in zip(kernel.output_recipes(), kernel.out_idx):
        s = kernel.params[idx]
        dims = []
        for d in recipe:
            if d.__class__ is int:
                dims.append(d)
                continue
            pos, axis = d
            if axis is None:
                raise ValueError(f"tilex.relax: output '{s.name}' of {kernel.symbol} is sized by the scalar "
                                 f"'{inputs[pos].name}'; only sizes read from tensor inputs are supported")
            dims.append(arg_types[pos].shape.values[axis])
        out.append(relax.TensorType(dims, s.dtype))
    return out


def call_kernel(kernel, args, arg_types):
    """A Relax call of `kernel` on `args` (Relax expressions of types `arg_types`): a tensor, or a tuple of
    tensors for several outputs."""
    outs = output_types(kernel, arg_types)
    return relax.call_dps_packed(kernel.symbol, relax.Tuple(list(args)), outs if len(outs) > 1 else outs[0])


def attach_kernels(mod, kernels):
    """`mod` with the runtime modules of `kernels` in its ``external_mods`` (each symbol once)."""
    attrs = dict(mod.attrs) if mod.attrs is not None else {}
    mods = list(attrs.get(EXTERNAL_MODS, []))
    have = set()
    for m in mods:
        have.update(k.symbol for k in kernels if m.implements_function(k.symbol))
    for k in kernels:
        if k.symbol not in have:
            mods.append(k.module)
            have.add(k.symbol)
    return mod.with_attr(EXTERNAL_MODS, mods)
