"""`tilex.ops.attention`: FlashAttention forward and backward on torch tensors, differentiable.

``attention(q, k, v, causal=False, sm_scale=None, layout="bhsd")`` runs the forward tile program of
:mod:`tilex.kernels.attention.forward` (per-shape block configuration) and, when any input requires grad, records a
``torch.autograd.Function`` whose backward runs :mod:`tilex.kernels.attention.backward` (dQ, dK, dV).
``attention_decode`` is the split-KV decoding of :mod:`tilex.kernels.attention.decode`.
"""
import torch

from tilex.kernels.attention.backward import attention_backward
from tilex.kernels.attention.decode import attention_decode
from tilex.kernels.attention.forward import attention_forward


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, config):
        o, lse = attention_forward(q, k, v, causal=causal, sm_scale=sm_scale, config=config)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, o, do.contiguous(), lse, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None, None


def attention(q, k, v, causal=False, sm_scale=None, layout="bhsd", config=None):
    """Scaled dot-product attention of fp16/bf16 CUDA tensors (``[b, h, s, d]``; ``[b, s, h, d]`` with
    layout="bshd"; k/v may have fewer heads: GQA). Differentiable for BHSD MHA (k, v with q's heads). `config`:
    the forward's block configuration, None for the per-head-dim default, ``"tune"`` to time a few on the first
    call of each shape (see `tilex.kernels.attention.forward.attention_forward`)."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if not needs_grad:
        return attention_forward(q, k, v, causal=causal, sm_scale=sm_scale, layout=layout, config=config)[0]
    if layout != "bhsd" or k.shape[1] != q.shape[1]:
        raise NotImplementedError("tilex.ops.attention: the backward supports BHSD multi-head attention (k and v "
                                  "with q's number of heads); call it under torch.no_grad() for other inputs")
    return _Attention.apply(q, k, v, bool(causal), sm_scale, config)


__all__ = ["attention", "attention_decode"]
