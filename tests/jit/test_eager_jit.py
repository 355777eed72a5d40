"""@tilex.jit over functions in TileLang's eager style: T.const sizes bound from tensor shapes or keywords,
annotated tensor parameters, T.empty outputs, the kernel in the body (tilex/jit/eager.py).

On CPU: each eager program gives the same T.prim_func (and kernel parameters) as the program written as a lazy
factory; `.compile(M=...)` gives its kernel; a call with CPU tensors binds the sizes, compiles once per sizes and
reaches the kernel's call (which refuses CPU tensors); the errors name the problem and, in a body, the user's line.
The last tests run the kernels against torch on a GPU."""
import inspect

import pytest
import torch

import tilex
import tilex.language as T
from tilex.jit import JITKernel

HERE = __file__


# ------------------------------------------------------------------------------------------------
# the programs, eager and lazy
# ------------------------------------------------------------------------------------------------
@tilex.jit
def gemm(A, B, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")
    assert K % block_K == 0, "K must be a multiple of block_K"

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])

    return C


def gemm_lazy(M, N, K, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32):
    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


@tilex.jit
def add(A, B, block_M, block_N, in_dtype, out_dtype, threads=128):
    """C = A + B in out_dtype."""
    M, N = T.const("M N")
    A: T.Tensor((M, N), in_dtype)
    B: T.Tensor((M, N), in_dtype)
    C = T.empty((M, N), out_dtype)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            r, c = by * block_M + i, bx * block_N + j
            C[r, c] = T.Cast(out_dtype, A[r, c] + B[r, c])
    return C


def add_lazy(M, N, block_M, block_N, in_dtype, out_dtype, threads=128):
    @T.prim_func
    def add(A: T.Tensor((M, N), in_dtype), B: T.Tensor((M, N), in_dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                r, c = by * block_M + i, bx * block_N + j
                C[r, c] = T.Cast(out_dtype, A[r, c] + B[r, c])

    return add


@tilex.jit
def row_stats(X, block_M=4, dtype="float32"):
    """Two outputs, returned in the other order than declared: (row max, row sum)."""
    M, N = T.const("M, N")
    X: T.Tensor((M, N), dtype)
    Total = T.empty((M,), dtype)
    Peak = T.empty((M,), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        X_local = T.alloc_fragment((block_M, N), dtype)
        s = T.alloc_fragment((block_M,), dtype)
        m = T.alloc_fragment((block_M,), dtype)
        T.copy(X[bx * block_M, 0], X_local)
        T.reduce_sum(X_local, s, dim=1)
        T.reduce_max(X_local, m, dim=1)
        T.copy(s, Total[bx * block_M])
        T.copy(m, Peak[bx * block_M])
    return Peak, Total


def row_stats_lazy(M, N, block_M=4, dtype="float32"):
    @T.prim_func
    def row_stats(X: T.Tensor((M, N), dtype), Total: T.Tensor((M,), dtype), Peak: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            X_local = T.alloc_fragment((block_M, N), dtype)
            s = T.alloc_fragment((block_M,), dtype)
            m = T.alloc_fragment((block_M,), dtype)
            T.copy(X[bx * block_M, 0], X_local)
            T.reduce_sum(X_local, s, dim=1)
            T.reduce_max(X_local, m, dim=1)
            T.copy(s, Total[bx * block_M])
            T.copy(m, Peak[bx * block_M])

    return row_stats


@tilex.jit
def scale(X, factor, block_M=64, dtype="float32"):
    """Y = X * factor; the row count M is symbolic (one kernel for every M), the row length N a constant."""
    M = T.dynamic("M")
    N = T.const("N")
    X: T.Tensor((M, N), dtype)
    Y = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        Xs = T.alloc_shared((block_M, N), dtype)
        T.copy(X[bx * block_M, 0], Xs)
        for i, j in T.Parallel(block_M, N):
            Xs[i, j] = Xs[i, j] * factor
        T.copy(Xs, Y[bx * block_M, 0])
    return Y


def scale_lazy(N, factor, block_M=64, dtype="float32"):
    M = T.dynamic("M")

    @T.prim_func
    def scale(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            Xs = T.alloc_shared((block_M, N), dtype)
            T.copy(X[bx * block_M, 0], Xs)
            for i, j in T.Parallel(block_M, N):
                Xs[i, j] = Xs[i, j] * factor
            T.copy(Xs, Y[bx * block_M, 0])

    return scale


@tilex.jit
def doubled(X, dtype="float32"):
    """N is only used as N * 2: no tensor dimension binds it."""
    N = T.const("N")
    X: T.Tensor((N * 2,), dtype)
    Y = T.empty((N * 2,), dtype)
    with T.Kernel(T.ceildiv(N * 2, 128), threads=128) as bx:
        for i in T.Parallel(128):
            Y[bx * 128 + i] = X[bx * 128 + i] * 2.0
    return Y


@tilex.jit
def broken(X, dtype="float32"):
    N = T.const("N")
    X: T.Tensor((N,), dtype)
    Y = T.empty((N,), dtype)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
        for i in T.Parallel(128):
            Y[bx * 128 + i] = X[bx * 128 + i] * undefined_tile_size  # noqa: F821
    return Y


def _line_of(func, text):
    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, line in enumerate(lines) if text in line)


BROKEN_LINE = _line_of(broken.__wrapped__, "* undefined_tile_size")


def cpu(*shape, dtype=torch.float16):
    return torch.zeros(*shape, dtype=dtype)


def refuses_cpu_tensors():
    """The kernel's own refusal of a CPU tensor: a call got as far as the compiled kernel."""
    return pytest.raises(ValueError, match="expected a CUDA tensor, got device cpu")


# ------------------------------------------------------------------------------------------------
# which style a function is
# ------------------------------------------------------------------------------------------------
def test_mode_detection():
    for f in (gemm, add, row_stats, scale, doubled, broken, filled, strided_copy):
        assert f.mode == "eager", f
    assert tilex.jit(gemm_lazy).mode == "lazy"  # defines a T.prim_func and returns it
    assert tilex.jit(lambda n: gemm_lazy(n, n, n, 64, 64, 32)).mode == "lazy"

    @tilex.jit
    def in_signature(X: T.Tensor((128,), "float32")):  # a tensor type in the signature
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                X[i] = X[i] + 1.0

    assert in_signature.mode == "eager" and in_signature.get_tir().params[0].name == "X"


# ------------------------------------------------------------------------------------------------
# the same programs as the lazy factories
# ------------------------------------------------------------------------------------------------
def test_gemm_equals_the_lazy_program():
    sizes = dict(M=256, N=192, K=128)
    tiles = dict(block_M=64, block_N=64, block_K=32)
    func = gemm.get_tir(**sizes, **tiles)
    lazy = gemm_lazy(**sizes, **tiles)
    assert func.script() == lazy.script()
    kernel = gemm.compile(**sizes, **tiles)
    assert isinstance(kernel, JITKernel) and kernel.out_idx == [2]
    reference = tilex.compile(lazy, out_idx=[2])
    assert [(p.name, p.shape, p.dtype, p.is_output) for p in kernel.params] == \
        [(p.name, p.shape, p.dtype, p.is_output) for p in reference.params]
    assert kernel.get_kernel_source() == reference.get_kernel_source()


@pytest.mark.parametrize("in_dtype, out_dtype", [("float32", "float32"), (T.float16, T.float32)])
def test_elementwise_add_in_two_dtypes_equals_the_lazy_program(in_dtype, out_dtype):
    args = dict(block_M=32, block_N=32, in_dtype=in_dtype, out_dtype=out_dtype)
    assert add.get_tir(M=256, N=128, **args).script() == add_lazy(256, 128, **args).script()


def test_elementwise_add_kernel_dtypes():
    k = add.compile(M=256, N=128, block_M=32, block_N=32, in_dtype=T.float16, out_dtype=T.float32)
    assert [(p.name, p.dtype, p.is_output) for p in k.params] == \
        [("A", "float16", False), ("B", "float16", False), ("C", "float32", True)]
    assert k.get_kernel_source() == tilex.compile(add_lazy(256, 128, 32, 32, T.float16, T.float32),
                                                  out_idx=[2]).get_kernel_source()


def test_two_outputs_in_return_order():
    assert row_stats.get_tir(M=64, N=128).script() == row_stats_lazy(64, 128).script()
    k = row_stats.compile(M=64, N=128)
    assert [p.name for p in k.params] == ["X", "Total", "Peak"]  # inputs, then outputs as declared
    assert k.out_idx == [2, 1]  # returned as (Peak, Total)
    ref = tilex.compile(row_stats_lazy(64, 128), out_idx=[2, 1])
    assert k.get_kernel_source() == ref.get_kernel_source()


def test_dynamic_size_stays_symbolic():
    func = scale.get_tir(N=128, factor=2.0)
    assert func.script() == scale_lazy(128, 2.0).script()
    m = func.params[0].shape[0]
    assert not isinstance(m, int) and m.name == "M"
    k = scale.compile(N=128, factor=2.0)
    assert k.params[0].shape[0][2] == "M" and k.params[0].shape[1] == 128 and k.out_idx == [1]
    scale.cache_clear()
    for rows in (100, 300, 1):  # one kernel serves every M
        with refuses_cpu_tensors():
            scale(cpu(rows, 128, dtype=torch.float32), 2.0)
    assert len(scale._eager._memo) == 1
    with refuses_cpu_tensors():
        scale(cpu(10, 64, dtype=torch.float32), 2.0)  # another N: another kernel
    assert len(scale._eager._memo) == 2


@tilex.jit
def filled(Y, value=1.0):
    """In place, no outputs; the kernel is a T.macro defined after this function."""
    N = T.const("N")
    Y: T.Tensor[(N,), "float32"]
    fill_kernel(Y, value)


@T.macro
def fill_kernel(Y, value):
    with T.Kernel(T.ceildiv(Y.shape[0], 128), threads=128) as bx:
        for i in T.Parallel(128):
            Y[bx * 128 + i] = value


@tilex.jit
def strided_copy(A, B):
    M, N, lda = T.const("M, N, lda")
    A: T.StridedTensor[(M, N), (lda, 1), "float32"]
    B: T.Tensor[(M, N), "float32"]
    with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
        tile = T.alloc_shared((32, N), "float32")
        T.copy(A[bx * 32, 0], tile)
        T.copy(tile, B[bx * 32, 0])


def test_kernel_in_a_macro_and_subscript_annotations():
    func = filled.get_tir(N=256, value=2.0)
    assert [p.name for p in func.params] == ["Y"] and func.params[0].shape[0] == 256
    k = filled.compile(N=256)
    assert k.out_idx == [] and [p.shape for p in k.params] == [(256,)]
    with refuses_cpu_tensors():
        assert filled(cpu(256, dtype=torch.float32)) is None


def test_size_bound_from_a_stride():
    base = cpu(64, 96, dtype=torch.float32)
    a = base[:, :32]  # rows 96 apart
    func = strided_copy.get_tir(a, cpu(64, 32, dtype=torch.float32))
    assert [int(s) for s in func.params[0].strides] == [96, 1]
    with pytest.raises(ValueError, match=r"T.const 'M' is 64 from A.shape\[0\] but 32 from B.shape\[0\]"):
        strided_copy(a, cpu(32, 32, dtype=torch.float32))


# ------------------------------------------------------------------------------------------------
# calls: sizes from the tensors, one kernel per sizes and compile-time arguments
# ------------------------------------------------------------------------------------------------
def test_call_binds_sizes_from_tensors_and_caches_per_shape():
    gemm.cache_clear()
    a, b = cpu(128, 64), cpu(64, 192)
    with refuses_cpu_tensors():
        gemm(a, b, 64, 64, 32)
    (k,) = gemm._eager._memo.values()
    assert [p.shape for p in k.params] == [(128, 64), (64, 192), (128, 192)]
    # the same shapes and arguments, however they are spelled: the same kernel
    assert gemm._eager.kernel(a, b, 64, 64, 32) is k
    assert gemm._eager.kernel(A=cpu(128, 64), B=cpu(64, 192), block_M=64, block_N=64, block_K=32) is k
    assert gemm._eager.kernel(a, b, 64, 64, 32, dtype=T.float16) is k
    with refuses_cpu_tensors():
        gemm(A=a, B=b, block_N=64, block_M=64, block_K=32)
    assert len(gemm._eager._memo) == 1
    # other shapes, other tiles: other kernels
    assert gemm._eager.kernel(cpu(256, 64), b, 64, 64, 32) is not k
    assert gemm._eager.kernel(a, b, 32, 64, 32) is not k
    assert len(gemm._eager._memo) == 3
    assert gemm.get_kernel_source(a, b, 64, 64, 32) == k.get_kernel_source()
    # sizes given as keywords must agree with the tensors
    assert gemm._eager.kernel(a, b, 64, 64, 32, M=128) is k
    with pytest.raises(ValueError, match=r"T.const 'M' is 256 from M=256 but 128 from A.shape\[0\]"):
        gemm(a, b, 64, 64, 32, M=256)
    gemm.cache_clear()
    assert not gemm._eager._memo


def test_compile_from_tensors_and_keywords():
    a, b = cpu(128, 64), cpu(64, 192)
    k = gemm.compile(a, b, block_M=64, block_N=64, block_K=32)
    assert [p.shape for p in k.params] == [(128, 64), (64, 192), (128, 192)]
    func = gemm.get_tir(A=a, N=192, block_M=64, block_N=64, block_K=32)  # B not given: N from the keyword
    assert func.script() == k.func.script()


def test_par_compile():
    kernels = add.par_compile([dict(M=64, N=64, block_M=32, block_N=32, in_dtype="float32", out_dtype="float32"),
                               dict(M=64, N=64, block_M=32, block_N=32, in_dtype="float16", out_dtype="float16")],
                              num_workers=2)
    assert [k.params[0].dtype for k in kernels] == ["float32", "float16"]
    assert add.par_compile([dict(M=64, N=64, block_M=32, block_N=32, in_dtype="float32", out_dtype="float32",
                                 bogus=1)], ignore_error=True) == [None]


# ------------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------------
def test_tensor_rank_or_dtype_unlike_its_annotation():
    gemm.cache_clear()
    with pytest.raises(ValueError, match=r"argument 'A' has 1 dimension\(s\), its annotation "
                                         r"T.Tensor\(\(M, K\), float16\) has 2"):
        gemm(cpu(128), cpu(64, 192), 64, 64, 32)
    with pytest.raises(TypeError, match=r"argument 'B' has dtype torch.float32, its annotation .* wants float16"):
        gemm(cpu(128, 64), cpu(64, 192, dtype=torch.float32), 64, 64, 32)
    assert not gemm._eager._memo  # refused before anything was compiled
    with pytest.raises(TypeError, match="argument 'B' is a tensor parameter, got int"):
        gemm(cpu(128, 64), 3, 64, 64, 32)
    with pytest.raises(TypeError, match=r"missing tensor argument\(s\): B"):
        gemm(cpu(128, 64), block_M=64, block_N=64, block_K=32)


def test_sizes_that_disagree_or_are_missing():
    with pytest.raises(ValueError, match=r"T.const 'K' is 64 from A.shape\[1\] but 32 from B.shape\[0\]"):
        gemm(cpu(128, 64), cpu(32, 192), 64, 64, 32)
    # a name no tensor dimension is: only a keyword can give it
    with pytest.raises(ValueError, match=rf"T.const 'N' \(declared at {HERE}:\d+\) has no value: no tensor "
                                         r"parameter's annotation has it as a dimension; pass N=\.\.\."):
        doubled(cpu(256, dtype=torch.float32))
    assert doubled.get_tir(N=128).params[0].name == "X"
    # sizes from keywords alone: every name needs one
    with pytest.raises(ValueError, match="T.const 'K' has no value: pass K=..."):
        gemm.compile(M=128, N=128, block_M=64, block_N=64, block_K=32)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) Q \(neither a parameter nor a T.const "
                                        r"name: M, N, K\)"):
        gemm.get_tir(M=128, N=128, K=64, Q=1, block_M=64, block_N=64, block_K=32)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) Q"):
        gemm(cpu(128, 64), cpu(64, 192), 64, 64, 32, Q=1)
    with pytest.raises(TypeError, match="missing required argument: 'block_K'"):
        gemm(cpu(128, 64), cpu(64, 192), 64, 64)


def test_assert_in_the_declarations_checks_the_bound_sizes():
    with pytest.raises(AssertionError, match="K must be a multiple of block_K"):
        gemm.get_tir(M=128, N=128, K=48, block_M=64, block_N=64, block_K=32)


def test_error_in_the_body_names_the_users_line():
    with pytest.raises(tilex.TileScriptError, match="undefined_tile_size") as info:
        broken.compile(N=256)
    assert f"{HERE}:{BROKEN_LINE}:" in str(info.value)
    assert "Y[bx * 128 + i] = X[bx * 128 + i] * undefined_tile_size" in str(info.value)


def test_error_in_the_declarations_is_raised_at_the_users_line():
    @tilex.jit
    def bad(X):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        Y = T.empty((N,), "float32", "one argument too many")
        with T.Kernel(1, threads=128) as bx:
            Y[bx] = X[bx]
        return Y

    with pytest.raises(TypeError, match=r"T.empty: expected \(shape, dtype\), got 3 positional arguments") as info:
        bad.compile(N=128)
    line = _line_of(bad.__wrapped__, "one argument too many")
    assert any(str(e.path) == HERE and e.lineno + 1 == line for e in info.traceback)


def test_outputs_must_be_returned_and_outputs_are_not_given():
    @tilex.jit
    def forgets(X):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        Y = T.empty((N,), "float32")
        Z = T.empty((N,), "float32")
        with T.Kernel(1, threads=128) as bx:
            Y[bx] = X[bx]
            Z[bx] = X[bx]
        return Y

    with pytest.raises(ValueError, match=r"does not return every T.empty output \(1 not returned, declared at "):
        forgets.get_tir(N=128)
    with pytest.raises(ValueError, match="out_idx=.* is for functions that return a T.prim_func"):
        tilex.jit(out_idx=[-1])(gemm.__wrapped__)


def test_const_and_empty_outside_an_eager_function():
    with pytest.raises(TypeError, match="T.const declares part of an eager @tilex.jit function"):
        T.const("M")
    with pytest.raises(TypeError, match="T.empty declares part of an eager @tilex.jit function"):
        T.empty((4,), "float32")


def test_lazy_factories_are_unchanged():
    f = tilex.jit(out_idx=[2])(gemm_lazy)
    k = f(256, 192, 128, 64, 64, 32)
    assert f(256, 192, 128, 64, 64, 32) is k and k.out_idx == [2]
    assert f.get_tir(256, 192, 128, 64, 64, 32).script() == gemm.get_tir(M=256, N=192, K=128, block_M=64,
                                                                          block_N=64, block_K=32).script()


# ------------------------------------------------------------------------------------------------
# on a GPU
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_eager_gemm_on_gpu():
    a = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 384, device="cuda", dtype=torch.float16)
    ref = (a.float() @ b.float()).half()
    torch.testing.assert_close(gemm(a, b, 128, 128, 32), ref, rtol=1e-2, atol=1e-2)
    kernel = gemm.compile(M=512, N=384, K=256, block_M=128, block_N=128, block_K=32)
    torch.testing.assert_close(kernel(a, b), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_eager_elementwise_reduction_and_dynamic_on_gpu():
    x = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    y = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(add(x, y, 32, 32, T.float16, T.float32), (x + y).float(), rtol=1e-2, atol=1e-2)
    z = torch.randn(64, 128, device="cuda")
    peak, total = row_stats(z)
    torch.testing.assert_close(peak, z.max(dim=1).values)
    torch.testing.assert_close(total, z.sum(dim=1), rtol=1e-4, atol=1e-4)
    for rows in (64, 200):
        w = torch.randn(rows, 128, device="cuda")
        torch.testing.assert_close(scale(w, 2.0), w * 2.0)
