"""tilex.op: the tile operators, one file each (``copy``, ``gemm`` + ``gemm_wgmma`` + ``mma_types``, ``fill``,
``reduce``, ``scan``, ``atomic``, ``parallel``, ``tma_load``, ``dequantize``, ``debug_print``, ``im2col``,
``gemm_sp``, ``reducer``), each
with its frontend builder (the TIR call that carries it), ``infer_layout(ctx, level)`` and ``lower(ctx)`` side by
side; ``base`` holds the operator interface and the contexts the passes hand to it, ``region`` the tile-operand
encoding, ``partition`` the thread partitioning of element loops, ``registry`` the op name -> class table.
Importing this package imports every operator module, so the registry is complete once ``tilex.op`` is imported.
"""
from tilex.op import (atomic, copy, debug_print, dequantize, fill, gemm, gemm_wgmma, parallel, reduce,  # noqa: F401
                      scan, tma_load)
from tilex.op import explicit_async  # noqa: F401 - T.tma_copy, T.async_copy, T.wgmma_gemm (language.expert)
from tilex.op import im2col  # noqa: F401 - T.im2col
from tilex.op import gemm_sp  # noqa: F401 - T.gemm_sp
from tilex.op import reducer  # noqa: F401 - T.finalize_reducer
