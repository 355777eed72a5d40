"""RegisterOperand (on by default; tilex.disable_decode_into_registers turns it off): a tile decoded by a T.Parallel loop for one T.gemm goes
into the MMA's register operand; the gemm runs swapped (C^T = B A^T) with C laid out as the transposed
accumulator. CPU: which programs it applies to and the CUDA they get for sm_90a."""
import os
import runpy

import numpy as np

import tilex
import tilex.language as T
from tilex.layout import make_wgmma_accumulator_fragment
from tilex.op.gemm import transpose_fragment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
dequant_gemm_kernel = runpy.run_path(os.path.join(ROOT, "examples", "dequantize_gemm.py"))["dequant_gemm_kernel"]
OFF = {"tilex.disable_decode_into_registers": True}


def _source(func, configs=None):
    return tilex.compile(func, out_idx=-1, target="sm_90a", pass_configs=configs).get_kernel_source()


def test_transpose_fragment_maps_each_element_to_the_transposed_register():
    acc = make_wgmma_accumulator_fragment(128, 64, 2, 1)
    t = transpose_fragment(acc)
    assert t.input_shape == [64, 128] or tuple(t.input_shape) == (64, 128)
    i, j = np.meshgrid(np.arange(64), np.arange(128), indexing="ij")
    th, loc = t.map_numpy(i, j)
    th2, loc2 = acc.map_numpy(j, i)
    assert np.array_equal(th, th2) and all(np.array_equal(a, b) for a, b in zip(loc, loc2))


def test_prefill_decode_goes_into_the_register_operand():
    prog = dequant_gemm_kernel(512, 256, 512, bm=256, bn=128, bk=64, stages=4, threads=256)
    src = _source(prog)
    assert "wgmma_m64n256k16_rs_f16" in src  # the decoded weights are the register operand, X the shared one
    assert "half B_s_ptr[32]" in src  # 128 x 64 decoded values over 256 threads, in registers
    plain = _source(prog, OFF)
    assert "wgmma_m64n128k16_f16" in plain and "_rs_" not in plain  # turned off: the program as written


def test_not_applied_when_the_rows_do_not_fill_warpgroups():
    """bn = 32 rows cannot be split into 64-row warpgroup MMAs: the program keeps its shared tile."""
    prog = dequant_gemm_kernel(16, 256, 512, bm=16, bn=32, bk=256, stages=4)
    assert _source(prog) == _source(prog, OFF)


def _tile_read_twice(M=256, N=128, K=256):
    @T.prim_func
    def main(X: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "int8"), Y: T.Tensor((M, N), "float16"),
             D: T.Tensor((N, 64), "float16")):
        with T.Kernel(1, T.ceildiv(M, 256), threads=256) as (bx, by):
            X_s = T.alloc_shared((256, 64), "float16")
            B_q = T.alloc_shared((N, 64), "int8")
            B_s = T.alloc_shared((N, 64), "float16")
            C = T.alloc_fragment((256, N), "float32")
            T.clear(C)
            for k in T.Pipelined(K // 64, num_stages=2):
                T.copy(X[by * 256, k * 64], X_s)
                T.copy(B[0, k * 64], B_q)
                for i, j in T.Parallel(N, 64):
                    B_s[i, j] = T.cast(B_q[i, j], "float16")
                T.gemm(X_s, B_s, C, transpose_B=True)
            T.copy(B_s, D)  # the decoded tile is also read after the loop
            T.copy(C, Y[by * 256, 0])

    return main


def test_not_applied_when_the_tile_has_other_readers():
    src = _source(_tile_read_twice())
    assert "_rs_" not in src
