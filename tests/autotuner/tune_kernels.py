"""Kernel factories for the autotuner tests (an importable module, so that worker processes find them)."""
import os
import time

import tilex
import tilex.language as T
from tilex.kernels.gemm import matmul  # noqa: F401  (re-exported)

#: changes the program `scale` builds (to test that the autotune cache key follows the program text)
VARIANT = 2.0


def gemm(M, N, K, bm=128, bn=128, bk=64, num_stages=3, threads=128, delay=0.0, crash=False):
    """tilex.kernels.gemm.matmul with two test knobs: ``delay`` (sleep first) and ``crash`` (kill the
    process building it)."""
    if crash:
        os._exit(3)
    if delay:
        time.sleep(delay)
    return matmul(M, N, K, bm, bn, bk, num_stages, threads)


def scale(N, block=256, threads=128):
    """B = A * VARIANT, one block of `block` elements per CTA."""
    factor = VARIANT

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * factor

    return main


@tilex.jit(out_idx=[1], target="sm_90a")
def scale_jit(N, block=256, threads=128):
    """`scale` under @tilex.jit (the module attribute is the JitFactory; worker processes unwrap it)."""
    return scale(N, block, threads)
