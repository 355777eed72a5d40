"""T.cumsum / T.cummax: inclusive scans of shared tiles, regions of them and fragments (CPU: generated CUDA and
errors; GPU: values against torch.cumsum / torch.cummax)."""
import pytest

import tilex
import tilex.language as T
from tilex.op.base import TileOpError


def scan_kernel(M, N, kind="sum", dim=1, reverse=False, source="shared", dest="same", dtype="float32", threads=128):
    """X (M, N) -> Y: the scan of the whole tile; `source` / `dest` pick where it lives (dest "same": in place)."""
    scan = T.cumsum if kind == "sum" else T.cummax

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=threads) as bx:
            if source == "shared":
                x = T.alloc_shared((M, N), dtype)
            else:
                x = T.alloc_fragment((M, N), dtype)
            T.copy(X, x)
            if dest == "same":
                scan(x, dim=dim, reverse=reverse)
                T.copy(x, Y)
            else:
                if dest == "shared":
                    y = T.alloc_shared((M, N), dtype)
                else:
                    y = T.alloc_fragment((M, N), dtype)
                scan(x, y, dim=dim, reverse=reverse)
                T.copy(y, Y)

    return main


def cuda(func):
    src = tilex.compile(func, target="sm_90a").get_kernel_source()
    return src[src.index('extern "C"'):]


def test_shared_scan_is_a_warp_scan_of_shuffles():
    src = cuda(scan_kernel(64, 48))
    assert src.count("tilex::shfl_up_sync(") == 5  # log2(32) Kogge-Stone steps
    assert "tilex::shfl_sync((uint)4294967295, scan_val_ptr[0], 31, 32)" in src  # the carry: the last lane
    assert "tilex::shfl_down_sync" not in src


def test_reverse_scan_shuffles_down_and_carries_lane_zero():
    src = cuda(scan_kernel(64, 48, kind="max", dim=0, reverse=True))
    assert src.count("tilex::shfl_down_sync(") == 5
    assert "scan_val_ptr[0], 0, 32)" in src
    assert "max(" in src and "-CUDART_INF_F" in src


@pytest.mark.parametrize("source, dest", [("fragment", "same"), ("fragment", "shared"), ("shared", "fragment")])
def test_fragments_go_through_a_shared_workspace(source, dest):
    src = cuda(scan_kernel(32, 64, source=source, dest=dest))
    assert "tilex::shfl_up_sync(" in src and "__syncthreads();" in src
    assert "scan_ws_ptr[" in src or "buf_dyn_shmem" in src  # the workspace (merged with the tiles when there are)


def test_scan_of_a_shared_region():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float32")
            T.copy(X, s)
            T.cumsum(s[16:48, 8:40], dim=0)
            T.cumsum(src=s[0, 0:64], dim=1, reverse=True)
            T.copy(s, Y)

    src = cuda(main)
    assert "tilex::shfl_up_sync(" in src and "tilex::shfl_down_sync(" in src


def test_frontend_errors():
    with pytest.raises(ValueError, match="dim=2 is out of range"):
        @T.prim_func
        def bad_dim(X: T.Tensor((32, 32), "float32")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((32, 32), "float32")
                T.cumsum(s, dim=2)
    with pytest.raises(ValueError, match="must match the source"):
        @T.prim_func
        def bad_shape(X: T.Tensor((32, 32), "float32")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((32, 32), "float32")
                d = T.alloc_shared((32, 16), "float32")
                T.cummax(s, d, dim=1)
    with pytest.raises(NotImplementedError, match="annotations"):
        @T.prim_func
        def bad_annotations(X: T.Tensor((32, 32), "float32")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((32, 32), "float32")
                T.cumsum(s, annotations={"x": 1})


def test_lowering_errors():
    @T.prim_func
    def global_operand(X: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.cumsum(X)

    @T.prim_func
    def mixed_dtypes(X: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((32,), "float32")
            d = T.alloc_shared((32,), "float16")
            T.copy(X, s)
            T.cumsum(s, d)
            T.copy(d, X)

    @T.prim_func
    def partial_warp(X: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=48) as bx:
            s = T.alloc_shared((32,), "float32")
            T.copy(X, s)
            T.cumsum(s)
            T.copy(s, X)

    with pytest.raises(TileOpError, match="shared memory or in fragments"):
        tilex.compile(global_operand, target="sm_90a")
    with pytest.raises(TileOpError, match="same dtype"):
        tilex.compile(mixed_dtypes, target="sm_90a")
    with pytest.raises(TileOpError, match="whole warps"):
        tilex.compile(partial_warp, target="sm_90a")


# ---- GPU ----------------------------------------------------------------------------------------------------------
def reference(torch, x, kind, dim, reverse):
    if reverse:
        x = x.flip(dim)
    y = x.cumsum(dim) if kind == "sum" else x.cummax(dim).values
    return (y.flip(dim) if reverse else y).to(x.dtype)  # (torch sums int32 into int64)


CASES = [
    # (M, N, kind, dim, reverse, source, dest, dtype)
    (1, 256, "sum", 1, False, "shared", "same", "float32"),
    (1, 100, "sum", 1, True, "shared", "same", "float32"),
    (64, 48, "sum", 1, False, "shared", "shared", "float32"),
    (64, 48, "max", 0, True, "shared", "same", "float32"),
    (48, 80, "max", 1, False, "fragment", "same", "float32"),
    (32, 64, "sum", 0, True, "fragment", "shared", "float32"),
    (32, 64, "sum", 1, False, "shared", "fragment", "float32"),
    (32, 128, "sum", 1, False, "fragment", "fragment", "int32"),
    (16, 64, "max", 1, True, "shared", "same", "int32"),
    (16, 64, "sum", 1, False, "shared", "same", "float16"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, kind, dim, reverse, source, dest, dtype", CASES)
def test_scan_gpu(M, N, kind, dim, reverse, source, dest, dtype):
    torch = pytest.importorskip("torch")
    k = tilex.compile(scan_kernel(M, N, kind, dim, reverse, source, dest, dtype), out_idx=[1])
    if dtype == "int32":
        x = torch.randint(-1000, 1000, (M, N), device="cuda", dtype=torch.int32)
    elif dtype == "float16":
        x = torch.randint(-4, 5, (M, N), device="cuda").half()  # small integers: exact sums in float16
    else:
        x = torch.randn(M, N, device="cuda")
    want = reference(torch, x, kind, dim, reverse)
    torch.testing.assert_close(k(x), want, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_scan_of_regions_gpu():
    torch = pytest.importorskip("torch")

    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=256) as bx:
            s = T.alloc_shared((64, 64), "float32")
            T.copy(X, s)
            T.cumsum(s[16:48, 8:40], dim=0)
            T.cummax(src=s[0, 0:64], dim=1, reverse=True)
            T.copy(s, Y)

    x = torch.randn(64, 64, device="cuda")
    want = x.clone()
    want[16:48, 8:40] = x[16:48, 8:40].cumsum(0)
    want[0, :] = want[0, :].flip(0).cummax(0).values.flip(0)
    torch.testing.assert_close(tilex.compile(main, out_idx=[1])(x), want, atol=1e-4, rtol=1e-4)
