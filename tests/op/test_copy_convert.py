"""T.copy that converts (fp16 global -> fp32 fragment): ragged tiles zero-fill in vectors the CUDA codegen can
print; whole tiles keep 16-byte loads."""
import shutil

import pytest

import tilex
import tilex.language as T

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def widen(M, N, bm=64, bn=128):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), "float32")
            T.copy(X[by * bm, bx * bn], x)
            T.copy(x, Y[by * bm, bx * bn])

    return main


@needs_nvcc
def test_ragged_widening_copy_compiles_with_16_byte_zero_fill():
    src = tilex.compile(widen(200, 136), target="sm_90a").get_kernel_source()
    body = src[src.rfind('extern "C" __global__'):]
    assert "make_float4(0x0p+0f" in body  # the fill of rows / columns past the edge, 4 floats at a time
    assert "make_ulonglong4" not in body


@needs_nvcc
def test_whole_widening_copy_keeps_16_byte_loads():
    src = tilex.compile(widen(256, 256), target="sm_90a").get_kernel_source()
    body = src[src.rfind('extern "C" __global__'):]
    assert "*(uint4*)(X_ptr" in body  # 8 halves per load
