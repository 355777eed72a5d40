"""tilex.profiler: TileLang's ``tilelang.profiler`` names.

``from tilex.profiler import do_bench`` (TileLang's signature, :mod:`tilex.profiler.bench`) times any CUDA
callable; :class:`Profiler` is what ``kernel.get_profiler()`` returns (:mod:`tilex.jit.profiler`).
"""
from tilex.jit.profiler import Profiler
from tilex.utils.tensor import TensorSupplyType

from .bench import do_bench

__all__ = ["do_bench", "Profiler", "TensorSupplyType"]
