"""Import a PyTorch model into Relax the way tilex.relax.offload wants it: `from_exported_program`.

TVM 0.27's importer (``tvm.relax.frontend.torch.from_exported_program``) by default runs PyTorch's decompositions
first, which turn ``F.rms_norm`` and ``F.scaled_dot_product_attention`` into dozens of element-wise operators, and
it imports ``aten.linear`` as a matmul with ``out_dtype="float32"`` without a cast back, so every fp16 operator
after the first linear layer runs in fp32. This wrapper imports without the decompositions and with two converters
of its own: ``aten.linear`` as ``matmul(x, permute_dims(w)) (+ bias)`` in x's dtype (fp32 accumulation is the
matmul kernel's business), ``aten.rms_norm`` as ``relax.nn.rms_norm``. The rest is TVM's importer.
"""
from __future__ import annotations

from tvm import relax

__all__ = ["from_exported_program", "CONVERTERS"]


def _arg(node, imp, i, default=None):
    if i < len(node.args):
        a = node.args[i]
    else:
        return default
    return imp.env[a] if hasattr(a, "op") else a


def _linear(node, imp):
    bb = imp.block_builder
    x, w, b = _arg(node, imp, 0), _arg(node, imp, 1), _arg(node, imp, 2)
    y = bb.emit(relax.op.matmul(x, bb.emit(relax.op.permute_dims(w))))  # in x's dtype
    return bb.emit(relax.op.add(y, b)) if b is not None else y


def _rms_norm(node, imp):
    x, shape, w = _arg(node, imp, 0), _arg(node, imp, 1), _arg(node, imp, 2)
    eps = _arg(node, imp, 3)
    if eps is None:  # torch's default: the dtype's machine epsilon
        import torch

        eps = torch.finfo(getattr(torch, str(x.ty.dtype))).eps
    axes = list(range(-len(shape), 0))
    if w is None:
        w = relax.op.ones(relax.ShapeExpr(list(shape)), str(x.ty.dtype))
    return imp.block_builder.emit(relax.op.nn.rms_norm(x, w, axes=axes, epsilon=float(eps)))


#: the converters this importer adds to TVM's (by the ExportedProgram's operator names)
CONVERTERS = {"linear.default": _linear, "rms_norm.default": _rms_norm}


def from_exported_program(exported_program, *, keep_params_as_input=True, custom_convert_map=None, **kwargs):
    """``tvm.relax.frontend.torch.from_exported_program`` without PyTorch's decompositions and with
    :data:`CONVERTERS` (a `custom_convert_map` given here takes precedence); parameters stay function inputs by
    default (the weights are passed at run time, as the Relax VM takes them)."""
    from tvm.relax.frontend.torch import from_exported_program as tvm_import

    converters = dict(CONVERTERS)
    converters.update(custom_convert_map or {})
    kwargs.setdefault("run_ep_decomposition", False)
    return tvm_import(exported_program, keep_params_as_input=keep_params_as_input, custom_convert_map=converters,
                      **kwargs)
