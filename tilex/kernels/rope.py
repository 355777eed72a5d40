"""Rotary position embedding (the rotate-half form: ``u * cos + cat(-u2, u1) * sin``) over a column range of a
wider row-major matrix: the q / k parts of a fused QKV projection's output are read in place, without a split
kernel first. Used by tilex.relax's offload (the RoPE pattern)."""
import tilex.language as T


def _check(heads, dim, src_cols, col0):
    if dim % 2:
        raise ValueError(f"rope: the head dimension must be even, got {dim}")
    if not 0 <= col0 <= src_cols - heads * dim:
        raise ValueError(f"rope: columns [{col0}, {col0 + heads * dim}) are not inside a source of {src_cols} columns")


def rope_kernel(M, heads, dim, src_cols=None, col0=0, cos_rows=None, threads=128, dtype="float16"):
    """Y = RoPE(X[:, col0 : col0 + heads * dim]) for `heads` heads of `dim` each, row by row: with u = one head's
    `dim` values, u1 / u2 its halves, ``y = u * cos + cat(-u2, u1) * sin`` (fp32 math). Cos and Sin are
    (`cos_rows`, dim): row r of X uses row ``r % cos_rows`` (a (seq, dim) table shared by a batch of sequences), or
    row r when `cos_rows` is None (one table row per X row; then M may be symbolic)."""
    src_cols = heads * dim if src_cols is None else src_cols
    _check(heads, dim, src_cols, col0)
    half = dim // 2
    c_rows = M if cos_rows is None else cos_rows

    @T.prim_func
    def rope(X: T.Tensor((M, src_cols), dtype), Cos: T.Tensor((c_rows, dim), dtype),
             Sin: T.Tensor((c_rows, dim), dtype), Y: T.Tensor((M, heads * dim), dtype)):
        with T.Kernel(M, threads=threads) as r:
            c = r if cos_rows is None else r % cos_rows
            for h, j in T.Parallel(heads, half):
                u1 = T.Cast("float32", X[r, col0 + h * dim + j])
                u2 = T.Cast("float32", X[r, col0 + h * dim + half + j])
                Y[r, h * dim + j] = T.Cast(dtype, u1 * T.Cast("float32", Cos[c, j]) -
                                           u2 * T.Cast("float32", Sin[c, j]))
                Y[r, h * dim + half + j] = T.Cast(dtype, u2 * T.Cast("float32", Cos[c, half + j]) +
                                                  u1 * T.Cast("float32", Sin[c, half + j]))

    return rope
