"""How tilex lowers a decode written the way TileLang's examples write one (CPU: generated CUDA for sm_90a):
vectorized, its loads prefetched, its per-element scalars inlined, and on sm_90a its MMA overlapping the next
decode."""
import os
import runpy

import tilex
import tilex.language as T
from cuda_text import braced_block
from tilex.op.parallel import inline_scalars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
dequant_gemm_kernel = runpy.run_path(os.path.join(ROOT, "examples", "dequantize_gemm.py"))["dequant_gemm_kernel"]


def _source(func, **kw):
    return tilex.compile(func, target="sm_90a", **kw).get_kernel_source()


def test_decode_is_vectorized_and_prefetched():
    src = _source(dequant_gemm_kernel(16, 256, 512, bm=16, bn=32, bk=256, stages=4), out_idx=-1)
    # the packed codes and the per-row scales are read for the whole tile first, into registers
    assert "B_packed_pre_ptr" in src and "S_pre_ptr" in src
    # then four decoded values per vector store, the cast done by OR into 1024.0's mantissa
    assert "*(half4*)" in src and "(ushort)25600" in src
    assert "(half)" not in src.split("B_packed_pre_ptr")[-1].split("ldmatrix")[0]


def test_prefill_mma_overlaps_the_next_decode():
    """Warp-specialized, the decoded tile kept in shared memory: it is double-buffered, the loop waits for the
    previous MMA only."""
    src = _source(dequant_gemm_kernel(512, 256, 512, bm=256, bn=128, bk=128, stages=2, threads=256), out_idx=-1,
                  pass_configs={"tilex.disable_decode_into_registers": True})
    loop = braced_block(src, "for (int k_1 = 0;")
    assert "wgmma_wait<1>" in loop and "wgmma_wait<0>" not in loop
    assert "wgmma_wait<0>" in src.split("for (int k_1 = 0;")[1]


def _partial_decode(M=256, N=128, K=256):
    @T.prim_func
    def partial(X: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "int8"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(1, T.ceildiv(M, 128), threads=256) as (bx, by):
            X_s = T.alloc_shared((128, 64), "float16")
            B_q = T.alloc_shared((N, 64), "int8")
            B_s = T.alloc_shared((N, 64), "float16")
            C = T.alloc_fragment((128, N), "float32")
            T.clear(C)
            for k in T.Pipelined(K // 64, num_stages=2):
                T.copy(X[by * 128, k * 64], X_s)
                T.copy(B[0, k * 64], B_q)
                for i, j in T.Parallel(N // 2, 64):  # half the rows: the rest keeps older values
                    B_s[i, j] = T.cast(B_q[i, j], "float16")
                T.gemm(X_s, B_s, C, transpose_B=True)
            T.copy(C, Y[by * 128, 0])

    return partial


def test_partial_transform_keeps_the_gemm_synchronous():
    """A decode that rewrites only part of the tile relies on the rest from earlier iterations: one buffer, and
    the MMA completes within its iteration."""
    src = _source(_partial_decode(), out_idx=-1)
    loop = braced_block(src, "for (int k_1 = 0;")
    assert "wgmma_wait<1>" not in loop and "wgmma_wait<0>" in loop


def _stmts(func):
    from tvm import tirx

    from tilex.ir.visit import walk
    from tilex.language.canonicalize import canonicalize
    from tilex.op.parallel import collect_parallel_nest
    loops = []
    walk(canonicalize(func).body, (tirx.For, lambda n: loops.append(n) if n.kind == tirx.ForKind.PARALLEL else None))
    return collect_parallel_nest(loops[0])[2]


def test_inline_scalars():
    @T.prim_func
    def ok(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(64, 64):
                x = A[i, j] * T.float16(2)
                y = x + T.float16(1)
                B[i, j] = x * y

    @T.prim_func
    def hazard(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(64, 64):
                x = A[i, j]
                A[i, j] = T.float16(0)
                B[i, j] = x

    body = str(inline_scalars(_stmts(ok)))
    # one store left, x substituted twice (into x * y and into y)
    assert body.splitlines()[-1] == "B[i, j] = A[i, j] * T.float16(2.0) * (A[i, j] * T.float16(2.0) + T.float16(1.0))"
    assert inline_scalars(_stmts(hazard)) is None


def _guarded_copy(n=1000):
    @T.prim_func
    def main(A: T.Tensor((n, 64), "float16"), S: T.Tensor((n,), "float16"), B: T.Tensor((n, 64), "float16")):
        with T.Kernel(T.ceildiv(n, 64), threads=128) as bx:
            tile = T.alloc_shared((64, 64), "float16")
            for i, j in T.Parallel(64, 64):
                if bx * 64 + i < n:  # the last block's rows past n must not be read
                    tile[i, j] = A[bx * 64 + i, j] * S[bx * 64 + i]
            T.copy(tile, B[bx * 64, 0])

    return main


def test_guarded_loads_are_not_prefetched():
    src = _source(_guarded_copy())
    assert "_pre_ptr" not in src


def _histogram(n=4096, bins=64):
    @T.prim_func
    def main(A: T.Tensor((n,), "int32"), H: T.Tensor((bins,), "int32")):
        with T.Kernel(n // 1024, threads=128) as bx:
            for i in T.Parallel(1024):
                T.atomic_add(H[A[bx * 1024 + i]], 1)

    return main


def test_atomic_targets_are_not_prefetched():
    """The bins an atomic adds into are written by the loop: only the indices are read ahead."""
    src = _source(_histogram())
    assert "A_pre_ptr" in src and "H_pre_ptr" not in src
    assert "atomic_add((&(H_ptr[A_pre_ptr[" in src
