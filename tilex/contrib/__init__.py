"""tilex.contrib: TileLang's ``tilelang.contrib`` names for the CUDA toolkit (:mod:`~tilex.contrib.nvcc`)."""
from . import nvcc
from .nvcc import compile_cuda

__all__ = ["nvcc", "compile_cuda"]
