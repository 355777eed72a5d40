"""T.reduce_* into a shared-memory destination, from a fragment or from shared memory (CPU: generated CUDA and
layouts; GPU: values against torch)."""
import pytest

import tilex
import tilex.language as T
from tilex.op.base import TileOpError

KINDS = ("sum", "max", "min", "abssum", "absmax")


def reduce_to_shared(kind="sum", dim=1, source="fragment", clear=True, M=32, N=64, threads=128, keepdim=False):
    """O = reduce(X, dim) through a shared destination (clear=False: combined with 1.0 already there)."""
    red = getattr(T, f"reduce_{kind}")
    out_len = M if dim == 1 else N
    out_shape = ((M, 1) if dim == 1 else (1, N)) if keepdim else (out_len,)

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), O: T.Tensor(out_shape, "float32")):
        with T.Kernel(1, threads=threads) as bx:
            if source == "fragment":
                x = T.alloc_fragment((M, N), "float32")
            else:
                x = T.alloc_shared((M, N), "float32")
            o = T.alloc_shared(out_shape, "float32")
            T.copy(X, x)
            if clear:
                if kind == "abssum":
                    red(x, o, dim=dim)
                else:
                    red(x, o, dim=dim, clear=True)
            else:
                T.fill(o, 1.0)
                red(x, o, dim=dim, clear=False)
            T.copy(o, O)

    return main


def reduce_3d_to_shared(dim, M=16, n=4):
    """The keep-rank reduction of a (M, n, n) fragment over `dim` into a shared (M, n) tile, read back by a
    T.Parallel (the pattern of TileLang's mHC backward)."""

    @T.prim_func
    def main(X: T.Tensor((M, n, n), "float32"), O: T.Tensor((M, n), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, n, n), "float32")
            b = T.alloc_shared((M, n), "float32")
            r = T.alloc_fragment((M, n), "float32")
            T.copy(X, x)
            T.reduce_sum(x, b, dim=dim)
            for i, j in T.Parallel(M, n):
                r[i, j] = b[i, j] * 2.0
            T.copy(r, O)

    return main


def _source(prog):
    return tilex.compile(prog, target="sm_90a").get_kernel_source()


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("clear", [True, False])
def test_fragment_into_shared_is_stored_by_one_replica(dim, clear):
    src = _source(reduce_to_shared("sum", dim, "fragment", clear))
    # the result is computed in registers (shuffles and the cross-warp workspace), then stored by replica 0 only
    assert "red_acc" in src and "tilex::shfl_xor(" in src
    assert "red_st_l" in src and "== ((int)threadIdx.x)" in src


@pytest.mark.parametrize("clear", [True, False])
def test_shared_into_shared_with_threads_to_spare_is_reduced_by_lane_groups(clear):
    # 32 rows of 64 over 128 threads: 4 lanes a row, each folding every 4th element, then two xor shuffles; the
    # group's first lane stores (clear=False: combines with what is there)
    src = _source(reduce_to_shared("max", 1, "shared", clear))
    assert "red_part" in src and "tilex::shfl_xor(red_part_ptr[0], 2)" in src
    assert "tilex::shfl_xor(red_part_ptr[0], 1)" in src and "shfl_xor(red_part_ptr[0], 4)" not in src
    assert "red_val" not in src


@pytest.mark.parametrize("clear", [True, False])
def test_shared_into_shared_without_threads_to_spare_is_computed_per_output_element(clear):
    src = _source(reduce_to_shared("max", 0, "shared", clear))  # 64 columns over 128 threads: 2 a column
    assert "red_val" in src and "max(" in src
    assert "shfl" not in src  # every output element is one thread's


def reduce_shared_to_fragment(rows=4, cols=128, threads=128, clear=True):
    """O = sum(X, dim=1) with X staged in shared memory and the sums in a fragment (clear=False: added to 1.0)."""

    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float32"), O: T.Tensor((rows,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_shared((rows, cols), "float32")
            o = T.alloc_fragment((rows,), "float32")
            T.copy(X, x)
            if clear:
                T.reduce_sum(x, o, dim=1)
            else:
                T.fill(o, 1.0)
                T.reduce_sum(x, o, dim=1, clear=False)
            T.copy(o, O)

    return main


def test_shared_into_fragment_goes_through_a_workspace_to_the_holders():
    # 4 rows of 128 over 128 threads: a warp a row (5 shuffles), the first lanes publish to a shared workspace
    # between two barriers, the fragment's holders read it
    src = _source(reduce_shared_to_fragment())
    assert "tilex::shfl_xor(red_part_ptr[0], 16)" in src and "for (int rj = 0; rj < 4; ++rj)" in src
    assert src.count("__syncthreads()") >= 2


def test_a_short_row_is_not_worth_the_barriers():
    src = _source(reduce_shared_to_fragment(rows=4, cols=8))
    assert "shfl" not in src


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_compiles_into_shared(kind):
    for source in ("fragment", "shared"):
        _source(reduce_to_shared(kind, 1, source))


@pytest.mark.parametrize("dim", [0, 1])
def test_keep_rank_destination(dim):
    _source(reduce_to_shared("sum", dim, "fragment", keepdim=True))
    _source(reduce_to_shared("sum", dim, "shared", keepdim=True))


@pytest.mark.parametrize("dim", [-1, -2])
def test_three_dimensional_fragment_into_shared(dim):
    _source(reduce_3d_to_shared(dim))


def test_reduce_into_a_local_buffer_is_refused():
    @T.prim_func
    def main(X: T.Tensor((32, 64), "float32"), O: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((32, 64), "float32")
            o = T.alloc_local((32,), "float32")
            T.copy(X, x)
            T.reduce_sum(x, o, dim=1)
            T.copy(o, O)

    with pytest.raises(TileOpError, match="destination must be a fragment or shared memory"):
        _source(main)


# ---- values (GPU) --------------------------------------------------------------------------------------------------
def _reference(torch, x, kind, dim, clear):
    ref = {"sum": lambda t: t.sum(dim), "max": lambda t: t.amax(dim), "min": lambda t: t.amin(dim),
           "abssum": lambda t: t.abs().sum(dim), "absmax": lambda t: t.abs().amax(dim)}[kind](x)
    if clear:
        return ref
    one = torch.ones_like(ref)
    return {"sum": ref + 1, "max": torch.maximum(ref, one), "min": torch.minimum(ref, one),
            "absmax": torch.maximum(ref, one)}[kind]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("source", ["fragment", "shared"])
@pytest.mark.parametrize("clear", [True, False])
def test_reduce_into_shared_gpu(kind, dim, source, clear):
    torch = pytest.importorskip("torch")
    if kind == "abssum" and not clear:
        pytest.skip("T.reduce_abssum has no clear argument")
    M, N = 32, 64
    k = tilex.compile(reduce_to_shared(kind, dim, source, clear, M, N), out_idx=[1])
    x = torch.randn(M, N, device="cuda")
    torch.testing.assert_close(k(x), _reference(torch, x, kind, dim, clear), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("dim", [-1, -2])
def test_three_dimensional_fragment_into_shared_gpu(dim):
    torch = pytest.importorskip("torch")
    k = tilex.compile(reduce_3d_to_shared(dim), out_idx=[1])
    x = torch.randn(16, 4, 4, device="cuda")
    torch.testing.assert_close(k(x), x.sum(dim) * 2, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("rows,cols", [(4, 128), (8, 100), (3, 64), (64, 16), (2, 1000)])
@pytest.mark.parametrize("clear", [True, False])
def test_shared_into_fragment_gpu(rows, cols, clear):
    torch = pytest.importorskip("torch")
    k = tilex.compile(reduce_shared_to_fragment(rows, cols, clear=clear), out_idx=[1])
    x = torch.randn(rows, cols, device="cuda")
    torch.testing.assert_close(k(x), x.sum(1) + (0.0 if clear else 1.0), atol=1e-3, rtol=1e-4)
