"""`tilex.ops.quant_matmul`: Y = x @ W^T with a low-bit weight W (any 1-8-bit type of `tilex.dtypes`, group-wise
scales, optional zero-points), decoded in registers by the A16Wx program of :mod:`tilex.kernels.quant_matmul`.

    qw = tilex.quant.quantize(weight, "int4", group_size=128)      # weight (N, K), as nn.Linear stores it
    pw = tilex.ops.pack_weight(qw)                                 # once: pre-packed for the kernel
    y = tilex.ops.quant_matmul(x, pw)                              # x (M, K) float16 / bfloat16
"""
from tilex.kernels.quant_matmul import PackedWeight, pack_weight, quant_matmul_torch as quant_matmul

__all__ = ["PackedWeight", "pack_weight", "quant_matmul"]
