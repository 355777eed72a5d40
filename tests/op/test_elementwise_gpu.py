"""Element-wise kernels through fragments and T.Parallel, partial-tile copies, bad arguments."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402


def add_kernel(M, N, bm=64, bn=128, dtype="float16"):
    @T.prim_func
    def add(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a = T.alloc_fragment((bm, bn), dtype)
            b = T.alloc_fragment((bm, bn), dtype)
            c = T.alloc_fragment((bm, bn), "float32")
            T.copy(A[by * bm, bx * bn], a)
            T.copy(B[by * bm, bx * bn], b)
            for i, j in T.Parallel(bm, bn):
                c[i, j] = T.Cast("float32", a[i, j]) + T.Cast("float32", b[i, j]) * 2.0
            T.copy(c, C[by * bm, bx * bn])

    return add


def shared_roundtrip_kernel(M, N, bm=32, bn=64, dtype="float32"):
    """global -> shared -> global through a partial tile at the edges, plus a T.Parallel on shared memory."""

    @T.prim_func
    def roundtrip(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            s = T.alloc_shared((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], s)
            for i, j in T.Parallel(bm, bn):
                s[i, j] = s[i, j] + 1.0
            T.copy(s, B[by * bm, bx * bn])

    return roundtrip


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1024, 1024), (1000, 1000), (33, 4100), (7, 5)])
def test_elementwise_add_fragments(shape):
    M, N = shape
    k = tilex.compile(add_kernel(M, N), out_idx=[2])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    b = torch.randn(M, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(k(a, b), (a.float() + 2 * b.float()).half(), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(256, 256), (100, 70), (31, 129)])
def test_partial_tile_copies_through_shared(shape):
    M, N = shape
    k = tilex.compile(shared_roundtrip_kernel(M, N), out_idx=[1])
    a = torch.randn(M, N, device="cuda")
    torch.testing.assert_close(k(a), a + 1)


@pytest.mark.gpu
def test_bad_arguments_raise():
    k = tilex.compile(add_kernel(256, 256), out_idx=[2])
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    with pytest.raises(TypeError, match="B"):
        k(a, a.float())
    with pytest.raises(ValueError, match="B"):
        k(a, torch.randn(256, 128, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError):
        k(a, a.cpu())
    with pytest.raises(ValueError):
        k(a, torch.randn(256, 512, device="cuda", dtype=torch.float16)[:, ::2])
    with pytest.raises(TypeError):
        k(a)


@pytest.mark.gpu
@pytest.mark.parametrize("pad", [0, 4])
def test_annotated_padded_shared_layout_roundtrip(pad):
    @T.prim_func
    def f(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float32")
            t = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({s: T.Layout((64, 64), lambda i, j: i * (64 + pad) + j)})
            T.copy(A[0, 0], s)
            for i, j in T.Parallel(64, 64):
                t[i, j] = s[j, i]
            T.copy(t, B[0, 0])

    k = tilex.compile(f, out_idx=[1])
    a = torch.randn(64, 64, device="cuda")
    torch.testing.assert_close(k(a), a.t().contiguous())
