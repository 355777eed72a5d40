"""Little-endian bit packing of low-bit codes into bytes along one dimension.

Element i of the packed dimension occupies bits [i*b, (i+1)*b) of the byte stream, bit 0 being the least
significant bit of byte 0; an element may straddle two bytes (b = 3, 5, 6, 7). For b = 4, element 2j is the
low nibble of byte j.
"""
import torch

from tilex import dtypes
from tilex.quant.codes import check_codes


def _bit_positions(count, device):
    return torch.arange(count, dtype=torch.uint8, device=device)


def pack(codes, dtype, dim=-1):
    """Pack unpacked uint8 `codes` of `dtype` along `dim` into uint8 bytes (length * bits / 8 of them)."""
    dtype = dtypes.lookup(dtype)
    check_codes(codes, dtype)
    x = codes.to(torch.uint8).movedim(dim, -1)
    length, bits = x.shape[-1], dtype.bits
    if length * bits % 8:
        raise ValueError(f"cannot pack {length} elements of {bits} bits ({dtype.name}) along dim {dim}: "
                         f"{length} * {bits} = {length * bits} bits is not a whole number of bytes")
    stream = (x.unsqueeze(-1) >> _bit_positions(bits, x.device)) & 1  # (..., length, bits), LSB first
    stream = stream.reshape(*x.shape[:-1], length * bits // 8, 8)
    packed = (stream << _bit_positions(8, x.device)).sum(-1, dtype=torch.uint8)  # disjoint bits: sum == or
    return packed.movedim(-1, dim).contiguous()


def unpack(packed, dtype, length, dim=-1):
    """Inverse of `pack`: `length` uint8 codes of `dtype` along `dim` from the packed bytes."""
    dtype = dtypes.lookup(dtype)
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise ValueError(f"packed must be a uint8 torch tensor, got "
                         f"{packed.dtype if isinstance(packed, torch.Tensor) else type(packed).__name__}")
    bits = dtype.bits
    if length < 0 or length * bits % 8:
        raise ValueError(f"cannot unpack {length} elements of {bits} bits ({dtype.name}): "
                         f"{length} * {bits} = {length * bits} bits is not a whole number of bytes")
    x = packed.movedim(dim, -1)
    if x.shape[-1] != length * bits // 8:
        raise ValueError(f"{length} elements of {bits} bits ({dtype.name}) take {length * bits // 8} bytes, "
                         f"but dim {dim} of packed has {x.shape[-1]}")
    stream = (x.unsqueeze(-1) >> _bit_positions(8, x.device)) & 1  # (..., nbytes, 8), LSB first
    stream = stream.reshape(*x.shape[:-1], length, bits)
    codes = (stream << _bit_positions(bits, x.device)).sum(-1, dtype=torch.uint8)
    return codes.movedim(-1, dim).contiguous()
