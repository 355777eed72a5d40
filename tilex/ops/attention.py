"""`tilex.ops.attention`: FlashAttention forward and backward on torch tensors, differentiable and traceable.

``attention(q, k, v, causal=False, sm_scale=None, layout="bhsd")`` calls the PyTorch operator
``torch.ops.tilex.attention_fwd`` (the forward tile program of :mod:`tilex.kernels.attention.forward`, per-shape
block configuration), whose registered autograd formula calls ``torch.ops.tilex.attention_bwd`` (the programs of
:mod:`tilex.kernels.attention.backward`: dQ, dK, dV). Both operators have fake implementations, so
``torch.compile(fullgraph=True)`` traces the forward and the backward without graph breaks.
``attention_decode`` is the split-KV decoding of :mod:`tilex.kernels.attention.decode`.
"""
from typing import List, Optional, Tuple

import torch

from tilex.jit.torch_op import NAMESPACE
from tilex.kernels.attention.backward import attention_backward
from tilex.kernels.attention.decode import attention_decode
from tilex.kernels.attention.forward import attention_forward


@torch.library.custom_op(f"{NAMESPACE}::attention_fwd", mutates_args=())
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: Optional[float],
             layout: str, config: List[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    o, lse = attention_forward(q, k, v, causal=causal, sm_scale=sm_scale, layout=layout, config=config or None)
    return o, lse


@_forward.register_fake
def _(q, k, v, causal, sm_scale, layout, config):
    b, h, s = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhsd" else (q.shape[0], q.shape[2], q.shape[1])
    return torch.empty_like(q), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op(f"{NAMESPACE}::attention_bwd", mutates_args=())
def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor,
              lse: torch.Tensor, causal: bool, sm_scale: Optional[float]) -> Tuple[torch.Tensor, torch.Tensor,
                                                                                   torch.Tensor]:
    return attention_backward(q, k, v, o, do.contiguous(), lse, causal, sm_scale)


@_backward.register_fake
def _(q, k, v, o, do, lse, causal, sm_scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, sm_scale, _layout, _config = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.sm_scale = causal, sm_scale


def _grad(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = _backward(q, k, v, o, do, lse, ctx.causal, ctx.sm_scale)
    return dq, dk, dv, None, None, None, None


_forward.register_autograd(_grad, setup_context=_setup_context)


def attention(q, k, v, causal=False, sm_scale=None, layout="bhsd", config=None):
    """Scaled dot-product attention of fp16/bf16 CUDA tensors (``[b, h, s, d]``; ``[b, s, h, d]`` with
    layout="bshd"; k/v may have fewer heads: GQA). Differentiable for BHSD MHA (k, v with q's heads). `config`:
    the forward's block configuration (block_M, block_N, num_stages, threads), None for the per-head-dim default,
    ``"tune"`` to time a few on the first call of each shape (see
    `tilex.kernels.attention.forward.attention_forward`; not traceable by torch.compile)."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad and (layout != "bhsd" or k.shape[1] != q.shape[1] or k.shape[2] != q.shape[2]):
        raise NotImplementedError("tilex.ops.attention: the backward supports BHSD multi-head attention (k and v "
                                  "with q's number of heads and length); call it under torch.no_grad() for other "
                                  "inputs")
    if config == "tune":
        if needs_grad:
            raise NotImplementedError('tilex.ops.attention: config="tune" is for inference; pass a block '
                                      "configuration or None when gradients are needed")
        return attention_forward(q, k, v, causal=causal, sm_scale=sm_scale, layout=layout, config=config)[0]
    cfg = [int(c) for c in config] if config is not None else []
    return _forward(q, k, v, bool(causal), None if sm_scale is None else float(sm_scale), layout, cfg)[0]


__all__ = ["attention", "attention_decode"]
