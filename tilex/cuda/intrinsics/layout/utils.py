"""Helpers of the mma.sync fragments under TileLang's names (``tilelang.cuda.intrinsics.layout.utils``): the
``ldmatrix`` row each lane points at, the accumulator's register -> element map, and the MMA tile sizes of an
element type."""
from __future__ import annotations

import tvm

from tilex.cuda.intrinsics.layout import mma_layout
from tilex.language.dtypes import canonical_dtype

__all__ = ["get_ldmatrix_offset", "mma_store_index_map", "mma_store_index_map_fp64", "get_mma_micro_size",
           "shared_16x16_to_mma_32x8_layout", "shared_16x32_to_mma_32x16_layout"]


def __getattr__(name):
    if name == "shared_32x16_to_mma_32x16_layout":
        raise NotImplementedError(f"tilex.cuda.intrinsics.layout.utils.{name} is not provided by tilex (no MMA "
                                  f"operand is stored that way); the fragment maps are in "
                                  f"tilex.cuda.intrinsics.layout.mma_layout")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_ldmatrix_offset(matrix, row_idx, col_idx, stride, dtype="float16", transposed=False):
    """``(row, col)`` in the stored tile where lane `row_idx` points ``ldmatrix.x4`` for operand `matrix` ("A" or
    "B") of `dtype`, stored transposed or not (A: M x K, transposed K x M; B: K x N, transposed N x K), plus
    `col_idx` along the row. `stride` (the tile's row length) is accepted for TileLang's signature; the offset does
    not depend on it. 8- and 32-bit operands have no transposing ldmatrix: only A as M x K and B as N x K."""
    if matrix not in ("A", "B"):
        raise ValueError(f"get_ldmatrix_offset: matrix must be 'A' or 'B', got {matrix!r}")
    bits = tvm.DataType(str(canonical_dtype(dtype))).bits
    if bits == 16:
        # the four 8 x 8 matrices come in the order of the operand's registers: for A (M x K) and B (K x N) the
        # lanes point at stored rows 0-15 of columns 0-7, then of columns 8-15; for A^T (K x M) and B^T (N x K)
        # at rows 0-7 of columns 0-7, of columns 8-15, then rows 8-15 the same way
        fn = (mma_layout.ldmatrix_trans_32x8_to_shared_16x16_layout if transposed
              else mma_layout.ldmatrix_32x8_to_shared_16x16_layout)
        return fn(row_idx, col_idx)
    if bits not in (8, 32) and bits > 8:
        raise ValueError(f"get_ldmatrix_offset: no ldmatrix layout for {dtype}")
    k_contiguous = (matrix == "A" and not transposed) or (matrix == "B" and transposed)
    if not k_contiguous:
        raise ValueError(f"get_ldmatrix_offset: ldmatrix loads {bits}-bit operands only with K contiguous (A as "
                         f"M x K, B as N x K), got matrix {matrix} with transposed={transposed}")
    if bits == 32:
        fn = (mma_layout.ldmatrix_32x4_to_shared_16x8_layout_a if matrix == "A"
              else mma_layout.ldmatrix_32x4_to_shared_16x8_layout_b)
        return fn(row_idx, col_idx)
    fn = (mma_layout.ldmatrix_32x16_to_shared_16x32_layout_a if matrix == "A"
          else mma_layout.ldmatrix_32x16_to_shared_16x32_layout_b)
    row, col = fn(row_idx, col_idx)
    return row, col * (8 // bits)  # sub-byte elements: `col` counts bytes


def mma_store_index_map(thread_id, local_id):
    """``(row, col)`` in a 16 x 16 output tile of accumulator register `local_id` of lane `thread_id` (two m16n8
    MMAs side by side)."""
    return mma_layout.mma_store_32x8_to_shared_16x16_layout(thread_id, local_id)


def mma_store_index_map_fp64(thread_id, local_id):
    """``(row, col)`` in an 8 x 8 output tile (m8n8) of accumulator register `local_id` of lane `thread_id`."""
    return mma_layout.mma_store_32x2_to_shared_8x8_layout_fp64(thread_id, local_id)


def get_mma_micro_size(dtype):
    """``(micro_size_x, micro_size_y, micro_size_k)`` of the MMA tile of `dtype`: 16 x 16 x 16, K 32 for 8-bit
    types (int8, float8)."""
    bits = tvm.DataType(str(canonical_dtype(dtype))).bits
    return 16, 16, (32 if bits == 8 else 16)


shared_16x16_to_mma_32x8_layout = mma_layout.shared_16x16_to_mma_32x8_layout_sr_a
shared_16x32_to_mma_32x16_layout = mma_layout.shared_16x32_to_mma_32x16_layout_sr_a
