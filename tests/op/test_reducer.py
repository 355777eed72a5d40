"""Reducers (T.alloc_reducer / T.finalize_reducer, TileLang's two forms): each thread of a T.Parallel loop
accumulates into its own replica of the reducer, the finalize combines the replicas."""
import pytest

import tilex
import tilex.language as T


def gemv(M=128, N=256, bm=64, bn=128, threads=256):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), X: T.Tensor((N,), "float16"), O: T.Tensor((M,), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            r = T.alloc_reducer(bm, "float32", replication="all")
            T.clear(r)
            for ko in T.Pipelined(T.ceildiv(N, bn), num_stages=2):
                a_s = T.alloc_shared((bm, bn), "float16")
                T.copy(A[bx * bm, ko * bn], a_s)
                a = T.alloc_fragment((bm, bn), "float16")
                T.copy(a_s, a)
                x = T.alloc_fragment((bn,), "float16")
                T.copy(X[ko * bn], x)
                for i, j in T.Parallel(bm, bn):
                    r[i] += a[i, j] * x[j]
            T.finalize_reducer(r)
            T.copy(r, O[bx * bm])

    return main


def row_max(M=64, N=128, init=-1.0):
    @T.prim_func
    def main(S: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_fragment((M, N), "float32")
            T.copy(S, s)
            r = T.alloc_reducer(M, "float32", op="max")
            T.reducer_init(r, init)
            for i, j in T.Parallel(M, N):
                T.reducer_update(r[i], s[i, j])
            out = T.alloc_fragment((M,), "float32")
            T.finalize_reducer(r, out)
            T.copy(out, O)

    return main


def test_gemv_with_a_reducer_compiles_to_scalar_accumulation():
    src = tilex.compile(gemv(), target="sm_90a").get_kernel_source()
    acc = [line for line in src.splitlines() if "r_ptr[" in line and "a_ptr[" in line]
    assert acc and all("float4" not in line for line in acc)  # one lane at a time: no lanes folded into one slot
    assert "tilex.reducer" not in src and src.count("__syncthreads()") >= 3  # the finalize's workspace round trip


def test_second_form_compiles():
    tilex.compile(row_max(), target="sm_90a")


def test_bad_reducers_are_refused():
    with pytest.raises(ValueError, match="op must be one of"):
        @T.prim_func
        def bad(O: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                r = T.alloc_reducer(4, "float32", op="mean")
                T.finalize_reducer(r)
    with pytest.raises(TypeError, match="integer dtype"):
        @T.prim_func
        def bad2(O: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                r = T.alloc_reducer(4, "float32", op="bitxor")
                T.finalize_reducer(r)

    @T.prim_func
    def bad3(O: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((4,), "float32")
            T.finalize_reducer(f)

    with pytest.raises(Exception, match="'f' is not a reducer"):
        tilex.compile(bad3, target="sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 256, 64, 128, 256), (256, 1024, 128, 128, 128)])
def test_gemv_matches_torch(shape):
    import torch

    M, N, bm, bn, threads = shape
    k = tilex.compile(gemv(M, N, bm, bn, threads), out_idx=[2])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    x = torch.randn(N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(k(a, x).float(), a.float() @ x.float(), atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
def test_row_max_matches_torch():
    import torch

    k = tilex.compile(row_max(init=0.5), out_idx=[1])
    s = torch.randn(64, 128, device="cuda")
    torch.testing.assert_close(k(s), s.amax(1).clamp(min=0.5))


def test_a_per_thread_buffer_written_in_a_parallel_loop_is_not_vectorized():
    """acc[i] += a[i, j] into a T.alloc_local buffer: vector lanes along j share acc[i], so a vectorized write
    would keep one lane's sum of four; the loop runs lane by lane."""
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16"), O: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            acc = T.alloc_local((128,), "float32")
            T.clear(acc)
            a = T.alloc_fragment((128, 256), "float16")
            T.copy(A, a)
            for i, j in T.Parallel(128, 256):
                acc[i] += a[i, j]
            T.copy(acc, O)

    src = tilex.compile(main, target="sm_90a").get_kernel_source()
    acc = [line for line in src.splitlines() if "acc_ptr[" in line and "a_ptr[" in line]
    assert acc and all("float4" not in line and "v_.w" not in line for line in acc)
