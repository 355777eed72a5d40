"""Torch-side helpers for low-bit types (`tilex.dtypes`): value <-> code conversion, bit packing, and
group-wise weight quantization.

    from tilex import quant
    qw = quant.quantize(weight, "uint4", group_size=128, zero_point=True)   # weight: (N, K) float
    packed = quant.pack(qw.codes, qw.dtype)                                  # (N, K // 2) uint8
    w_hat = quant.dequantize(qw)                                             # (N, K) float16
"""
from tilex.quant.codes import decode, encode, raw_scale_exponent
from tilex.quant.packing import pack, unpack
from tilex.quant.quantize import QuantizedWeight, dequantize, quantize

__all__ = ["decode", "encode", "raw_scale_exponent", "pack", "unpack", "QuantizedWeight", "quantize", "dequantize"]
