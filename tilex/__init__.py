"""tilex: TileLang-style tile programs compiled through Apache TVM's CUDA codegen.

    import tilex
    kernel = tilex.compile(prim_func, out_idx=-1)      # target="auto": the current GPU's arch
    C = kernel(A, B)                                   # torch CUDA tensors in, outputs allocated

    @tilex.jit(out_idx=[-1])                           # or: a kernel factory that returns compiled kernels
    def matmul(M, N, K, bm=128, bn=128, bk=32): ...    # (returns a T.prim_func)
    kernel = matmul(1024, 1024, 1024)

``tilex.jit`` is both the JIT package (``tilex.jit.compile``, ``tilex.jit.JITKernel``, ...) and, called, the
``@tilex.jit`` decorator. See README.md.
"""
__version__ = "0.1.0"

from . import env  # noqa: E402
import tvm  # noqa: E402  (``tilex.tvm``: the installed TVM, as ``tilelang.tvm`` is TileLang's; see ir/tvm_fork.py)
from tvm import DataType  # noqa: E402  (``tilex.DataType``, as ``tilelang.DataType``: TVM's dtype class)
from .ir import tvm_fork as _tvm_fork  # noqa: E402

_tvm_fork.install()  # the names of TileLang's TVM fork that TVM 0.27 lacks (tvm.tirx.PrimExpr)
from . import dtypes  # noqa: E402  (torch-free; the torch-side helpers are tilex.quant)
from . import jit  # noqa: E402  (the package; calling it is the @tilex.jit decorator)
from .jit import JITKernel, TilexCompileError, TilexPerformanceWarning, compile  # noqa: E402,A004
from .jit.export import ExportError  # noqa: E402
from .jit.torch_op import custom_op  # noqa: E402
from .autotuner import autotune, AutoTuner  # noqa: E402
from .autotuner.dispatch import load  # noqa: E402
from .ir.source import TileScriptError  # noqa: E402
from .op.base import LayoutConflictError, LayoutConversionWarning, TileOpError  # noqa: E402
from .pass_config import PassConfigKey  # noqa: E402
# TileLang's package-level names outside the kernel language (``tilelang.profiler``, ``tilelang.cdiv``, ...)
from . import contrib, math, profiler, tools, utils  # noqa: E402
from .math import cdiv, next_power_of_2  # noqa: E402
from .jit.profiler import Profiler  # noqa: E402
from .utils.tensor import TensorSupplyType  # noqa: E402
from .jit.cache import disable as disable_cache, enable as enable_cache, enabled as is_cache_enabled  # noqa: E402
from .log import set_log_level  # noqa: E402
from .engine.callback import register_c_postproc, register_cuda_postproc, register_hip_postproc  # noqa: E402

__all__ = ["__version__", "compile", "jit", "JITKernel", "TilexCompileError", "TilexPerformanceWarning", "env",
           "dtypes", "autotune", "AutoTuner", "TileScriptError", "TileOpError", "LayoutConflictError",
           "LayoutConversionWarning", "load", "ExportError", "custom_op", "PassConfigKey",
           "contrib", "math", "profiler", "tools", "utils", "cdiv", "next_power_of_2", "Profiler", "TensorSupplyType",
           "disable_cache", "enable_cache", "is_cache_enabled", "set_log_level", "tvm", "DataType",
           "register_cuda_postproc", "register_hip_postproc", "register_c_postproc"]
