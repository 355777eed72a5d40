"""``tilex.cuda.intrinsics``: the XOR-swizzled shared-memory layouts TileLang's CUDA intrinsics use
(:func:`get_swizzle_layout`, :func:`make_mma_swizzle_layout`), for ``T.annotate_layout``.

A row of a tile is cut into 16-byte chunks; in each group of `swizzle_bytes` / 16 chunks, chunk ``c`` of row ``r``
is stored at chunk ``c ^ (r % 8 // (8 // chunks))``, so the eight rows an ``ldmatrix`` (or a column walk) reads
fall into different shared-memory banks. The groups of a wide row are stored one after the other as whole
tiles (the layout's first output dimension)."""
from __future__ import annotations

import tvm

from tilex.language.layouts import Layout

__all__ = ["get_swizzle_layout", "make_mma_swizzle_layout"]


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
