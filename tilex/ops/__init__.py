"""Ready-to-call operators on torch tensors, built from the tile programs of :mod:`tilex.kernels`."""
from tilex.ops.attention import attention, attention_decode
from tilex.ops.quant import PackedWeight, auto_split_k, pack_weight, quant_matmul

__all__ = ["attention", "attention_decode", "PackedWeight", "auto_split_k", "pack_weight", "quant_matmul"]
