"""GEMM tile programs: the pipelined tensor-core GEMM (`matmul`), split-K with atomics (`matmul_splitk`) and
swap-AB for skinny A (`matmul_swap_ab`). Used by examples/quickstart.py, examples/autotune_gemm.py,
benchmarks/bench_gemm.py and the tests."""
import tilex.language as T



def _b_shapes(N, K, bn, bk, trans_b):
    """(B's shape, its shared tile's shape): (K, N) and (bk, bn), or (N, K) and (bn, bk) when B is given
    transposed (a linear layer's weight)."""
    return ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))


def _b_tile(B, k, bx, bk, bn, trans_b):
    """The origin of k tile `k` of block column `bx` in B (laid out as :func:`_b_shapes` says)."""
    return B[bx * bn, k * bk] if trans_b else B[k * bk, bx * bn]

def matmul(M, N, K, bm=128, bn=128, bk=32, num_stages=3, threads=128, dtype="float16", accum="float32",
           trans_a=False, trans_b=False, swizzle=0, stage_c=False, c_block=0):
    """C = A @ B (A^T / B^T when trans_a / trans_b: A is then (K, M), B is (N, K)); `swizzle` > 0 rasterizes
    blocks in panels of that many rows for L2 reuse (T.use_swizzle); `stage_c` writes C through a shared tile
    (one TMA store per tile on sm90); `c_block` > 0 (with `stage_c`) stages it in column blocks of that width
    through a smaller shared tile, leaving shared memory for another pipeline stage."""
    cb = c_block if stage_c and 0 < c_block < bn else bn
    a_shape = (K, M) if trans_a else (M, K)
    b_shape, bs_shape = _b_shapes(N, K, bn, bk, trans_b)
    as_shape = (bk, bm) if trans_a else (bm, bk)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if swizzle > 0:
                T.use_swizzle(swizzle)
            A_s = T.alloc_shared(as_shape, dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_l = T.alloc_fragment((bm, bn), accum)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                T.copy(_b_tile(B, k, bx, bk, bn, trans_b), B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=trans_a, transpose_B=trans_b)
            if stage_c and cb < bn:
                C_s = T.alloc_shared((bm, cb), dtype)
                for j in T.unroll(bn // cb):
                    T.copy(C_l[0:bm, j * cb:(j + 1) * cb], C_s)
                    T.copy(C_s, C[by * bm, bx * bn + j * cb])
            elif stage_c:
                C_s = T.alloc_shared((bm, bn), dtype)
                T.copy(C_l, C_s)
                T.copy(C_s, C[by * bm, bx * bn])
            else:
                T.copy(C_l, C[by * bm, bx * bn])

    return main


EPILOGUES = ("add", "silu_mul")
#: activations of :func:`matmul_bias_act` (None: the bias alone)
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")


def _mainloop(K, bm, bn, bk, num_stages, trans_b):
    """C_l = A @ B (B^T when `trans_b`) over K for block (bx, by): the pipelined loop the epilogue programs share."""

    @T.macro
    def mainloop(A, B, A_s, B_s, C_l, bx, by):
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
            T.copy(A[by * bm, k * bk], A_s)
            T.copy(_b_tile(B, k, bx, bk, bn, trans_b), B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=trans_b)

    return mainloop


def _store(bm, bn, cb):
    """C_l -> C through the shared tile C_s ((bm, cb): in column blocks when cb < bn), one TMA store each."""

    @T.macro
    def store(C_l, C_s, C, bx, by):
        if cb < bn:
            for j in T.unroll(bn // cb):
                T.copy(C_l[0:bm, j * cb:(j + 1) * cb], C_s)
                T.copy(C_s, C[by * bm, bx * bn + j * cb])
        else:
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * bm, bx * bn])

    return store


def matmul_epilogue(M, N, K, epilogue="add", bm=128, bn=256, bk=64, num_stages=3, threads=256, dtype="float16",
                    accum="float32", trans_b=False, swizzle=0, c_block=0):
    """C = A @ B with an element-wise epilogue on a second (M, N) input E, read in the accumulator's layout:
    ``"add"``: C = A @ B + E (a residual connection), ``"silu_mul"``: C = silu(E) * (A @ B) (a SwiGLU MLP's gate E
    times its up projection). C goes through a shared tile and a TMA store (in column blocks of `c_block` when
    0 < c_block < bn, as in :func:`matmul`); `trans_b`: B given as (N, K)."""
    if epilogue not in EPILOGUES:
        raise ValueError(f"matmul_epilogue: epilogue must be one of {EPILOGUES}, got {epilogue!r}")
    b_shape, bs_shape = _b_shapes(N, K, bn, bk, trans_b)
    cw = 64 if bn % 64 == 0 else bn
    cb = c_block if 0 < c_block < bn else bn
    mainloop, store = _mainloop(K, bm, bn, bk, num_stages, trans_b), _store(bm, bn, cb)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype), E: T.Tensor((M, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if swizzle > 0:
                T.use_swizzle(swizzle)
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_l = T.alloc_fragment((bm, bn), accum)
            C_s = T.alloc_shared((bm, cb), dtype)
            mainloop(A, B, A_s, B_s, C_l, bx, by)
            # E in blocks of `cw` columns, each copied into registers before it is used: the loads of a block are
            # issued together (one element at a time, each load's latency was paid in turn: silu_mul at
            # 2048 x 11008 x 4096 took 416 us against 336 us in blocks, the GEMM alone 282 us)
            E_l = T.alloc_fragment((bm, cw), dtype)
            for c in T.unroll(bn // cw):
                T.copy(E[by * bm, bx * bn + c * cw], E_l)
                for i, j in T.Parallel(bm, cw):
                    if epilogue == "add":
                        C_l[i, c * cw + j] = C_l[i, c * cw + j] + T.Cast(accum, E_l[i, j])
                    else:
                        C_l[i, c * cw + j] = C_l[i, c * cw + j] * T.Cast(accum, E_l[i, j]) * T.sigmoid(
                            T.Cast(accum, E_l[i, j]))
            store(C_l, C_s, C, bx, by)

    return main


def _activate(x, act):
    """`act` of the float32 expression `x` (see ACTIVATIONS); GELU exact (erf) or with the tanh approximation."""
    if act is None:
        return x
    if act == "relu":
        return T.max(x, T.float32(0))
    if act == "silu":
        return x * T.sigmoid(x)
    if act == "gelu":
        return T.float32(0.5) * x * (T.float32(1) + T.erf(x * T.float32(0.7071067811865476)))
    return T.float32(0.5) * x * (T.float32(1) + T.tanh(T.float32(0.7978845608028654) *
                                                      (x + T.float32(0.044715) * x * x * x)))


def matmul_bias_act(M, N, K, bias=True, act=None, bm=128, bn=256, bk=64, num_stages=3, threads=256,
                    dtype="float16", accum="float32", trans_b=False, swizzle=0, c_block=0):
    """C = act(A @ B + bias) (a linear layer with its bias and activation): `bias` a (N,) vector, staged in shared
    memory per block (without it, C = act(A @ B)); `act` one of ACTIVATIONS. Tiles and C's way out as
    :func:`matmul_epilogue`."""
    if act not in ACTIVATIONS:
        raise ValueError(f"matmul_bias_act: act must be one of {ACTIVATIONS}, got {act!r}")
    if not bias and act is None:
        raise ValueError("matmul_bias_act: neither a bias nor an activation; use matmul")
    b_shape, bs_shape = _b_shapes(N, K, bn, bk, trans_b)
    cb = c_block if 0 < c_block < bn else bn
    mainloop, store = _mainloop(K, bm, bn, bk, num_stages, trans_b), _store(bm, bn, cb)

    @T.prim_func
    def with_bias(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype), Bias: T.Tensor((N,), dtype),
                  C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if swizzle > 0:
                T.use_swizzle(swizzle)
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_l = T.alloc_fragment((bm, bn), accum)
            C_s = T.alloc_shared((bm, cb), dtype)
            Bias_s = T.alloc_shared((bn,), dtype)
            T.copy(Bias[bx * bn], Bias_s)
            mainloop(A, B, A_s, B_s, C_l, bx, by)
            for i, j in T.Parallel(bm, bn):
                C_l[i, j] = _activate(C_l[i, j] + T.Cast(accum, Bias_s[j]), act)
            store(C_l, C_s, C, bx, by)

    @T.prim_func
    def no_bias(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if swizzle > 0:
                T.use_swizzle(swizzle)
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_l = T.alloc_fragment((bm, bn), accum)
            C_s = T.alloc_shared((bm, cb), dtype)
            mainloop(A, B, A_s, B_s, C_l, bx, by)
            for i, j in T.Parallel(bm, bn):
                C_l[i, j] = _activate(C_l[i, j], act)
            store(C_l, C_s, C, bx, by)

    return with_bias if bias else no_bias


def matmul_splitk(M, N, K, bm=64, bn=128, bk=64, num_stages=4, threads=128, split_k=4, dtype="float16",
                  accum="float32"):
    """C += A @ B with K cut into `split_k` slices (grid z), each block adding its partial tile into C with
    T.atomic_add; C must hold zeros on entry. For skinny problems (small M x N, long K), where one block per
    output tile leaves multiprocessors idle."""
    k_per_split = -(-(-(-K // split_k)) // bk) * bk  # whole bk tiles per slice; tiles past K read zeros

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), split_k, threads=threads) as (bx, by, bz):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), accum)
            T.clear(C_l)
            for k in T.Pipelined(k_per_split // bk, num_stages=num_stages):
                T.copy(A[by * bm, bz * k_per_split + k * bk], A_s)
                T.copy(B[bz * k_per_split + k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.atomic_add(C[by * bm, bx * bn], C_l)

    return main


def matmul_swap_ab(M, N, K, bm=16, bn=64, bk=128, num_stages=8, threads=128, dtype="float16", accum="float32",
                   stage_c=False, m_major=False, c_rows=0, trans_b=False):
    """C = A @ B with each block computing the transposed tile C^T = B^T A^T: N fills the 64-row side of the
    tensor-core instruction and A's rows its N side, which takes any multiple of 8. For skinny A (16 or 32 rows
    instead of a tile padded to 64), and for row-block heights (88, 136, 160, ...) that fit M into whole waves
    (benchmarks/bench_dynamic.py). `m_major` puts the row blocks of A on the grid's x axis (clusters along x then
    share one tile of B). `stage_c` writes C through a shared tile (one TMA store per tile on sm90); `c_rows` > 0
    (with `stage_c`) stages it in blocks of that many rows of C (columns of the C^T tile: each thread holds a share
    of every block) through a smaller shared tile, leaving shared memory to the pipeline. `trans_b`: B is given
    as (N, K) (a linear layer's weight), which is the K-major operand the instruction reads directly."""
    cm = c_rows if stage_c and 0 < c_rows < bm else bm
    b_shape, bs_shape = _b_shapes(N, K, bn, bk, trans_b)
    grid = (T.ceildiv(M, bm), T.ceildiv(N, bn)) if m_major else (T.ceildiv(N, bn), T.ceildiv(M, bm))

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(grid[0], grid[1], threads=threads) as (b0, b1):
            bx = b1 if m_major else b0
            by = b0 if m_major else b1
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            Ct_l = T.alloc_fragment((bn, bm), accum)
            T.clear(Ct_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(_b_tile(B, k, bx, bk, bn, trans_b), B_s)
                # C^T tile = (B_s)^T @ (A_s)^T, B_s already (bn, bk) when B is given transposed
                T.gemm(B_s, A_s, Ct_l, transpose_A=not trans_b, transpose_B=True)
            if stage_c and cm < bm:
                C_s = T.alloc_shared((cm, bn), dtype)
                for c in T.unroll(bm // cm):
                    for j, i in T.Parallel(bn, cm):
                        C_s[i, j] = Ct_l[j, c * cm + i]
                    T.copy(C_s, C[by * bm + c * cm, bx * bn])
            elif stage_c:
                C_s = T.alloc_shared((bm, bn), dtype)
                for j, i in T.Parallel(bn, bm):
                    C_s[i, j] = Ct_l[j, i]
                T.copy(C_s, C[by * bm, bx * bn])
            else:
                for j, i in T.Parallel(bn, bm):
                    if by * bm + i < M and bx * bn + j < N:
                        C[by * bm + i, bx * bn + j] = Ct_l[j, i]

    return main
