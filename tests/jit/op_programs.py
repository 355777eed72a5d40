"""Small tilex-language programs for the export and torch-operator tests (M symbolic)."""
from __future__ import annotations

import tilex.language as T


def scale_rows(dtype: str = "float16", cols: int = 64):
    """B = A * s for A of (m, cols), m symbolic."""
    m = T.dynamic("m")

    @T.prim_func
    def scale(A: T.Tensor((m, cols), dtype), s: T.float32, B: T.Tensor((m, cols), dtype)):
        with T.Kernel(T.ceildiv(m, 32), threads=128) as bx:
            for i, j in T.Parallel(32, cols):
                if bx * 32 + i < m:
                    B[bx * 32 + i, j] = A[bx * 32 + i, j] * T.cast(s, dtype)

    return scale


def add_into(cols: int = 64):
    """Y += X in place (no output), m symbolic."""
    m = T.dynamic("m")

    @T.prim_func
    def add(X: T.Tensor((m, cols), "float32"), Y: T.Tensor((m, cols), "float32")):
        with T.Kernel(T.ceildiv(m, 32), threads=128) as bx:
            for i, j in T.Parallel(32, cols):
                if bx * 32 + i < m:
                    Y[bx * 32 + i, j] = Y[bx * 32 + i, j] + X[bx * 32 + i, j]

    return add
