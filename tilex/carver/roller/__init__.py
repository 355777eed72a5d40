"""TileLang's Roller recommender (``tilelang.carver.roller``): not implemented in tilex (see :mod:`tilex.carver`)."""
from . import rasterization

__all__ = ["rasterization"]
