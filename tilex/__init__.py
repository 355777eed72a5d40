"""tilex: TileLang-style tile programs compiled through Apache TVM's CUDA codegen.

    import tilex
    kernel = tilex.compile(prim_func, out_idx=-1)      # target="auto": the current GPU's arch
    C = kernel(A, B)                                   # torch CUDA tensors in, outputs allocated

See README.md.
"""
__version__ = "0.1.0"

from . import env  # noqa: E402
from .jit import JITKernel, TilexCompileError, compile  # noqa: E402,A004
from .autotuner import autotune, AutoTuner  # noqa: E402

__all__ = ["__version__", "compile", "JITKernel", "TilexCompileError", "env", "autotune", "AutoTuner"]
