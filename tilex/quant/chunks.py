"""Chunks of packed codes (the format of `tilex.ir.lowbit_chunk`, which the register decoders read), built and
taken apart for whole tensors at once."""
from __future__ import annotations

import torch

from tilex.ir.lowbit_chunk import CODES, PAIRS, plane_offsets


def pack_chunks(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """codes (..., 32) of `bits`-bit codes (any integer dtype, values < 2**bits) -> int32 words (..., bits)."""
    if codes.shape[-1] != CODES:
        raise ValueError(f"pack_chunks: the last dimension must hold {CODES} codes, got {tuple(codes.shape)}")
    c = codes.to(torch.int64).reshape(*codes.shape[:-1], PAIRS, 2)
    words = []
    for p, o, _ in plane_offsets(bits):
        per_word, mask = 16 // p, (1 << p) - 1
        field = ((c >> o) & mask).reshape(*codes.shape[:-1], p, per_word, 2)  # (..., word q, pair i, lo/hi)
        shift = torch.arange(per_word, device=codes.device) * p
        w = ((field[..., 0] << shift) | (field[..., 1] << (shift + 16))).sum(-1)  # disjoint bits: sum == or
        words.append(w)
    out = torch.cat(words, dim=-1)
    return (out - ((out >> 31) << 32)).to(torch.int32)  # two's complement view of the unsigned words


def unpack_chunks(words: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 words (..., bits) -> uint8 codes (..., 32); inverse of :func:`pack_chunks`."""
    if words.shape[-1] != bits:
        raise ValueError(f"unpack_chunks: the last dimension must hold {bits} words, got {tuple(words.shape)}")
    w = words.to(torch.int64) & 0xFFFFFFFF
    codes = torch.zeros(*words.shape[:-1], PAIRS, 2, dtype=torch.int64, device=words.device)
    for p, o, first in plane_offsets(bits):
        per_word, mask = 16 // p, (1 << p) - 1
        plane = w[..., first:first + p].unsqueeze(-1)  # (..., q, 1)
        shift = torch.arange(per_word, device=words.device) * p
        lo = (plane >> shift) & mask
        hi = (plane >> (shift + 16)) & mask
        codes |= (torch.stack([lo, hi], dim=-1).reshape(*words.shape[:-1], PAIRS, 2)) << o
    return codes.reshape(*words.shape[:-1], CODES).to(torch.uint8)
