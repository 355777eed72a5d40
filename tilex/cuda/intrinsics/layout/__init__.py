"""``tilex.cuda.intrinsics.layout``: TileLang's ``tilelang.cuda.intrinsics.layout`` -- the index maps of the
mma.sync register fragments and the swizzled shared tiles they are loaded from (:mod:`.mma_layout`), and their
helpers (:mod:`.utils`)."""
from tilex.cuda.intrinsics.layout.mma_layout import get_swizzle_layout, make_mma_swizzle_layout
from tilex.cuda.intrinsics.layout.utils import get_ldmatrix_offset, get_mma_micro_size, mma_store_index_map

__all__ = ["get_swizzle_layout", "make_mma_swizzle_layout", "get_ldmatrix_offset", "get_mma_micro_size",
           "mma_store_index_map"]
