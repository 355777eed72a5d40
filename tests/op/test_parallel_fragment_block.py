"""T.Parallel over a block of a register fragment at an enclosing loop's offset (`C_l[i, c * 32 + j]`): the
column-blocked epilogue written as a loop, and swap-AB's epilogue in blocks of C's rows."""
import pytest

import tilex
import tilex.language as T
from tilex.kernels.gemm import matmul_swap_ab


def _blocked_epilogue(loop="unroll", step=32, width=32, M=256, N=256, K=256):
    """128x128 tiles; the accumulator leaves through a 128 x `width` shared tile, block c at column c * `step`."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            C_s = T.alloc_shared((128, width), "float16")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=2):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
            if loop == "unroll":
                for c in T.unroll(128 // width):
                    for i, j in T.Parallel(128, width):
                        C_s[i, j] = C_l[i, c * step + j]
                    T.copy(C_s, C[by * 128, bx * 128 + c * width])
            else:
                for c in T.serial(128 // width):
                    for i, j in T.Parallel(128, width):
                        C_s[i, j] = C_l[i, c * step + j]
                    T.copy(C_s, C[by * 128, bx * 128 + c * width])

    return main


@pytest.mark.parametrize("loop", ["unroll", "serial"])
def test_loop_over_blocks_reads_the_registers_of_each_block(loop):
    src = tilex.compile(_blocked_epilogue(loop), out_idx=-1, target="sm_90a").get_kernel_source()
    # a 32-column block is 16 of the thread's 64 accumulator registers, read as pairs; one 128x32 box per block
    assert "C_l_ptr + ((c * 16) + (par_l * 2))" in src
    assert src.count("tilex::tma_store_2d") == 1


def test_block_at_an_offset_the_layout_repeats_at_reads_its_registers():
    # columns c * 16 .. c * 16 + 32: not a multiple of the block's width, but 16 columns further every element is in
    # the same thread, 8 registers on (the loop takes the accumulator's layout over its first 32 columns)
    src = tilex.compile(_blocked_epilogue("serial", step=16), out_idx=-1, target="sm_90a").get_kernel_source()
    assert "C_l_ptr + ((c * 8) + (par_l * 2))" in src


def test_swap_ab_epilogue_in_row_blocks():
    m = T.dynamic("m")
    kernel = tilex.compile(matmul_swap_ab(m, 8192, 8192, 160, 256, 64, 4, 256, stage_c=True, c_rows=32),
                           out_idx=-1, target="sm_90a")
    src = kernel.get_kernel_source()
    # C^T's 160 columns are two 80-register halves of each thread (two m64 tiles): a 32-row block of C is 16
    # registers of each half
    assert "(par_l >> 4) * 80) + (c * 16)) + (par_l & 15)" in src
    assert src.count("tilex::tma_store_2d") == 4  # 32 x 256 rows of C: four 64-column boxes (128-byte swizzle)
    f = kernel.resources.functions["main_kernel"]
    assert f.spill_stores == 0 and f.shared_memory <= 1024  # pipeline + one 32x256 tile fit beside 4 stages


@pytest.mark.gpu
@pytest.mark.parametrize("loop", ["unroll", "serial"])
@pytest.mark.parametrize("shape", [(256, 256, 256), (1000, 520, 777)], ids=lambda s: "x".join(map(str, s)))
def test_loop_over_blocks_matches_torch(shape, loop):
    torch = pytest.importorskip("torch")
    M, N, K = shape
    kernel = tilex.compile(_blocked_epilogue(loop, M=M, N=N, K=K), out_idx=-1)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b).float() / K ** 0.5, (a.float() @ b.float()) / K ** 0.5,
                               atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cfg", [(160, 256, 4, 256, 32), (136, 256, 4, 256, 8), (192, 256, 3, 256, 32),
                                 (104, 128, 7, 128, 8)], ids=lambda c: f"{c[0]}x{c[1]}_rows{c[4]}")
def test_swap_ab_row_block_epilogue_matches_torch(cfg, dtype):
    """One kernel, M symbolic: tiny, ragged and multi-wave M against torch; TMA clips the rows past M."""
    torch = pytest.importorskip("torch")
    bm, bn, stages, threads, rows = cfg
    N, K = 1000, 768
    kernel = tilex.compile(matmul_swap_ab(T.dynamic("m"), N, K, bm, bn, 64, stages, threads, dtype=dtype,
                                          stage_c=True, c_rows=rows), out_idx=-1)
    tdt = getattr(torch, dtype)
    b = torch.randn(K, N, device="cuda", dtype=tdt)
    for M in (1, 7, 129, 534, 2100):
        a = torch.randn(M, K, device="cuda", dtype=tdt)
        torch.testing.assert_close(kernel(a, b).float() / K ** 0.5, (a.float() @ b.float()) / K ** 0.5,
                                   atol=1e-2, rtol=1e-2, msg=lambda m, M=M: f"M = {M}: {m}")
