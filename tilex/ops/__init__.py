"""Ready-to-call operators on torch tensors, built from the tile programs of :mod:`tilex.kernels`."""
from tilex.ops.attention import attention, attention_decode

__all__ = ["attention", "attention_decode"]
