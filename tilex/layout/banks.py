"""Shared-memory bank conflicts of warp accesses, and the XOR swizzle that removes them.

The model: shared memory has 32 banks of 4-byte words. A warp's access instruction is served in phases (all 32
threads for accesses of up to 4 bytes per thread, half warps for 8 bytes, quarter warps for 16 bytes: at most
128 bytes a phase); a phase takes as many wavefronts as the most distinct words any one bank must deliver (threads
reading the same word share it). Its conflicts are the wavefronts past the first, which is what ncu's
``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}`` counts. ldmatrix / stmatrix are modelled as their
16-byte row accesses (a phase per 8 rows).

The swizzles are CuTe's ``Swizzle<B, M, S>`` on byte offsets: the B bits starting at bit M + S are XORed into the B
bits starting at bit M (``o ^ ((o >> S) & (2^B - 1) << M)``). With M at least log2 of the widest access, vector
accesses stay contiguous; B = 1, 2, 3 with M = 4, S = 3 are the 32-, 64- and 128-byte modes TMA and the wgmma
descriptors know. :func:`synthesize` searches the family for the swizzle under which every access of a tile is
conflict-free (or has the fewest conflicts), preferring those modes, then fewer bits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Swizzle", "WarpAccess", "wavefronts", "conflicts", "synthesize", "row_vectors", "ldmatrix_rows",
           "column_elements", "TMA_MODES"]

BANKS = 32
WORD = 4
PHASE_BYTES = 128


@dataclass(frozen=True)
class Swizzle:
    """CuTe's Swizzle<bits, base, shift> on byte offsets (see the module docstring); bits 0 is the identity."""

    bits: int
    base: int
    shift: int

    def __post_init__(self):
        if self.bits < 0 or self.base < 0 or (self.bits and self.shift < self.bits):
            raise ValueError(f"Swizzle({self.bits}, {self.base}, {self.shift}): needs bits >= 0, base >= 0 and "
                             "shift >= bits (the XORed bits must not overlap the bits they are XORed into)")

    def __call__(self, offset):
        o = np.asarray(offset, dtype=np.int64)
        if not self.bits:
            return o
        mask = ((1 << self.bits) - 1) << (self.base + self.shift)
        return o ^ ((o & mask) >> self.shift)

    @property
    def span(self) -> int:
        """Bytes of the smallest aligned block the swizzle maps onto itself (a tile must be a multiple of it)."""
        return 1 << (self.base + self.shift + self.bits) if self.bits else 1

    def __str__(self):
        return f"Swizzle<{self.bits},{self.base},{self.shift}>" if self.bits else "identity"


IDENTITY = Swizzle(0, 0, 0)
#: the 32-, 64- and 128-byte swizzle modes of TMA and of the wgmma shared-memory descriptors
TMA_MODES = (Swizzle(1, 4, 3), Swizzle(2, 4, 3), Swizzle(3, 4, 3))


@dataclass(frozen=True)
class WarpAccess:
    """One shared-memory instruction of a warp: thread t touches bytes ``[addresses[t], addresses[t] + width)``
    (offsets into the tile, before any swizzle); threads that do not take part are left out."""

    addresses: tuple
    width: int
    name: str = ""

    def __post_init__(self):
        if self.width not in (1, 2, 4, 8, 16):
            raise ValueError(f"WarpAccess {self.name!r}: width {self.width} is not 1, 2, 4, 8 or 16 bytes")
        if len(self.addresses) > 32:
            raise ValueError(f"WarpAccess {self.name!r}: {len(self.addresses)} threads, a warp has 32")
        bad = [a for a in self.addresses if a % self.width]
        if bad:
            raise ValueError(f"WarpAccess {self.name!r}: address {bad[0]} is not aligned to its width {self.width}")

    def phases(self):
        """The threads of each phase: 128 bytes' worth of consecutive threads."""
        per = max(1, PHASE_BYTES // max(self.width, WORD)) if self.width > WORD else 32
        addrs = np.asarray(self.addresses, dtype=np.int64)
        return [addrs[i:i + per] for i in range(0, len(addrs), per)]


def wavefronts(access: WarpAccess, swizzle: Swizzle = IDENTITY) -> int:
    """Wavefronts the access takes with the tile laid out by `swizzle`."""
    total = 0
    words_per_access = max(1, access.width // WORD)
    for phase in access.phases():
        if not len(phase):
            continue
        start = swizzle(phase)
        words = np.unique((start[:, None] // WORD + np.arange(words_per_access)[None, :]).ravel())
        per_bank = np.bincount(words % BANKS, minlength=BANKS)
        total += int(per_bank.max())
    return total


def conflicts(accesses, swizzle: Swizzle = IDENTITY) -> int:
    """Bank conflicts (wavefronts past the first of every phase) of one access or a list of them."""
    if isinstance(accesses, WarpAccess):
        accesses = [accesses]
    return sum(wavefronts(a, swizzle) - sum(1 for p in a.phases() if len(p)) for a in accesses)


def _candidates(min_base, tile_bytes, max_bits):
    """Every Swizzle<B, M, S> with M >= min_base that maps the tile onto itself, the TMA modes first."""
    seen = []
    for s in TMA_MODES:
        if s.base >= min_base:
            seen.append(s)
    for bits in range(1, max_bits + 1):
        for base in range(min_base, 8):
            for shift in range(bits, 12):
                s = Swizzle(bits, base, shift)
                if s not in seen:
                    seen.append(s)
    return [s for s in seen if tile_bytes % s.span == 0]


def synthesize(accesses, tile_bytes: int, max_bits: int = 5):
    """(swizzle, conflicts): the swizzle of the tile (`tile_bytes` bytes) under which `accesses` have the fewest
    modelled conflicts; ties go to no swizzle, then a TMA / wgmma mode, then fewer bits. Every access keeps its
    vectors contiguous (the XORed bits sit above the widest access)."""
    accesses = list(accesses)
    if not accesses:
        return IDENTITY, 0
    widest = max(a.width for a in accesses)
    best = (conflicts(accesses), IDENTITY)
    if best[0] == 0:
        return IDENTITY, 0
    for s in _candidates(max(int(np.log2(widest)), 2), tile_bytes, max_bits):
        c = conflicts(accesses, s)
        if c < best[0]:
            best = (c, s)
            if c == 0:
                break
    return best[1], best[0]


# -- warp accesses of common instruction patterns (byte offsets into a row-major tile of `row_bytes` rows)

def row_vectors(row_bytes: int, width: int = 16, row0: int = 0, col0: int = 0, name="row vectors"):
    """32 threads storing / loading consecutive `width`-byte vectors along the rows from (row0, col0 bytes): a
    cp.async, a vectorized copy or a TMA-like row fill."""
    addrs = []
    for t in range(32):
        flat = col0 + t * width
        addrs.append((row0 + flat // row_bytes) * row_bytes + flat % row_bytes)
    return WarpAccess(tuple(addrs), width, name)


def ldmatrix_rows(row_bytes: int, row0: int = 0, col0: int = 0, matrices: int = 4, name="ldmatrix"):
    """ldmatrix.x`matrices` (or stmatrix) of 8x8 16-bit matrices from a K-major tile: matrix i covers rows
    row0 + 8 * (i % 2) .. + 8 at byte column col0 + 16 * (i // 2); thread t gives row t % 8 of matrix t // 8."""
    addrs = []
    for t in range(8 * matrices):
        i, r = divmod(t, 8)
        addrs.append((row0 + 8 * (i % 2) + r) * row_bytes + col0 + 16 * (i // 2))
    return WarpAccess(tuple(addrs), 16, name)


def column_elements(row_bytes: int, elem_bytes: int = 4, col: int = 0, row0: int = 0, name="column"):
    """Thread t reading element `col` of row row0 + t (a transpose, or a column reduction)."""
    return WarpAccess(tuple((row0 + t) * row_bytes + col * elem_bytes for t in range(32)), elem_bytes, name)
