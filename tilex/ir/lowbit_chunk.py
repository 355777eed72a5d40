"""The packed *chunk* of low-bit codes that the register decoders of ``src/tilex/lowbit.h`` read (pure Python).

A chunk is 32 codes ``c[0..31]`` of one b-bit type (b = 1..8) stored in exactly b 32-bit words. Decoding gives 16
registers, each a pair of 16-bit floats: register j holds c[2j] in its low half and c[2j+1] in its high half.

* Planes. The words are split into planes of power-of-two widths, from the code's low bits up (:data:`PLANES`):
  b=8: [8]; 7: [4, 2, 1]; 6: [4, 2]; 5: [4, 1]; 4: [4]; 3: [2, 1]; 2: [2]; 1: [1]. The plane of width p holds
  bits [o, o+p) of every code (o: the sum of the widths of the planes below it) in p consecutive words, and the
  planes follow one another in that order, so the chunk is b words.
* Inside a plane of width p (words w[0..p-1]), word q holds the p-bit fields of the pairs j = q*(16/p) + i,
  i = 0 .. 16/p - 1: the field of c[2j] at bits [p*i, p*i + p) of w[q], that of c[2j+1] at bits
  [16 + p*i, 16 + p*i + p).

So ``(w[q] >> (p*i)) & ((2**p - 1) * 0x00010001)`` gives both fields of pair j at once, at bits 0 and 16: a
decoder works on the two halves of a register together. The GEMM kernels and the weight pre-packer depend on
this layout exactly; this module is its reference.
"""
from __future__ import annotations

__all__ = ["PLANES", "CODES", "PAIRS", "plane_offsets", "pack_chunk", "unpack_chunk", "raw_scale_exponent"]

#: codes per chunk, and 16-bit pairs (decoded registers) per chunk
CODES = 32
PAIRS = 16

#: bits -> plane widths, from the code's low bits up
PLANES = {8: (8,), 7: (4, 2, 1), 6: (4, 2), 5: (4, 1), 4: (4,), 3: (2, 1), 2: (2,), 1: (1,)}


def plane_offsets(bits: int) -> list[tuple[int, int, int]]:
    """``(width p, first code bit o, first word)`` of each plane of a `bits`-bit chunk, lowest plane first."""
    _check_bits(bits)
    out, o = [], 0
    for p in PLANES[bits]:
        out.append((p, o, o))  # a plane of width p takes p words, so its first word is also its first bit
        o += p
    return out


def pack_chunk(codes: list[int], bits: int) -> list[int]:
    """The `bits` words (ints in [0, 2**32)) of the chunk holding the 32 `codes` (ints in [0, 2**bits))."""
    _check_bits(bits)
    codes = list(codes)
    if len(codes) != CODES:
        raise ValueError(f"pack_chunk: a chunk holds {CODES} codes, got {len(codes)}")
    for c in codes:
        if not isinstance(c, int) or not 0 <= c < 1 << bits:
            raise ValueError(f"pack_chunk: code {c!r} is not a {bits}-bit code")
    words = [0] * bits
    for p, o, first in plane_offsets(bits):
        per_word, mask = 16 // p, (1 << p) - 1
        for j in range(PAIRS):
            q, i = divmod(j, per_word)
            lo, hi = (codes[2 * j] >> o) & mask, (codes[2 * j + 1] >> o) & mask
            words[first + q] |= (lo << (p * i)) | (hi << (16 + p * i))
    return words


def unpack_chunk(words: list[int], bits: int) -> list[int]:
    """The 32 codes of the chunk `words` (`bits` ints in [0, 2**32)); inverse of :func:`pack_chunk`."""
    _check_bits(bits)
    words = list(words)
    if len(words) != bits:
        raise ValueError(f"unpack_chunk: a {bits}-bit chunk is {bits} words, got {len(words)}")
    for w in words:
        if not isinstance(w, int) or not 0 <= w < 1 << 32:
            raise ValueError(f"unpack_chunk: {w!r} is not a 32-bit word")
    codes = [0] * CODES
    for p, o, first in plane_offsets(bits):
        per_word, mask = 16 // p, (1 << p) - 1
        for j in range(PAIRS):
            q, i = divmod(j, per_word)
            w = words[first + q]
            codes[2 * j] |= ((w >> (p * i)) & mask) << o
            codes[2 * j + 1] |= ((w >> (16 + p * i)) & mask) << o
    return codes


def _check_bits(bits):
    if bits not in PLANES:
        raise ValueError(f"chunks hold 1..8-bit codes, got bits={bits!r}")


#: exponent bias of the decoders' targets
_TARGET_BIAS = {"float16": 15, "bfloat16": 127}


def raw_scale_exponent(kind: str, exponent: int, mantissa: int, act: str):
    """k where a float type's *raw* decode into `act` gives value * 2^-k, or None where there is no raw decode.

    The decoders place a float's exponent and mantissa fields straight into the target's, which reads them with
    the target's bias: the value times 2^-(target bias - type bias). The full decode multiplies by 2^k (an exact
    fma); the raw one leaves that to a scale that already carries 2^k, saving one fma per pair. Not offered for
    integers, for float8_e4m3fn (its NaN and sm_89 conversion), for 5-exponent-bit types in bfloat16 (inf / NaN
    fix-ups) or where k is 0."""
    if kind != "float" or act not in _TARGET_BIAS or (exponent, mantissa) == (4, 3):
        return None
    if exponent == 5 and act == "bfloat16":
        return None
    k = _TARGET_BIAS[act] - ((1 << (exponent - 1)) - 1)
    return k if k > 0 else None
