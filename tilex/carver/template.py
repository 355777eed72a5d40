"""TileLang's carver templates (``tilelang.carver.template``): not implemented in tilex (see
:mod:`tilex.carver`); constructing one raises NotImplementedError."""
from __future__ import annotations

__all__ = ["BaseTemplate", "MatmulTemplate", "GEMVTemplate", "ElementwiseTemplate", "GeneralReductionTemplate",
           "FlashAttentionTemplate", "ConvTemplate"]


class BaseTemplate:
    """A carver template (not implemented)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"tilex.carver.template.{type(self).__name__}: TileLang's carver templates and "
                                  "their Roller recommendations are not implemented in tilex; list the "
                                  "configurations for tilex.autotune (top_k= ranks them with tilex's cost model)")


class MatmulTemplate(BaseTemplate):
    """TileLang's GEMM template (not implemented)."""


class GEMVTemplate(BaseTemplate):
    """TileLang's GEMV template (not implemented)."""


class ElementwiseTemplate(BaseTemplate):
    """TileLang's element-wise template (not implemented)."""


class GeneralReductionTemplate(BaseTemplate):
    """TileLang's reduction template (not implemented)."""


class FlashAttentionTemplate(BaseTemplate):
    """TileLang's attention template (not implemented)."""


class ConvTemplate(BaseTemplate):
    """TileLang's convolution template (not implemented)."""
