"""Software pipelining of T.Pipelined loops and the generated CUDA (compiled by nvcc, no GPU needed)."""
import shutil

import pytest
import tvm

from tilex.engine import build, lower_to_tir
from tilex.kernels.gemm import matmul

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def test_pipelined_loop_is_multibuffered_with_cp_async():
    script = lower_to_tir(matmul(1024, 1024, 1024, num_stages=3), SM90, {"tilex.disable_warp_specialized": True})["main"].script()
    assert "T.alloc_buffer((12288,)" in script  # A_s: 3 stages x 128 x 32
    assert script.count("tilex::cp_async<16>") >= 6  # prologue (2 stages x 2 copies) + steady state
    assert "tilex::cp_async_wait<1>" in script
    assert "(k + 2) % 3" in script  # the copy for iteration k + 2 lands in its own stage
    assert "tilex::wgmma_m64n128k16_f16<0, 1>" in script  # sm90: A K-major, B (K x N) MN-major
    assert "tilex::fence_proxy_async" in script


@pytest.mark.parametrize("target,configs", [(tvm.target.Target({"kind": "cuda", "arch": "sm_80"}), None),
                                            (SM90, {"tilex.disable_wgmma": True})])
def test_mma_sync_path(target, configs):
    script = lower_to_tir(matmul(1024, 1024, 1024), target, configs)["main"].script()
    assert "tilex::ldmatrix_x4" in script and "tilex::mma_m16n8k16_f16" in script
    assert "wgmma" not in script


def test_single_stage_loop_stays_serial():
    script = lower_to_tir(matmul(256, 256, 256, num_stages=1), SM90)["main"].script()
    assert "cp_async" not in script
    assert "T.alloc_buffer((4096,)" in script  # one 128 x 32 stage


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_gemm_cuda_compiles_with_nvcc(arch):
    from tilex.engine.nvcc import compile_cuda

    tgt = tvm.target.Target({"kind": "cuda", "arch": arch})
    ex = build(matmul(1000, 1000, 1000, bm=128, bn=128, bk=32, num_stages=3), tgt)
    src = ex.mod.imports[0].inspect_source()
    assert '#include "tilex/common.h"' in src
    cubin = compile_cuda(src, arch)
    assert len(cubin) > 1000


def _unpipelined_gemm():
    import tilex.language as T

    @T.prim_func
    def f(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.clear(C_l)
            T.copy(A, A_s)
            T.copy(B, B_s)
            for i, j in T.Parallel(64, 64):
                A_s[i, j] = A_s[i, j] * 2.0
            T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C)

    return f


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_vector_accesses_to_swizzled_tiles_compile(arch):
    """Synchronous 16-byte copies and T.Parallel vectors into swizzled shared tiles stay contiguous vectors."""
    from tilex.engine.nvcc import compile_cuda

    src = build(_unpipelined_gemm(), tvm.target.Target({"kind": "cuda", "arch": arch})).mod.imports[0].inspect_source()
    assert "uint4" in src  # 8 x fp16 moved as one 16-byte vector
    compile_cuda(src, arch)


def test_warp_specialized_loop_has_producer_consumer_split_and_barrier_pairs():
    func = lower_to_tir(matmul(1024, 1024, 1024, bm=128, bn=256, bk=64, num_stages=4, threads=256), SM90)["main"]
    script = func.script()
    assert 'T.launch_thread("threadIdx.x", 384)' in script  # 2 consumer warpgroups + 1 producer warpgroup
    assert "if v >= 256:" in script and "tilex.ws_consumer" in script
    assert "tilex::reg_dealloc<40>" in script and "tilex::reg_alloc<232>" in script
    assert script.count('T.alloc_shared((4,), "uint64")') == 2  # a full and an empty barrier per stage
    assert script.count("tilex::mbar_init\"") == 2 and "tilex::mbar_arrive_expect_tx" in script
    assert script.count("tilex::tma_load_2d") == 1 + 4  # A: one 64-wide plane; B: four planes of 64 columns
    assert "tilex::mbar_wait" in script and "tilex::mbar_arrive\"" in script
    assert "T.tensormap_encode_tiled" in script  # host-side tensor maps
    assert "cp_async" not in script


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_warp_specialized_cuda_has_wgmma_and_tma_and_compiles():
    from tilex.engine.nvcc import compile_cuda

    ex = build(matmul(1000, 1000, 1000, bm=128, bn=256, bk=64, num_stages=4, threads=256), SM90)
    src = ex.mod.imports[0].inspect_source()
    assert "__grid_constant__ CUtensorMap" in src and "tilex::tma_load_2d" in src
    assert "tilex::wgmma_m64n256k16_f16" in src and "__launch_bounds__(384, 1)" in src
    assert "__syncthreads" not in src.split("tilex::reg_alloc")[1]  # consumers use named barriers only
    compile_cuda(src, "sm_90a")


def test_too_much_shared_memory_is_a_clear_error():
    """128x256x64 tiles in 5 stages need 241 KB per block: a ValueError naming the size and the limit."""
    with pytest.raises(ValueError, match=r"shared memory of one block is 246784 bytes .* more than the 232448"):
        build(matmul(4096, 4096, 4096, 128, 256, 64, 5, 256), SM90)
    build(matmul(4096, 4096, 4096, 128, 256, 64, 4, 256), SM90)  # 4 stages (193 KB) fit
