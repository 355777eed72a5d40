"""TileLang's launch and size spellings: a one-element target for a 1-d grid, several names in one T.dynamic, and
multi-dimensional thread blocks for SIMT bodies (tile operators still need a 1-d block)."""
import pytest

import tilex
import tilex.language as T
from tilex.ir.visit import dtype_of


def _one_tuple_target():
    @T.prim_func
    def add_one(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as (bx,):
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + 1.0

    return add_one


def _plain_target():
    @T.prim_func
    def add_one(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + 1.0

    return add_one


def test_a_one_dimensional_grid_binds_a_one_element_target():
    a = tilex.compile(_one_tuple_target(), target="sm_90a").get_kernel_source()
    b = tilex.compile(_plain_target(), target="sm_90a").get_kernel_source()
    assert a == b


def test_a_one_element_target_for_a_two_dimensional_grid_is_an_error():
    with pytest.raises(Exception, match="unpack|values"):
        @T.prim_func
        def bad(A: T.Tensor((1024,), "float32")):
            with T.Kernel(8, 2, threads=128) as (bx,):
                A[bx] = 0.0


def test_dynamic_takes_several_names():
    m, n = T.dynamic("m, n")
    assert (m.name, n.name) == ("m", "n")
    b, s, h = T.dynamic("b s h", "int64")
    assert (b.name, s.name, h.name) == ("b", "s", "h") and dtype_of(h) == "int64"
    assert T.dynamic("k").name == "k"
    with pytest.raises(ValueError, match="twice"):
        T.dynamic("m, m")
    with pytest.raises(ValueError, match="identifier"):
        T.dynamic("m, 2n")


def test_dynamic_sizes_from_one_call_shape_a_kernel():
    m, n = T.dynamic("m, n")

    @T.prim_func
    def scale(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32")):
        with T.Kernel(T.ceildiv(m, 32), threads=128) as bx:
            for i, j in T.Parallel(32, 4):
                if bx * 32 + i < m and j < n:
                    B[bx * 32 + i, j] = A[bx * 32 + i, j] * 2.0

    src = tilex.compile(scale, target="sm_90a").get_kernel_source()
    assert "int m" in src and "int n" in src


def test_a_two_dimensional_thread_block_runs_a_simt_body():
    @T.prim_func
    def double(A: T.Tensor((128, 64), "float32"), B: T.Tensor((128, 64), "float32")):
        with T.Kernel(4, threads=(32, 4)) as bx:
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            for j in T.serial(16):
                B[bx * 32 + tx, ty * 16 + j] = A[bx * 32 + tx, ty * 16 + j] * 2.0

    src = tilex.compile(double, target="sm_90a").get_kernel_source()
    assert "__launch_bounds__(128)" in src and "threadIdx.y" in src


def test_tile_operators_in_a_two_dimensional_thread_block_are_refused():
    @T.prim_func
    def tiled(A: T.Tensor((128, 64), "float32"), B: T.Tensor((128, 64), "float32")):
        with T.Kernel(4, threads=(32, 4)) as bx:
            for i, j in T.Parallel(32, 64):
                B[bx * 32 + i, j] = A[bx * 32 + i, j]

    with pytest.raises(ValueError, match=r"1-d thread block.*threads=\(32, 4\).*threads=128"):
        tilex.compile(tiled, target="sm_90a")
