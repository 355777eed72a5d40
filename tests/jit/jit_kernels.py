"""Small hand-written TIR CUDA kernels (already thread-bound) used by the jit tests."""
from __future__ import annotations

from tvm.script import tirx as T


def vec_add(n: int = 1024, dtype: str = "float32"):
    assert n % 128 == 0
    nb = n // 128

    @T.prim_func
    def vec_add_k(A: T.Buffer((n,), dtype), B: T.Buffer((n,), dtype), C: T.Buffer((n,), dtype)):
        T.func_attr({"global_symbol": "vec_add_k", "tirx.is_scheduled": True})
        bx = T.launch_thread("blockIdx.x", nb)
        tx = T.launch_thread("threadIdx.x", 128)
        C[bx * 128 + tx] = A[bx * 128 + tx] + B[bx * 128 + tx]

    return vec_add_k


def scale_sym():
    """B[i, j] = A[i, j] * alpha for a symbolic number of rows m (8 columns)."""

    @T.prim_func
    def scale_sym_k(a: T.handle, b: T.handle, alpha: T.float32):
        T.func_attr({"global_symbol": "scale_sym_k", "tirx.is_scheduled": True})
        m = T.int32()
        A = T.match_buffer(a, (m, 8), "float32")
        B = T.match_buffer(b, (m, 8), "float32")
        bx = T.launch_thread("blockIdx.x", T.ceildiv(m, 16))
        tx = T.launch_thread("threadIdx.x", 128)
        if bx * 16 + tx // 8 < m:
            B[bx * 16 + tx // 8, tx % 8] = A[bx * 16 + tx // 8, tx % 8] * alpha

    return scale_sym_k


def mixed():
    """Signature-only kernel for argument-checker tests (never launched)."""

    @T.prim_func
    def mixed_k(a: T.handle, w: T.handle, o: T.handle, k: T.int32):
        T.func_attr({"global_symbol": "mixed_k", "tirx.is_scheduled": True})
        m = T.int32()
        A = T.match_buffer(a, (m, k), "float16")
        W = T.match_buffer(w, (k, 64), "bfloat16")
        O = T.match_buffer(o, (m, 64), "float32")
        bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 64)
        O[0, tx] = T.float32(A[0, 0]) + T.float32(W[0, tx])

    return mixed_k


def strided():
    """A buffer with declared (non-compact) strides: a (4, 8) view with row stride 16."""

    @T.prim_func
    def strided_k(a: T.handle, B: T.Buffer((4, 8), "float32")):
        T.func_attr({"global_symbol": "strided_k", "tirx.is_scheduled": True})
        A = T.match_buffer(a, (4, 8), "float32", strides=(16, 1))
        tx = T.launch_thread("threadIdx.x", 32)
        B[tx // 8, tx % 8] = A[tx // 8, tx % 8]

    return strided_k
