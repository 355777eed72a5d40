"""T.dequantize without a GPU: the packed order it reads agrees with the host pre-packing, every low-bit type
compiles for sm_90a and sm_80 (float16 and bfloat16, with scales and zero-points), and misuse is refused."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402
from tilex import dtypes  # noqa: E402
from tilex.kernels.quant_matmul import QuantTiles, prepack_weight, quant_matmul, weight_fragment  # noqa: E402
from tilex.op.dequantize import packed_order, word_vector, words_per_thread  # noqa: E402
from tilex.quant.chunks import unpack_chunks  # noqa: E402

TILES = [("sm_90a", QuantTiles()), ("sm_80", QuantTiles()), ("sm_90a", QuantTiles(bn=128, bm=128, bk=64,
                                                                                 threads=256, num_stages=3))]


def _read_back(wp, frag, bits):
    """The codes each tile's threads decode, put back at their (row, col): T.dequantize's reading order replayed
    on the host (owner t reads vector v at words (v * owners + t) * vec)."""
    n_t, k_t = wp.shape[:2]
    owners = frag.thread_extent // int(frag.replicate)
    wpt = words_per_thread(frag, bits)
    vec = word_vector(wpt)
    per_thread = wp.reshape(n_t, k_t, wpt // vec, owners, vec).transpose(2, 3).reshape(n_t, k_t, owners, -1, bits)
    codes = unpack_chunks(per_thread, bits).reshape(n_t, k_t, owners, -1)  # (.., thread, local)
    rows, cols = (int(s) for s in frag.input_shape)
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    t, (loc,) = frag.map_numpy(i.reshape(-1), j.reshape(-1))
    tile = codes[:, :, torch.as_tensor(t), torch.as_tensor(loc)]  # (.., rows * cols)
    return tile.reshape(n_t, k_t, rows, cols).permute(0, 2, 1, 3).reshape(n_t * rows, k_t * cols)


@pytest.mark.parametrize("target,tiles", TILES, ids=lambda x: str(x))
@pytest.mark.parametrize("bits", range(1, 9))
def test_prepack_is_the_order_dequantize_reads(target, tiles, bits):
    N, K = 2 * tiles.bn, 2 * tiles.bk
    codes = torch.randint(0, 2 ** bits, (N, K), dtype=torch.uint8)
    wt = dtypes.int_type(bits, signed=False)
    wp = prepack_weight(codes, wt, tiles, target)
    frag = weight_fragment(tiles, target)
    assert wp.shape == (2, 2, tiles.bn * tiles.bk * bits // 1024, 32)
    assert torch.equal(_read_back(wp, frag, bits), codes)


def test_packed_order_covers_the_tile_once():
    frag = weight_fragment(QuantTiles(), "sm_90a")
    order = packed_order(frag)
    assert sorted(order.reshape(-1).tolist()) == list(range(128 * 128))


SOME_TYPES = ["uint4", "int4", "int3", "uint8", "int1", "float4_e2m1", "float6_e3m2", "float8_e4m3", "float8_e5m2",
              "float3_e1m1", "float7_e2m4"]


@pytest.mark.parametrize("wt", [str(t) for t in dtypes.ALL_TYPES])
def test_quant_matmul_compiles_for_every_type(wt):
    """Every 1-8-bit type decodes in a kernel nvcc accepts for sm_90a (float16 where the type fits, else
    bfloat16); sm_80 below for a sample, and tests/ir/test_lowbit_header.py compiles every decoder for both."""
    act = "float16" if dtypes.lookup(wt).exact_in("float16") else "bfloat16"
    k = tilex.compile(quant_matmul(16, 256, 512, wt, 128, QuantTiles(num_stages=3), act=act), out_idx=-1,
                      target="sm_90a")
    suffix = "f16" if act == "float16" else "bf16"
    assert f"decode_chunk_{suffix}" in k.get_kernel_source()


@pytest.mark.parametrize("wt", SOME_TYPES)
def test_quant_matmul_compiles_for_sm80(wt):
    k = tilex.compile(quant_matmul(16, 256, 512, wt, 128, QuantTiles(num_stages=3)), out_idx=-1, target="sm_80")
    src = k.get_kernel_source()
    assert "decode_chunk_f16" in src and "scale_pair_f16" in src and "mma_m16n8k16" in src


@pytest.mark.parametrize("act,g", [("bfloat16", 64), ("float16", 32)])
def test_quant_matmul_zero_points_compile(act, g):
    k = tilex.compile(quant_matmul(5, 256, 512, "uint4", g, QuantTiles(num_stages=3), act=act, zero_point=True),
                      out_idx=-1, target="sm_90a")
    suffix = "bf16" if act == "bfloat16" else "f16"
    src = k.get_kernel_source()
    assert f"decode_chunk_{suffix}" in src
    # float16 codes of at most 4 bits: (x - z) * s as one fma with the shift -(z * s) rounded once
    assert ("scale_shift_pair_f16" if act == "float16" else "scale_zero_pair_bf16") in src
    if act == "float16":
        assert "scale_zero_pair" not in src and "* -0x1p+0f" in src  # the shift: -(scale * zero) in float32


@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_quant_matmul_offsets_take_one_fma_per_pair(act):
    """An offset tile (-(zero * scale) computed ahead) is added by the scaling fma: no shift math in the kernel."""
    k = tilex.compile(quant_matmul(5, 256, 512, "uint4", 64, QuantTiles(num_stages=3), act=act, zero_point=True,
                                   offset=True), out_idx=-1, target="sm_90a")
    src = k.get_kernel_source()
    assert f"scale_shift_pair_{'f16' if act == 'float16' else 'bf16'}" in src
    assert "scale_zero_pair" not in src and "-0x1p+0f" not in src


def test_offset_needs_a_scale_and_no_zero():
    with pytest.raises(ValueError, match="offset goes with a scale and without a zero"):
        _offset_program(scale=False)
    with pytest.raises(ValueError, match="offset goes with a scale and without a zero"):
        _offset_program(zero=True)


def _offset_program(scale=True, zero=False):
    @T.prim_func
    def main(P: T.Tensor((512,), "int32"), S: T.Tensor((1, 128), "float16"), Y: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128) as bx:
            S_s = T.alloc_shared((1, 128), "float16")
            W = T.alloc_fragment((128, 128), "float16")
            T.copy(S, S_s)
            T.dequantize(P, W, T.uint4, scale=S_s if scale else None, zero=S_s if zero else None, offset=S_s,
                         group_size=128)

    return main


@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_prescaled_float_scales_skip_the_decoders_power_of_two(act):
    """With prescaled scales an e2m1 decode is the raw one (no x * 2^k fma), with an offset as well."""
    for zp in (False, True):
        k = tilex.compile(quant_matmul(5, 256, 512, "float4_e2m1", 64, QuantTiles(num_stages=3), act=act,
                                       zero_point=zp, offset=zp, prescaled=True), out_idx=-1, target="sm_90a")
        src = k.get_kernel_source()
        assert f"decode_chunk_{'f16' if act == 'float16' else 'bf16'}<2, 4, 2, 1, true>" in src


def test_prescaled_needs_a_float_type_a_scale_and_no_zero():
    with pytest.raises(tilex.TileOpError, match="uint4 has none"):
        tilex.compile(_prescaled_program(T.uint4), target="sm_90a")
    with pytest.raises(tilex.TileOpError, match="float8_e4m3 has none|e4m3.* has none"):
        tilex.compile(_prescaled_program("float8_e4m3"), target="sm_90a")
    with pytest.raises(tilex.TileOpError, match="need a scale and no zero"):
        tilex.compile(_prescaled_program("float4_e2m1", zero=True), target="sm_90a")
    with pytest.raises(ValueError, match="prescaled is True or False"):
        T.dequantize(None, None, "float4_e2m1", prescaled="yes")
    with pytest.raises(ValueError, match="prescaled scales need groups shorter than K and no zeros"):
        quant_matmul(5, 256, 512, "float4_e2m1", 512, prescaled=True)
    with pytest.raises(ValueError, match="prescaled scales need groups shorter than K and no zeros"):
        quant_matmul(5, 256, 512, "float4_e2m1", 64, zero_point=True, prescaled=True)


def _prescaled_program(dtype, zero=False):
    @T.prim_func
    def main(P: T.Tensor((4096,), "int32"), S: T.Tensor((1, 128), "float16"), X: T.Tensor((16, 128), "float16"),
             Y: T.Tensor((128, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            P_s = T.alloc_shared((4096,), "int32")
            S_s = T.alloc_shared((1, 128), "float16")
            X_s = T.alloc_shared((16, 128), "float16")
            W = T.alloc_fragment((128, 128), "float16")
            C = T.alloc_fragment((128, 16), "float32")
            T.copy(P, P_s)
            T.copy(S, S_s)
            T.copy(X, X_s)
            T.dequantize(P_s, W, dtype, scale=S_s, zero=S_s if zero else None, group_size=128, prescaled=True)
            T.gemm(W, X_s, C, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C, Y)

    return main


def test_quant_matmul_prefill_tiles_use_wgmma():
    k = tilex.compile(quant_matmul(512, 256, 512, "int4", 128, QuantTiles(bn=128, bm=128, bk=64, threads=256,
                                                                          num_stages=3)), out_idx=-1,
                      target="sm_90a")
    assert "wgmma_m64n128k16_rs_f16" in k.get_kernel_source()


def _program(out_scope="fragment", out_dtype="float16"):
    @T.prim_func
    def main(P: T.Tensor((512,), "int32"), Y: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128) as bx:
            P_s = T.alloc_shared((512,), "int32")
            W = T.alloc_fragment((128, 128), out_dtype) if out_scope == "fragment" else \
                T.alloc_shared((128, 128), out_dtype)
            X = T.alloc_shared((16, 128), out_dtype)
            C = T.alloc_fragment((128, 16), "float32")
            T.copy(P, P_s)
            T.dequantize(P_s, W, T.uint4)
            T.gemm(W, X, C, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C, Y[0:128, 0:16])

    return main


def test_dequantize_into_shared_is_refused():
    with pytest.raises(tilex.TileOpError, match="must be a register fragment"):
        tilex.compile(_program(out_scope="shared"), target="sm_90a")


def test_dequantize_wide_exponent_into_float16_is_refused():
    @T.prim_func
    def main(P: T.Tensor((2048,), "int32"), Y: T.Tensor((128, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            P_s = T.alloc_shared((2048,), "int32")
            W = T.alloc_fragment((128, 128), "float16")
            X = T.alloc_shared((16, 128), "float16")
            C = T.alloc_fragment((128, 16), "float32")
            T.copy(P, P_s)
            T.dequantize(P_s, W, dtypes.float_type(6, 1))
            T.gemm(W, X, C, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C, Y)

    with pytest.raises(tilex.TileOpError, match="does not fit float16 exactly"):
        tilex.compile(main, target="sm_90a")


def test_unknown_low_bit_type_is_refused():
    with pytest.raises(ValueError, match="T.dequantize"):
        T.dequantize(None, None, "int9")


def test_quant_matmul_rejects_groups_across_tiles():
    with pytest.raises(ValueError, match="group size 48"):
        quant_matmul(16, 256, 768, "uint4", 48)


def test_ragged_weight_is_padded_with_code_zero():
    tiles = QuantTiles()
    codes = torch.randint(1, 16, (200, 300), dtype=torch.uint8)
    wp = prepack_weight(codes, "uint4", tiles, "sm_90a")
    back = _read_back(wp, weight_fragment(tiles, "sm_90a"), 4)
    assert back.shape == (256, 384) and torch.equal(back[:200, :300], codes)
    assert back[200:].eq(0).all() and back[:, 300:].eq(0).all()
    k = tilex.compile(quant_matmul(3, 200, 300, "uint4", 300, tiles), out_idx=-1, target="sm_90a")
    assert "decode_chunk_f16" in k.get_kernel_source()


def test_scale_tile_of_the_wrong_shape_is_refused():
    @T.prim_func
    def main(P: T.Tensor((2048,), "int32"), S: T.Tensor((128, 1), "float16"), Y: T.Tensor((128, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            P_s = T.alloc_shared((2048,), "int32")
            S_s = T.alloc_shared((128, 1), "float16")
            W = T.alloc_fragment((128, 128), "float16")
            X = T.alloc_shared((16, 128), "float16")
            C = T.alloc_fragment((128, 16), "float32")
            T.copy(P, P_s)
            T.copy(S, S_s)
            T.dequantize(P_s, W, T.uint4, scale=S_s, group_size=128)
            T.gemm(W, X, C, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C, Y)

    with pytest.raises(tilex.TileOpError, match=r"scale tile must be \(groups, rows\) = \(1, 128\)"):
        tilex.compile(main, target="sm_90a")


@pytest.mark.parametrize("dtype,want", [(T.int8, (1, 8, 0, 0)), (T.uint8, (0, 8, 0, 0)), (T.float8_e4m3, (2, 8, 4, 3)),
                                        (T.float8_e5m2, (2, 8, 5, 2)), (T.float4_e2m1fn, (2, 4, 2, 1)),
                                        (T.uint4, (0, 4, 0, 0)), ("int3", (1, 3, 0, 0))])
def test_dequantize_takes_tvmscript_and_tilex_dtypes(dtype, want):
    """TVMScript's dtype constructors (T.int8, T.float8_e4m3, ...) name the same types as tilex.dtypes."""
    import tvm

    call = T.dequantize(tvm.tirx.decl_buffer((512,), "int32", "P"), tvm.tirx.decl_buffer((128, 128), "float16", "W"),
                        dtype)
    assert tuple(int(a.value) for a in call.args[4:8]) == want
