"""``tilex.cuda.intrinsics``: TileLang's ``tilelang.cuda.intrinsics`` -- the XOR-swizzled shared-memory layouts
its CUDA intrinsics use (:func:`get_swizzle_layout`, :func:`make_mma_swizzle_layout`, for ``T.annotate_layout``),
the mma.sync fragment maps (:mod:`.layout`) and the warp-level MMA emitter :class:`TensorCoreIntrinEmitter`
(:mod:`.macro`: ldmatrix / mma.sync / accumulator stores written into a tile program by hand)."""
from __future__ import annotations

from tilex.cuda.intrinsics.layout.mma_layout import get_swizzle_layout, make_mma_swizzle_layout
from tilex.cuda.intrinsics.layout.utils import get_ldmatrix_offset, get_mma_micro_size, mma_store_index_map
from tilex.cuda.intrinsics.macro.mma_macro_generator import TensorCoreIntrinEmitter, not_provided

__all__ = ["get_swizzle_layout", "make_mma_swizzle_layout", "get_ldmatrix_offset", "get_mma_micro_size",
           "mma_store_index_map", "TensorCoreIntrinEmitter"]

#: TileLang's names here that tilex does not provide
NOT_PROVIDED = ("TensorCoreIntrinEmitterWithLadderTransform", "TensorCoreIntrinEmitterSM120")


def __getattr__(name):
    if name in NOT_PROVIDED:
        raise not_provided(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
