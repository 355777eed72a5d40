"""Index maps of the mma.sync register fragments and the XOR-swizzled shared tiles they are loaded from, under
TileLang's names (``tilelang.cuda.intrinsics.layout.mma_layout``).

Fragment maps (warp-level, one MMA tile; PTX ISA "Matrix Fragments for mma.m16n8k*"): a lane's registers hold
``local_size`` elements of the tile; ``groupID = lane // 4`` picks the row (of A and C) or the column (of B), and
``lane % 4`` the position inside it.

* ``<instr>_<lanes>x<regs>_to_shared_<rows>x<cols>_layout(thread_id, local_id)`` -> ``(row, col)``: the element of
  the tile that register `local_id` of lane `thread_id` holds (``mma_load_*``: operand registers; ``mma_store_*``:
  accumulator registers, two m16n8 tiles side by side for n16; ``ldmatrix_*``: the element lane `thread_id` points
  ``ldmatrix.x4`` at -- the start of its 16-byte row -- when `local_id` is 0).
* ``shared_<rows>x<cols>_to_mma_<lanes>x<regs>_layout_{sr,rs}_{a,b}(i, j)`` -> ``(thread_id, local_id)``: the
  inverse, for a tile stored spatial x reduction (``sr``: A as M x K, B as N x K) or reduction x spatial (``rs``).

Swizzle (:func:`get_swizzle_layout`, :func:`make_mma_swizzle_layout`): a row of a tile is cut into 16-byte chunks;
in each group of `swizzle_bytes` / 16 chunks, chunk ``c`` of row ``r`` is stored at chunk
``c ^ (r % 8 // (8 // chunks))``, so the eight rows an ``ldmatrix`` (or a column walk) reads fall into different
shared-memory banks. The groups of a wide row are stored one after the other as whole tiles (the layout's first
output dimension).

TileLang's maps of the fp4 (e2m1, m16n8k64) fragments and of Metal's cooperative tensors are not provided (tilex
has no such MMA): importing them raises NotImplementedError naming them.
"""
from __future__ import annotations

import tvm

from tilex.language.layouts import Layout

__all__ = [
    "get_swizzle_layout", "make_mma_swizzle_layout",
    # ldmatrix row starts
    "ldmatrix_32x4_to_shared_16x8_layout_a", "ldmatrix_32x4_to_shared_16x8_layout_b",
    "ldmatrix_32x8_to_shared_16x16_layout", "ldmatrix_trans_32x8_to_shared_16x16_layout",
    "ldmatrix_32x16_to_shared_16x32_layout_a", "ldmatrix_32x16_to_shared_16x32_layout_b",
    # registers -> elements
    "mma_store_32x8_to_shared_16x16_layout", "mma_32x8_to_shared_16x16_layout",
    "mma_store_32x2_to_shared_8x8_layout_fp64",
    "mma_load_a_32x4_to_shared_16x8_layout", "mma_load_b_32x4_to_shared_16x8_layout",
    "mma_load_a_32x8_to_shared_16x16_layout", "mma_load_b_32x8_to_shared_16x16_layout",
    "mma_load_a_32x16_to_shared_16x32_layout", "mma_load_b_32x16_to_shared_16x32_layout",
    # elements -> registers
    "shared_16x8_to_mma_a_32x4_layout", "shared_16x8_to_mma_a_32x4_layout_trans",
    "shared_16x8_to_mma_b_32x4_layout", "shared_16x8_to_mma_b_32x4_layout_trans",
    "shared_16x16_to_mma_a_32x8_layout", "shared_16x16_to_mma_a_32x8_layout_trans",
    "shared_16x16_to_mma_b_32x8_layout", "shared_16x16_to_mma_b_32x8_layout_trans",
    "shared_16x32_to_mma_a_32x16_layout", "shared_32x16_to_mma_a_32x16_layout_trans",
    "shared_16x32_to_mma_b_32x16_layout", "shared_32x16_to_mma_b_32x16_layout_trans",
    "shared_16x8_to_mma_32x4_layout_sr_a", "shared_16x8_to_mma_32x4_layout_sr_b",
    "shared_16x8_to_mma_32x4_layout_rs_a", "shared_16x8_to_mma_32x4_layout_rs_b",
    "shared_16x16_to_mma_32x8_layout_sr_a", "shared_16x16_to_mma_32x8_layout_sr_b",
    "shared_16x16_to_mma_32x8_layout_rs_a", "shared_16x16_to_mma_32x8_layout_rs_b",
    "shared_16x32_to_mma_32x16_layout_sr_a", "shared_16x32_to_mma_32x16_layout_sr_b",
    "shared_16x32_to_mma_32x16_layout_rs_a", "shared_16x32_to_mma_32x16_layout_rs_b",
    # one lane per pair of rows
    "shared_16x16_to_mma_32x8_smoothlayout", "shared_16x32_to_mma_32x16_smoothlayout",
    "shared_32x16_to_mma_32x16_smoothlayout",
]

#: TileLang's names in this module that tilex does not provide (fp4 e2m1 fragments, Metal cooperative tensors)
NOT_PROVIDED = (
    "metal_ct_store_32x16_to_16x32_layout", "metal_ct_store_index_map",
    "shared_16x64_to_mma_a_32x32_layout", "shared_64x16_to_mma_a_32x32_layout_trans",
    "shared_8x64_to_mma_b_32x16_layout", "shared_64x8_to_mma_b_32x16_layout_trans",
    "shared_16x64_to_mma_32x32_layout_sr_a", "shared_16x64_to_mma_32x32_layout_rs_a",
    "shared_8x64_to_mma_32x16_layout_sr_b", "shared_8x64_to_mma_32x16_layout_rs_b",
    "ldmatrix_32x32_to_shared_16x64_layout_a", "ldmatrix_32x32_to_shared_16x64_layout_b",
    "ldmatrix_32x16_to_shared_8x64_layout_b", "mma_load_a_32x32_to_shared_16x64_layout",
    "mma_load_b_32x16_to_shared_8x64_layout",
)


def __getattr__(name):
    if name in NOT_PROVIDED:
        raise NotImplementedError(f"tilex.cuda.intrinsics.layout.mma_layout.{name} is not provided by tilex: it "
                                  f"describes a fragment (fp4 e2m1 mma or Metal) tilex has no MMA for")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- ldmatrix.x4: the element each lane points at (local_id 0: the start of its 16-byte row) ---------------------
# Lanes 8q .. 8q+7 give the eight row addresses of matrix q; the rows are 16 bytes (8 x 16-bit, 16 x 8-bit or
# 4 x 32-bit elements).
def ldmatrix_32x4_to_shared_16x8_layout_a(thread_id, local_id):
    """32-bit A (16 x 8, M x K): matrices (rows 0-7, k 0-3), (rows 8-15, k 0-3), (rows 0-7, k 4-7), (8-15, 4-7)."""
    return thread_id % 16, thread_id // 16 * 4 + local_id % 4


def ldmatrix_32x4_to_shared_16x8_layout_b(thread_id, local_id):
    """32-bit B (16 x 8, N x K): matrices (n 0-7, k 0-3), (n 0-7, k 4-7), (n 8-15, k 0-3), (n 8-15, k 4-7)."""
    return thread_id // 16 * 8 + thread_id % 8, thread_id % 16 // 8 * 4 + local_id % 4


def ldmatrix_32x8_to_shared_16x16_layout(thread_id, local_id):
    """16-bit, 16 x 16: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (0-7, 8-15), (8-15, 8-15)."""
    return thread_id % 16, thread_id // 16 * 8 + local_id % 8


def ldmatrix_trans_32x8_to_shared_16x16_layout(thread_id, local_id):
    """16-bit, 16 x 16: matrices (rows 0-7, cols 0-7), (rows 0-7, cols 8-15), (8-15, 0-7), (8-15, 8-15)."""
    return thread_id // 16 * 8 + thread_id % 8, thread_id % 16 // 8 * 8 + local_id % 8


def ldmatrix_32x16_to_shared_16x32_layout_a(thread_id, local_id):
    """8-bit A (16 x 32, M x K): matrices (rows 0-7, k 0-15), (rows 8-15, k 0-15), (0-7, 16-31), (8-15, 16-31)."""
    return thread_id % 16, thread_id // 16 * 16 + local_id


def ldmatrix_32x16_to_shared_16x32_layout_b(thread_id, local_id):
    """8-bit B (16 x 32, N x K): matrices (n 0-7, k 0-15), (n 0-7, k 16-31), (8-15, 0-15), (8-15, 16-31)."""
    return thread_id // 16 * 8 + thread_id % 8, thread_id % 16 // 8 * 16 + local_id


# ---- registers -> elements --------------------------------------------------------------------------------------
def mma_store_32x8_to_shared_16x16_layout(thread_id, local_id):
    """The accumulators of two m16n8 MMAs side by side (16 x 16): registers 0-3 the left tile, 4-7 the right;
    in each, c0 c1 on row groupID and c2 c3 on row groupID + 8, at columns 2 * (lane % 4) + (0, 1)."""
    row = local_id % 4 // 2 * 8 + thread_id // 4
    col = local_id // 4 * 8 + thread_id % 4 * 2 + local_id % 2
    return row, col


mma_32x8_to_shared_16x16_layout = mma_store_32x8_to_shared_16x16_layout


def mma_store_32x2_to_shared_8x8_layout_fp64(thread_id, local_id):
    """The accumulator of an m8n8 MMA (8 x 8): row groupID, columns 2 * (lane % 4) + (0, 1)."""
    return thread_id // 4, thread_id % 4 * 2 + local_id


def mma_load_a_32x4_to_shared_16x8_layout(thread_id, local_id):
    """A of m16n8k8 (tf32, 16 x 8): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)."""
    return local_id % 2 * 8 + thread_id // 4, local_id // 2 * 4 + thread_id % 4


def mma_load_b_32x4_to_shared_16x8_layout(thread_id, local_id):
    """B of two m16n8k8 (tf32) side by side (16 x 8, N x K): registers 0-1 n 0-7, 2-3 n 8-15; k t and t + 4."""
    return local_id // 2 * 8 + thread_id // 4, local_id % 2 * 4 + thread_id % 4


def mma_load_a_32x8_to_shared_16x16_layout(thread_id, local_id):
    """A of m16n8k16 (16-bit, 16 x 16): pairs on row g (0-1), g + 8 (2-3), g (4-5, k + 8), g + 8 (6-7, k + 8)."""
    row = local_id % 4 // 2 * 8 + thread_id // 4
    col = local_id // 4 * 8 + thread_id % 4 * 2 + local_id % 2
    return row, col


def mma_load_b_32x8_to_shared_16x16_layout(thread_id, local_id):
    """B of two m16n8k16 side by side (16-bit, 16 x 16, N x K): registers 0-3 n 0-7, 4-7 n 8-15; in each, k
    2 * (lane % 4) + (0, 1) and + 8."""
    row = local_id // 4 * 8 + thread_id // 4
    col = local_id % 4 // 2 * 8 + thread_id % 4 * 2 + local_id % 2
    return row, col


def mma_load_a_32x16_to_shared_16x32_layout(thread_id, local_id):
    """A of m16n8k32 (8-bit, 16 x 32): quads on row g (0-3), g + 8 (4-7), g (8-11, k + 16), g + 8 (12-15)."""
    row = local_id % 8 // 4 * 8 + thread_id // 4
    col = local_id // 8 * 16 + thread_id % 4 * 4 + local_id % 4
    return row, col


def mma_load_b_32x16_to_shared_16x32_layout(thread_id, local_id):
    """B of two m16n8k32 side by side (8-bit, 16 x 32, N x K): registers 0-7 n 0-7, 8-15 n 8-15; in each, k
    4 * (lane % 4) + (0..3) and + 16."""
    row = local_id // 8 * 8 + thread_id // 4
    col = local_id % 8 // 4 * 16 + thread_id % 4 * 4 + local_id % 4
    return row, col


# ---- elements -> registers (the inverses; sr: spatial x reduction, rs: reduction x spatial) --------------------
def shared_16x8_to_mma_a_32x4_layout(i, j):
    return i % 8 * 4 + j % 4, j // 4 * 2 + i // 8


def shared_16x8_to_mma_a_32x4_layout_trans(i, j):
    return shared_16x8_to_mma_a_32x4_layout(j, i)


def shared_16x8_to_mma_b_32x4_layout(i, j):
    return i % 8 * 4 + j % 4, i // 8 * 2 + j // 4


def shared_16x8_to_mma_b_32x4_layout_trans(i, j):
    return shared_16x8_to_mma_b_32x4_layout(j, i)


def shared_16x16_to_mma_a_32x8_layout(i, j):
    return i % 8 * 4 + j % 8 // 2, j // 8 * 4 + i // 8 * 2 + j % 2


def shared_16x16_to_mma_a_32x8_layout_trans(i, j):
    return shared_16x16_to_mma_a_32x8_layout(j, i)


def shared_16x16_to_mma_b_32x8_layout(i, j):
    return i % 8 * 4 + j % 8 // 2, i // 8 * 4 + j // 8 * 2 + j % 2


def shared_16x16_to_mma_b_32x8_layout_trans(i, j):
    return shared_16x16_to_mma_b_32x8_layout(j, i)


def shared_16x32_to_mma_a_32x16_layout(i, j):
    return i % 8 * 4 + j % 16 // 4, j // 16 * 8 + i // 8 * 4 + j % 4


def shared_32x16_to_mma_a_32x16_layout_trans(i, j):
    return shared_16x32_to_mma_a_32x16_layout(j, i)


def shared_16x32_to_mma_b_32x16_layout(i, j):
    return i % 8 * 4 + j % 16 // 4, i // 8 * 8 + j // 16 * 4 + j % 4


def shared_32x16_to_mma_b_32x16_layout_trans(i, j):
    return shared_16x32_to_mma_b_32x16_layout(j, i)


shared_16x8_to_mma_32x4_layout_sr_a = shared_16x8_to_mma_a_32x4_layout
shared_16x8_to_mma_32x4_layout_sr_b = shared_16x8_to_mma_b_32x4_layout
shared_16x8_to_mma_32x4_layout_rs_a = shared_16x8_to_mma_a_32x4_layout_trans
shared_16x8_to_mma_32x4_layout_rs_b = shared_16x8_to_mma_b_32x4_layout_trans
shared_16x16_to_mma_32x8_layout_sr_a = shared_16x16_to_mma_a_32x8_layout
shared_16x16_to_mma_32x8_layout_sr_b = shared_16x16_to_mma_b_32x8_layout
shared_16x16_to_mma_32x8_layout_rs_a = shared_16x16_to_mma_a_32x8_layout_trans
shared_16x16_to_mma_32x8_layout_rs_b = shared_16x16_to_mma_b_32x8_layout_trans
shared_16x32_to_mma_32x16_layout_sr_a = shared_16x32_to_mma_a_32x16_layout
shared_16x32_to_mma_32x16_layout_sr_b = shared_16x32_to_mma_b_32x16_layout
shared_16x32_to_mma_32x16_layout_rs_a = shared_32x16_to_mma_a_32x16_layout_trans
shared_16x32_to_mma_32x16_layout_rs_b = shared_32x16_to_mma_b_32x16_layout_trans


def shared_16x16_to_mma_32x8_smoothlayout(i, j):
    """Row-major 16 x 16 as 32 rows of 8: (2 * i + j // 8, j % 8)."""
    return i * 2 + j // 8, j % 8


def shared_16x32_to_mma_32x16_smoothlayout(i, j):
    """Row-major 16 x 32 as 32 rows of 16: (2 * i + j // 16, j % 16)."""
    return i * 2 + j // 16, j % 16


def shared_32x16_to_mma_32x16_smoothlayout(i, j):
    """TileLang's map of a 32 x 16 tile: (2 * i + j // 16, j % 16)."""
    return i * 2 + j // 16, j % 16


# ---- swizzled shared tiles ----------------------------------------------------------------------------------------
def get_swizzle_layout(row_idx, col_idx, row_size, dtype, swizzle_bytes=None):
    """Where element (`row_idx`, `col_idx`) of a tile with rows of `row_size` elements of `dtype` goes:
    ``(group, row, column in the group)``. `swizzle_bytes` (32, 64 or 128; default the row's bytes up to 128) is
    the width of one swizzled group; a row must be a multiple of 32 bytes."""
    bits = tvm.DataType(str(dtype)).bits
    row_bytes = bits * int(row_size) // 8
    if row_bytes % 32:
        raise ValueError(f"get_swizzle_layout: a row of {row_size} x {dtype} is {row_bytes} bytes; the swizzle needs "
                         f"a multiple of 32 bytes")
    if swizzle_bytes is None:
        swizzle_bytes = min(128, row_bytes)
    if int(swizzle_bytes) not in (32, 64, 128):
        raise ValueError(f"get_swizzle_layout: swizzle_bytes must be 32, 64 or 128, got {swizzle_bytes}")
    per_chunk = 128 // bits  # elements in 16 bytes
    chunks = int(swizzle_bytes) // 16  # chunks in one swizzled group
    chunk = col_idx // per_chunk
    swizzled = (chunk % chunks) ^ (row_idx % 8 // (8 // chunks))
    return chunk // chunks, row_idx, swizzled * per_chunk + col_idx % per_chunk


def make_mma_swizzle_layout(shared_buf, is_smooth=False):
    """The swizzled layout (:func:`get_swizzle_layout`, on the last two dimensions) of a shared tile whose rows are
    a multiple of 64 bytes; the identity layout for other tiles or with `is_smooth`."""
    shape = list(shared_buf.shape)
    dtype = str(shared_buf.dtype)
    if len(shape) < 2:
        raise ValueError(f"make_mma_swizzle_layout: '{shared_buf.name}' must have at least 2 dimensions, got {shape}")
    bits = tvm.DataType(dtype).bits
    if is_smooth or (int(shape[-1]) * bits) % 512:
        return Layout(shape, lambda *idx: list(idx))

    def place(*idx):
        return [*idx[:-2], *get_swizzle_layout(idx[-2], idx[-1], shape[-1], dtype)]

    return Layout(shape, place)
