"""T.use_swizzle: the block-index mapping (a bijection, panel order) and programs that use it (CPU only)."""
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

import tilex.language as T
from tilex.engine import build, lower_to_tir
from tilex.layout._expr import compile_numpy
from tilex.transform.thread_block_swizzle import swizzled_block_index, thread_block_swizzle

from programs import matmul

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
GRIDS = [(1, 1), (1, 7), (7, 1), (5, 3), (8, 8), (13, 7), (10, 20), (3, 16)]
PANELS = [1, 2, 3, 4, 10]


def _evaluate(gx, gy, panel, order):
    """(bx, by) for every hardware index, as arrays indexed [hy, hx]."""
    hx, hy = tirx.Var("hx", "int32"), tirx.Var("hy", "int32")
    exprs = swizzled_block_index(hx, hy, gx, gy, panel, order)
    fn = compile_numpy(exprs, [hx, hy])
    ys, xs = np.meshgrid(np.arange(gy), np.arange(gx), indexing="ij")
    bx, by = fn(xs, ys)
    return np.broadcast_to(bx, ys.shape), np.broadcast_to(by, ys.shape)


def _expected_launch_order(gx, gy, panel, order):
    """The documented traversal, written out: list of (bx, by) in launch order (hx fastest)."""
    out = []
    major, minor = (gy, gx) if order == "row" else (gx, gy)
    for p in range(-(-major // panel)):
        band = range(p * panel, min((p + 1) * panel, major))
        across = range(minor) if p % 2 == 0 else reversed(range(minor))
        for a in across:
            for b in band:
                out.append((a, b) if order == "row" else (b, a))
    return out


@pytest.mark.parametrize("order", ["row", "column"])
@pytest.mark.parametrize("panel", PANELS)
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
def test_mapping_is_a_bijection_in_panel_order(grid, panel, order):
    gx, gy = grid
    bx, by = _evaluate(gx, gy, panel, order)
    assert bx.min() >= 0 and by.min() >= 0 and bx.max() < gx and by.max() < gy
    cells = set(zip(bx.ravel().tolist(), by.ravel().tolist()))
    assert len(cells) == gx * gy  # every block of the grid exactly once
    launched = list(zip(bx.ravel().tolist(), by.ravel().tolist()))  # row-major over [hy, hx]: launch order
    assert launched == _expected_launch_order(gx, gy, panel, order)


def test_consecutive_blocks_share_tiles():
    """Row order, panel 4 on a 16 x 16 grid: the first 16 launched blocks touch only 4 A row-tiles (by) and 4 B
    column-tiles (bx), where the plain order touches 1 row and 16 columns."""
    bx, by = _evaluate(16, 16, 4, "row")
    first = list(zip(bx.ravel()[:16].tolist(), by.ravel()[:16].tolist()))
    assert len({b for _, b in first}) == 4 and len({a for a, _ in first}) == 4
    # the second panel runs its columns the other way round: its first block sits under the last one of panel 0
    assert (bx.ravel()[64], by.ravel()[64]) == (15, 4) and (bx.ravel()[63], by.ravel()[63]) == (15, 3)


def _launch(func):
    """{tag: (var, extent)} of the launch attributes and [(var, value)] of the Bind statements."""
    launch, binds = {}, []

    def on_attr(n):
        if n.attr_key == "thread_extent":
            launch[n.node.thread_tag] = (n.node.var, int(n.value.value))

    def on_bind(n):
        binds.append((n.var, n.value))

    tvm_ffi.structural_walk(func.body, [(tirx.AttrStmt, on_attr), (tirx.Bind, on_bind)])
    return launch, binds


@pytest.mark.parametrize("order", ["row", "column"])
def test_lowered_kernel_binds_swizzled_block_indices(order):
    M, N = 1000, 1300  # 8 x 11 blocks: partial panels of 3 both ways
    func = lower_to_tir(matmul(M, N, 256, panel=3, order=order), SM90)["main"]
    script = func.script()
    assert "use_swizzle" not in script
    launch, binds = _launch(func)
    (hx, gx), (hy, gy) = launch["blockIdx.x"], launch["blockIdx.y"]
    assert (gx, gy) == (11, 8)
    names = [v.name for v, _ in binds]
    assert names == ["bx", "by"]
    fn = compile_numpy([binds[0][1], binds[1][1]], [hx, hy])
    ys, xs = np.meshgrid(np.arange(gy), np.arange(gx), indexing="ij")
    bx, by = (np.broadcast_to(a, ys.shape) for a in fn(xs, ys))
    assert list(zip(bx.ravel().tolist(), by.ravel().tolist())) == _expected_launch_order(gx, gy, 3, order)


def test_swizzle_keeps_the_bounds_proofs():
    """The pass runs after LowerTileOps: the body is exactly what the plain program lowers to (no extra guards,
    no zero-filling cp.async) once the block indices are bound."""
    plain = lower_to_tir(matmul(1024, 1024, 512), SM90, {"tilex.disable_warp_specialized": True})["main"]
    swz = lower_to_tir(matmul(1024, 1024, 512, panel=4), SM90, {"tilex.disable_warp_specialized": True})["main"]
    s_plain, s_swz = plain.script(), swz.script()
    assert "zfill" not in s_swz and s_swz.count(" if ") == s_plain.count(" if ")
    after_binds = s_swz.split("by: T.let[T.int32] = ", 1)[1].split("\n", 1)[1]
    after_launch = s_plain.split('T.launch_thread("threadIdx.x", 128)\n', 1)[1]
    assert after_binds == after_launch


def test_disabled_swizzle_and_plain_program_are_identical():
    plain = lower_to_tir(matmul(512, 512, 256), SM90)["main"].script()
    off = lower_to_tir(matmul(512, 512, 256, panel=4, enable=False), SM90)["main"].script()
    assert off == plain


def test_one_dimensional_grid_only_drops_the_marker():
    @T.prim_func
    def main(A: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            T.use_swizzle(4)
            for i in T.Parallel(128):
                A[bx * 128 + i] = A[bx * 128 + i] * 2.0

    func = lower_to_tir(main, SM90)["main"]
    assert "use_swizzle" not in func.script()
    assert _launch(func)[1] == []


def test_swizzle_arguments_are_checked():
    with pytest.raises(ValueError, match="order"):
        T.use_swizzle(4, order="diagonal")
    with pytest.raises(ValueError, match="positive"):
        T.use_swizzle(0)
    with pytest.raises(TypeError):
        T.use_swizzle(2.5)
    assert [int(a.value) for a in T.use_swizzle(4, enable=False).args] == [0, 0]  # the launch order, pinned


def test_conflicting_swizzles_raise():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, 4, threads=128) as (bx, by):
            T.use_swizzle(2)
            T.use_swizzle(3)
            A[by, bx] = 1.0

    with pytest.raises(ValueError, match="conflicting"):
        thread_block_swizzle(main)


def test_swizzle_outside_a_kernel_raises():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        T.use_swizzle(2)
        with T.Kernel(4, 4, threads=128) as (bx, by):
            A[by, bx] = 1.0

    with pytest.raises(ValueError, match="inside a T.Kernel"):
        thread_block_swizzle(main)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_swizzled_gemm_compiles_with_nvcc():
    from tilex.engine.nvcc import compile_cuda

    src = build(matmul(1000, 1300, 512, panel=3, order="column"), SM90).mod.imports[0].inspect_source()
    assert "int bx = " in src and "int by = " in src
    assert len(compile_cuda(src, "sm_90a")) > 1000


@pytest.mark.parametrize("order", ["row", "column"])
def test_serpentine_is_branch_free(order):
    """The alternating panel direction is arithmetic, not a select: a select made nvcc duplicate the kernel tail and
    ptxas then hoisted an accumulator read above the wgmma wait (wrong results on the H200)."""
    func = lower_to_tir(matmul(1000, 1300, 256, panel=3, order=order), SM90)["main"]
    _, binds = _launch(func)
    for _, value in binds:
        text = str(value)
        assert "Select" not in text and "if_then_else" not in text
