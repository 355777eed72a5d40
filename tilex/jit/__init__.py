"""tilex.jit: compiling tilex programs to callable kernels (disk cache, JITKernel; nvcc is driven by
:mod:`tilex.engine.nvcc`), and the ``@tilex.jit`` decorator.

This package is callable: ``tilex.jit(...)`` is :func:`tilex.jit.decorator.jit`, so TileLang's spelling works::

    @tilex.jit(out_idx=[-1])
    def matmul(M, N, K, bm=128, bn=128, bk=32): ...      # returns a T.prim_func

    kernel = matmul(1024, 1024, 1024)                    # compiled (once per argument list)

while ``tilex.jit.compile``, ``tilex.jit.cache``, ``from tilex.jit import JITKernel`` etc. work as for any
package (the module's class is :class:`CallableModule`, a ``types.ModuleType`` whose ``__call__`` forwards to
the decorator).
"""
import sys
import types

from tilex.engine.nvcc import TilexCompileError, compile_cuda

from . import cache, workspace
from .args import ArgChecker, ParamSpec
from .profiler import Profiler, TensorSupplyType
from .resources import FunctionResources, KernelResources, TilexPerformanceWarning
from .dtypes import torch_to_tvm_dtype, tvm_to_torch_dtype
from .kernel import JITKernel, compile
from .decorator import JitFactory, jit

__all__ = ["cache", "JITKernel", "ArgChecker", "ParamSpec", "compile", "compile_cuda",
           "TilexCompileError", "tvm_to_torch_dtype", "torch_to_tvm_dtype", "jit", "JitFactory", "Profiler",
           "TensorSupplyType", "KernelResources", "FunctionResources", "TilexPerformanceWarning"]


class CallableModule(types.ModuleType):
    """The class of the ``tilex.jit`` module: calling the module calls the :func:`jit` decorator
    (``@tilex.jit``, ``@tilex.jit(out_idx=...)``)."""

    def __call__(self, *args, **kwargs):
        return jit(*args, **kwargs)


sys.modules[__name__].__class__ = CallableModule
