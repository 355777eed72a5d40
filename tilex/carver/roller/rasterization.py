"""Rasterization plans of TileLang's Roller hints (``tilelang.carver.roller.rasterization``). The names exist so
that a program comparing a hint's plan with them imports; Roller hints are not implemented in tilex, so none is
ever made, and constructing a plan raises NotImplementedError."""
from __future__ import annotations

__all__ = ["Rasterization", "NoRasterization", "Rasterization2DRow", "Rasterization2DColumn"]


class Rasterization:
    """A Roller rasterization plan (not implemented)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"tilex.carver.roller.rasterization.{type(self).__name__}: Roller hints are not "
                                  "implemented in tilex (T.use_swizzle sets a kernel's rasterization)")


class NoRasterization(Rasterization):
    """The plan "no rasterization" (not implemented)."""


class Rasterization2DRow(Rasterization):
    """Row-panel rasterization (not implemented)."""


class Rasterization2DColumn(Rasterization):
    """Column-panel rasterization (not implemented)."""
