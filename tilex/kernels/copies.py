"""Copies between column ranges of row-major matrices: one part of a split (`column_slice_kernel`) and the
concatenation of two matrices along their columns (`concat_kernel`). Used by tilex.relax's offload for ``split``
and ``concat`` over trailing axes, which TVM's default schedules run several times slower."""
import tilex.language as T


def column_slice_kernel(M, cols, src_cols, col0, threads=128, dtype="float16"):
    """Y = X[:, col0 : col0 + cols] (X is (M, src_cols)): one part of a split along a trailing axis."""
    if not 0 <= col0 <= src_cols - cols:
        raise ValueError(f"column_slice: columns [{col0}, {col0 + cols}) are not inside a source of {src_cols} "
                         "columns")

    @T.prim_func
    def column_slice(X: T.Tensor((M, src_cols), dtype), Y: T.Tensor((M, cols), dtype)):
        with T.Kernel(M, threads=threads) as r:
            for j in T.Parallel(cols):
                Y[r, j] = X[r, col0 + j]

    return column_slice


def concat_kernel(M, cols_a, cols_b, chunk=4096, threads=128, dtype="float16"):
    """Y = [A | B] for A (M, cols_a) and B (M, cols_b): a concatenation along a trailing axis (a KV cache and its
    new tokens). The grid's x blocks copy `chunk`-column pieces, first A's, then B's; y is the row. A piece is
    a whole chunk when `chunk` divides the columns (then the copies are vectorized), else it is guarded."""
    ca = chunk if cols_a % chunk == 0 else min(chunk, 8 * threads)
    cb = chunk if cols_b % chunk == 0 else min(chunk, 8 * threads)
    na, nb = -(-cols_a // ca), -(-cols_b // cb)

    @T.prim_func
    def concat(A: T.Tensor((M, cols_a), dtype), B: T.Tensor((M, cols_b), dtype),
               Y: T.Tensor((M, cols_a + cols_b), dtype)):
        with T.Kernel(na + nb, M, threads=threads) as (bx, r):
            if bx < na:
                if cols_a % ca == 0:
                    for j in T.Parallel(ca):
                        Y[r, bx * ca + j] = A[r, bx * ca + j]
                else:
                    for j in T.Parallel(ca):
                        if bx * ca + j < cols_a:
                            Y[r, bx * ca + j] = A[r, bx * ca + j]
            else:
                if cols_b % cb == 0:
                    for j in T.Parallel(cb):
                        Y[r, cols_a + (bx - na) * cb + j] = B[r, (bx - na) * cb + j]
                else:
                    for j in T.Parallel(cb):
                        if (bx - na) * cb + j < cols_b:
                            Y[r, cols_a + (bx - na) * cb + j] = B[r, (bx - na) * cb + j]

    return concat
