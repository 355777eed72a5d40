"""8-bit T.gemm without a GPU: which instructions each target gets, CUDA that nvcc accepts, and clear errors."""
import re

import pytest

import tilex
import tilex.language as T
from tilex.kernels.gemm_8bit import int_matmul, scaled_matmul
from tilex.op.mma_types import mma_types
from gemm_rs_kernels import rs_8bit_matmul

SM90 = dict(bm=128, bn=256, bk=128, num_stages=3, threads=256)
SM80 = dict(bm=128, bn=128, bk=64, num_stages=3, threads=128)


def _calls(kernel):
    return set(re.findall(r"tilex::(wgmma_m64n\d+k\d+\w*|mma_m16n8k\d+\w*|tma_load_2d|cp_async)\b",
                          kernel.get_kernel_source()))


def test_mma_types_table():
    assert mma_types("float16", "float16", "float32").k_step == 16
    assert mma_types("float8_e5m2", "float8_e4m3fn", "float32").family == "f8"
    t = mma_types("uint8", "int8", "int32")
    assert (t.family, t.ta, t.tb, t.k_step) == ("i8", 1, 0, 32)
    assert mma_types("int8", "int8", "float32") is None
    assert mma_types("float16", "bfloat16", "float32") is None


@pytest.mark.parametrize("target,tiles,want", [
    ("sm_90a", SM90, {"wgmma_m64n256k32_i8", "tma_load_2d"}),
    ("sm_80", SM80, {"mma_m16n8k32_i8", "cp_async"}),
])
def test_int8_gemm_compiles(target, tiles, want):
    k = tilex.compile(int_matmul(512, 512, 512, **tiles), out_idx=-1, target=target)
    assert want <= _calls(k)


@pytest.mark.parametrize("target,tiles,want", [
    ("sm_90a", SM90, {"wgmma_m64n256k32_f8", "tma_load_2d"}),
    ("sm_89", SM80, {"mma_m16n8k32_f8", "cp_async"}),
])
def test_fp8_gemm_compiles(target, tiles, want):
    k = tilex.compile(scaled_matmul(512, 512, 512, in_dtype="float8_e4m3fn", b_dtype="float8_e5m2",
                                    scale_a="row", **tiles), out_idx=-1, target=target)
    assert want <= _calls(k)
    if target == "sm_90a":  # template arguments: A e4m3 (0), B e5m2 (1)
        assert "wgmma_m64n256k32_f8<0, 1>" in k.get_kernel_source()


def test_int_wgmma_uses_a_legal_n():
    """Integer wgmma has no n40 / n56 / ...: a 64x56 warpgroup tile is issued as 7 n8 instructions (the largest
    legal N dividing 56)."""
    k = tilex.compile(int_matmul(128, 112, 256, bm=64, bn=56, bk=64, num_stages=2, threads=128), out_idx=-1,
                      target="sm_90a")
    assert {c for c in _calls(k) if c.startswith("wgmma")} == {"wgmma_m64n8k32_i8"}


def test_fp8_on_sm80_is_refused():
    with pytest.raises(tilex.TileOpError, match="mma.sync.fp8"):
        tilex.compile(scaled_matmul(256, 256, 256, **SM80), out_idx=-1, target="sm_80")


def _nn_program(dtype, acc):
    @T.prim_func
    def main(A: T.Tensor((128, 128), dtype), B: T.Tensor((128, 128), dtype), C: T.Tensor((128, 128), acc)):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((128, 128), dtype)
            B_s = T.alloc_shared((128, 128), dtype)
            C_l = T.alloc_fragment((128, 128), acc)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.copy(C_l, C)

    return main


@pytest.mark.parametrize("dtype,acc", [("int8", "int32"), ("float8_e4m3fn", "float32")])
def test_8bit_gemm_needs_k_major_operands(dtype, acc):
    with pytest.raises(tilex.TileOpError, match="must be K-major.*transpose_B=True"):
        tilex.compile(_nn_program(dtype, acc), out_idx=-1, target="sm_90a")


def test_8bit_gemm_refuses_wrong_accumulator():
    with pytest.raises(tilex.TileOpError, match="int8/uint8 inputs with an int32 accumulator"):
        tilex.compile(_nn_program("int8", "float32"), out_idx=-1, target="sm_90a")


@pytest.mark.parametrize("target,want", [("sm_90a", "wgmma_m64n128k32_rs_f8<0, 0>"), ("sm_89", "mma_m16n8k32_f8<0, 0>")])
def test_8bit_a_fragment_compiles(target, want):
    k = tilex.compile(rs_8bit_matmul(256, 256, 256, "float8_e4m3fn", "float32"), out_idx=-1, target=target)
    assert want in k.get_kernel_source()


def test_8bit_a_fragment_layout():
    """A thread's 16 8-bit A elements of one k32 step: rows g and g+8, columns 4t..4t+3 and 16+4t..16+4t+3."""
    from tilex.layout import make_mma_a_fragment, make_wgmma_a_fragment

    for frag in (make_mma_a_fragment(16, 32, 1, 1, bits=8), make_wgmma_a_fragment(64, 32, 1, 1, bits=8)):
        for lane in (0, 5, 31):
            g, t = lane // 4, lane % 4
            want = [(g + 8 * (x // 4 % 2), 4 * t + x % 4 + 16 * (x // 8)) for x in range(16)]
            got = [tuple(int(v) for v in frag.inverse().map([lane, x])[:2]) for x in range(16)]
            assert got == want


def test_scaled_matmul_stages_a_float32_c_in_column_blocks():
    """A float32 C tile (128 KB at 128x256) beside 3 stages of 8-bit operands (144 KB) would exceed shared memory:
    the epilogue stages it in narrower column blocks instead (the default bf16 C stays whole)."""
    k = tilex.compile(scaled_matmul(256, 512, 1024, in_dtype="int8", out_dtype="float32", scale_a="row",
                                    scale_b="row"), out_idx=-1, target="sm_90a")
    assert "wgmma_m64n256k32_i8" in k.get_kernel_source()  # compiled: the block fits in shared memory


def test_tilelang_float8_spellings_compile():
    """TileLang programs spell e4m3 "float8_e4m3" or T.float8_e4m3; TVM's CUDA codegen knows only e4m3fn."""
    for spelling in ("float8_e4m3", T.float8_e4m3):
        @T.prim_func
        def main(A: T.Tensor((128, 64), spelling), B: T.Tensor((128, 64), spelling), C: T.Tensor((128, 128), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((128, 64), spelling)
                B_s = T.alloc_shared((128, 64), spelling)
                C_l = T.alloc_fragment((128, 128), "float32")
                T.copy(A, A_s)
                T.copy(B, B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=True)
                T.copy(C_l, C)

        assert "wgmma_m64n128k32_f8<0, 0>" in tilex.compile(main, out_idx=-1, target="sm_90a").get_kernel_source()
