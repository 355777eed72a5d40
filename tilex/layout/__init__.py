"""tilex.layout: index layouts (shared memory) and register fragments (thread, local) as TVM PrimExprs."""
from ._expr import LayoutError, compile_numpy
from .layout import Layout
from .fragment import Fragment
from .swizzle import make_linear_layout, make_swizzled_layout, swizzle_applicable
from .mma import make_mma_a_fragment, make_mma_accumulator_fragment, make_mma_b_fragment
from .wgmma import (make_wgmma_a_fragment, make_wgmma_accumulator_fragment, make_wgmma_operand_layout,
                    wgmma_swizzle_bytes)

__all__ = [
    "Layout",
    "Fragment",
    "LayoutError",
    "make_swizzled_layout",
    "make_linear_layout",
    "swizzle_applicable",
    "make_mma_accumulator_fragment",
    "make_mma_a_fragment",
    "make_mma_b_fragment",
    "make_wgmma_operand_layout",
    "make_wgmma_accumulator_fragment",
    "make_wgmma_a_fragment",
    "wgmma_swizzle_bytes",
    "compile_numpy",
]
