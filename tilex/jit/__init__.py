"""tilex.jit: compiling tilex programs to callable kernels (nvcc driver, disk cache, JITKernel)."""
from . import nvcc  # registers the TVM CUDA callbacks
from . import cache
from .kernel import ArgChecker, JITKernel, ParamSpec, compile, torch_to_tvm_dtype, tvm_to_torch_dtype
from .nvcc import TilexCompileError, compile_cuda

__all__ = ["nvcc", "cache", "JITKernel", "ArgChecker", "ParamSpec", "compile", "compile_cuda",
           "TilexCompileError", "tvm_to_torch_dtype", "torch_to_tvm_dtype"]
