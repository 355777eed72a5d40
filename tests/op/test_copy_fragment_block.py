"""T.copy of a block of a register fragment (`C_l[0:bm, j*cb:(j+1)*cb]`): the sub-tiled GEMM epilogue; other parts
of a fragment, copied by the threads holding them."""
import warnings

import pytest

import tilex
import tilex.language as T
from tilex.kernels.gemm import matmul


def test_block_epilogue_reads_registers_at_the_block_offset():
    src = tilex.compile(matmul(4096, 4096, 4096, 128, 256, 64, 4, 256, swizzle=16, stage_c=True, c_block=64),
                        target="sm_90a").get_kernel_source()
    # four 64-column blocks, each 32 of the thread's 128 accumulator registers, through one 128x64 tile
    assert "C_l_ptr + ((j * 32) + (cp_l * 2))" in src
    assert src.count("tilex::tma_store_2d") == 1  # one 128x64 box per block


def _block_program(dst_is_fragment=False, start=None, into_fragment=False):
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16"), C: T.Tensor((128, 256), "float16")):
        with T.Kernel(1, threads=256) as bx:
            A_s = T.alloc_shared((128, 256), "float16")
            B_s = T.alloc_shared((256, 256), "float16")
            C_l = T.alloc_fragment((128, 256), "float32")
            D_l = T.alloc_fragment((128, 64), "float32")
            C_s = T.alloc_shared((128, 64), "float16")
            T.copy(A, A_s)
            T.copy(A, B_s[0:128, 0:256])
            T.clear(C_l)
            T.gemm(A_s, B_s, C_l)
            if dst_is_fragment:
                T.copy(C_s, C_l[0:128, 0:64])
            elif into_fragment:
                T.copy(C_l[0:128, 64:128], D_l)
            else:
                s = 32 if start is None else start
                T.copy(C_l[0:128, s:s + 64], C_s)
            T.copy(C_s, C[0, 0])
            T.clear(D_l)

    return main


def test_a_part_at_any_corner_is_copied_by_the_threads_holding_it():
    # columns s .. s + 64 of the accumulator, s a variable: every register, each under a test of its column
    src = tilex.compile(_block_program(start=32), target="sm_90a").get_kernel_source()
    body = src[src.rfind('extern "C"'):]
    assert "for (int cp_l = 0; cp_l < 128; ++cp_l)" in body and "< (s_ptr[0] + 64)" in body


def test_a_fragment_destination_part_is_written_by_the_threads_holding_it():
    # columns 0 .. 64 of the wgmma accumulator are the first 32 registers of every thread, written in pairs
    src = tilex.compile(_block_program(dst_is_fragment=True), target="sm_90a").get_kernel_source()
    body = src[src.rfind('extern "C"'):]
    assert "for (int cp_l = 0; cp_l < 16; ++cp_l)" in body and "*(float2*)(C_l_ptr + (cp_l * 2))" in body


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,c_block", [((4096, 4096, 4096), 64), ((4096, 4096, 4096), 128),
                                           ((1000, 1000, 1000), 64), ((257, 520, 4096), 128)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_block_epilogue_matches_torch(shape, c_block, dtype):
    torch = pytest.importorskip("torch")
    M, N, K = shape
    kernel = tilex.compile(matmul(M, N, K, 128, 256, 64, 4, 256, dtype=dtype, swizzle=8, stage_c=True,
                                  c_block=c_block), out_idx=[2])
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(K, N, device="cuda", dtype=tdt)
    c = kernel(a, b)
    torch.testing.assert_close(c.float() / K ** 0.5, (a.float() @ b.float()) / K ** 0.5, atol=1e-2, rtol=1e-2)


def test_a_block_into_another_fragment_moves_registers():
    # D_l takes C_l's layout over the block: each thread moves its own registers 32 .. 63, no conversion
    with warnings.catch_warnings():
        warnings.simplefilter("error", tilex.LayoutConversionWarning)
        src = tilex.compile(_block_program(into_fragment=True), target="sm_90a").get_kernel_source()
    assert "D_l_ptr[cp_l] = C_l_ptr[(cp_l + 32)];" in src
