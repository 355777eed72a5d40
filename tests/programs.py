"""Tile programs several tests compile (tests/ is on sys.path through its conftest.py)."""
import pathlib
import runpy

import tilex.language as T

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def example(name):
    """The globals of examples/<name>.py (a script, not an importable module: its main() is not run)."""
    return runpy.run_path(str(EXAMPLES / f"{name}.py"))


def matmul(M, N, K, panel=None, order="row", bm=128, bn=128, bk=32, stages=3, threads=128, enable=True,
           out_dtype="float16", store_tma=True):
    """C = A @ B (float16, float32 accumulator) as TileLang's examples write it: a T.Pipelined k loop of two
    T.copy and a T.gemm, the fragment copied out (``disable_tma=True`` unless `store_tma`); `panel` adds
    T.use_swizzle(panel, order, enable)."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if panel is not None:
                T.use_swizzle(panel, order=order, enable=enable)
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn], disable_tma=not store_tma)

    return main


def shared_transpose(M, N, dtype="float32", tile=32, threads=256):
    """B = A^T through a shared tile: stored row by row (vectorized), read down its columns, S[j, i], one element
    per thread and round (no vector loop)."""
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, tile), T.ceildiv(M, tile), threads=threads) as (bx, by):
            S = T.alloc_shared((tile, tile), dtype)
            for i, j in T.Parallel(tile, tile):
                S[i, j] = A[by * tile + i, bx * tile + j]
            for i, j in T.Parallel(tile, tile):
                B[bx * tile + i, by * tile + j] = S[j, i]

    return main
