"""Timing CUDA callables with CUDA events and an L2 flush between repetitions (no triton needed).

The timing core lives in :mod:`tilex.jit.bench` (``JITKernel.get_profiler().do_bench`` uses it too, and jit sits
below the autotuner); the tuner calls it through this module's :func:`do_bench`.
"""
from tilex.jit.bench import L2_FLUSH_BYTES, do_bench

__all__ = ["do_bench", "L2_FLUSH_BYTES"]
