"""GridFromPersistent: a T.Persistent loop of independent tiles is compiled as the grid it walks (and gets tilex's
schedule: TMA / wgmma warp specialization, tilex's own persistent grid); a loop whose tiles could see each other
stays as written. CPU tests compare the CUDA with the grid program's; the gpu tests check values."""
import re

import numpy as np
import pytest
from tvm import tirx

import tilex
import tilex.language as T
from tilex.engine.pipeline import run_tile_passes
from tilex.ir.names import PERSISTENT_TILES
from tilex.ir.visit import walk
from tilex.transform.grid_from_persistent import grid_from_persistent

M = N = 1024
K, BM, BN, BK, WORKERS = 512, 128, 128, 64, 6


def persistent_gemm(clear_inside=True, extra=None):
    """A TileLang-style persistent GEMM over WORKERS blocks. `clear_inside=False` clears the accumulator once,
    before the loop (the tiles then add up: a sum carried across tiles); `extra` adds a statement to the tile."""

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16"),
             D: T.Tensor((WORKERS,), "int32")):
        with T.Kernel(WORKERS, threads=128) as bid:
            A_s = T.alloc_shared((BM, BK), "float16")
            B_s = T.alloc_shared((BK, BN), "float16")
            C_l = T.alloc_fragment((BM, BN), "float32")
            if not clear_inside:
                T.clear(C_l)
            for bx, by in T.Persistent([T.ceildiv(M, BM), T.ceildiv(N, BN)], WORKERS, bid):
                if clear_inside:
                    T.clear(C_l)
                for k in T.Pipelined(K // BK, num_stages=3):
                    T.copy(A[bx * BM, k * BK], A_s)
                    T.copy(B[k * BK, by * BN], B_s)
                    T.gemm(A_s, B_s, C_l)
                T.copy(C_l, C[bx * BM, by * BN])
                if extra == "block index":
                    D[bid] = bx
                if extra == "atomic":
                    T.atomic_add(D[0], 1)

    return gemm


def grid_gemm():
    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16"),
             D: T.Tensor((WORKERS,), "int32")):
        with T.Kernel(T.ceildiv(M, BM), T.ceildiv(N, BN), threads=128) as (bx, by):
            A_s = T.alloc_shared((BM, BK), "float16")
            B_s = T.alloc_shared((BK, BN), "float16")
            C_l = T.alloc_fragment((BM, BN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // BK, num_stages=3):
                T.copy(A[bx * BM, k * BK], A_s)
                T.copy(B[k * BK, by * BN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[bx * BM, by * BN])

    return gemm


def increment_tiles():
    """Each tile adds one to its own elements of C: C is read and written."""

    @T.prim_func
    def inc(C: T.Tensor((64, 64), "float32")):
        with T.Kernel(3, threads=128) as bid:
            for bx, by in T.Persistent([4, 4], 3, bid):
                for i, j in T.Parallel(16, 16):
                    C[bx * 16 + i, by * 16 + j] = C[bx * 16 + i, by * 16 + j] + 1.0

    return inc


def cuda(func):
    src = tilex.compile(func, target="sm_90a").get_kernel_source()
    return re.sub(r"\bgemm_kernel\b|\bmain_kernel\b", "KERNEL", src[src.index('extern "C"'):])


def block_extents(func):
    out = {}
    walk(func.body, (tirx.AttrStmt, lambda a: out.__setitem__(a.node.thread_tag, int(a.value))
                     if a.attr_key == "thread_extent" else None))
    return out


def annotated_loops(func):
    found = []
    walk(func.body, (tirx.For, lambda lp: found.append(lp) if PERSISTENT_TILES in lp.annotations else None))
    return found


def test_persistent_gemm_becomes_the_grid_it_walks():
    out = grid_from_persistent(persistent_gemm())
    assert block_extents(out) == {"blockIdx.x": M // BM, "blockIdx.y": N // BN, "threadIdx.x": 128}
    assert not annotated_loops(out)


def test_persistent_gemm_compiles_to_the_grid_programs_kernel():
    src = cuda(persistent_gemm())
    assert src == cuda(grid_gemm())
    assert "tma_load" in src and "for (int w = 0;" not in src


@pytest.mark.parametrize("program,why", [
    (lambda: persistent_gemm(clear_inside=False), "the accumulator carries a sum from tile to tile"),
    (lambda: persistent_gemm(extra="block index"), "the tile reads the block index"),
    (lambda: persistent_gemm(extra="atomic"), "an atomic"),
    (increment_tiles, "a global buffer read and written"),
])
def test_loops_whose_tiles_may_see_each_other_stay_persistent(program, why):
    func = program()
    out = grid_from_persistent(func)
    assert block_extents(out)["blockIdx.x"] == block_extents(func)["blockIdx.x"], why
    assert not annotated_loops(out)  # the annotation is consumed either way
    lowered = run_tile_passes(func, tilex.env.resolve_target("sm_90a"))
    assert not annotated_loops(lowered)


@pytest.mark.gpu
@pytest.mark.parametrize("clear_inside", [True, False])
def test_persistent_gemm_values(clear_inside):
    import torch

    kern = tilex.compile(persistent_gemm(clear_inside=clear_inside))
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    d = torch.zeros(WORKERS, device="cuda", dtype=torch.int32)
    kern(a, b, c, d)
    ref = (a.float() @ b.float())
    if not clear_inside:  # each worker's tiles add up: tile t holds the sum of its worker's tiles up to t
        tiles_m, tiles_n = M // BM, N // BN
        acc = {}
        expect = torch.empty_like(ref)
        g = 8
        for t in range(tiles_m * tiles_n):
            bx, by = t // g % tiles_m, t // g // tiles_m * g + t % g
            w = t % WORKERS
            tile = ref[bx * BM:(bx + 1) * BM, by * BN:(by + 1) * BN]
            acc[w] = tile if w not in acc else acc[w] + tile
            expect[bx * BM:(bx + 1) * BM, by * BN:(by + 1) * BN] = acc[w]
        ref = expect
    torch.testing.assert_close(c.float(), ref, atol=0.5, rtol=1e-2)


@pytest.mark.gpu
def test_tiles_that_read_what_they_write_still_add_once():
    import torch

    c = torch.zeros(64, 64, device="cuda", dtype=torch.float32)
    tilex.compile(increment_tiles())(c)
    np.testing.assert_array_equal(c.cpu().numpy(), np.ones((64, 64), np.float32))
