"""A16Wx GEMM on the GPU (tilex.ops.quant_matmul): every low-bit type, group sizes, zero-points, ragged M,
float16 and bfloat16 activations, against torch on the dequantized weight."""
import pytest

torch = pytest.importorskip("torch")

from tilex import dtypes, ops, quant  # noqa: E402
from tilex.kernels.quant_matmul import QuantTiles  # noqa: E402


def _check(M, N, K, wt, g=128, zp=False, act="float16", tiles=None, magnitude=1.0):
    tdt = getattr(torch, act)
    w = torch.randn(N, K, device="cuda") * magnitude / K ** 0.5
    qw = quant.quantize(w, wt, group_size=g, zero_point=zp)
    pw = ops.pack_weight(qw, act=act, tiles=tiles)
    if pw.prescaled:  # scales carry the raw decode's power of two, exactly
        e = quant.raw_scale_exponent(wt, act)
        assert torch.equal(pw.scales.float(), qw.scales.T.to(tdt).float() * 2.0 ** e)
    x = torch.randn(M, K, device="cuda", dtype=tdt)
    y = ops.quant_matmul(x, pw)
    assert y.shape == (M, N) and y.dtype == tdt
    w_hat = quant.dequantize(qw, tdt)  # the kernel multiplies the decoded codes in this dtype too
    ref = x.float() @ w_hat.float().T
    scale = ref.abs().max().clamp(min=1e-3)
    err = ((y.float() - ref).abs().max() / scale).item()
    assert err < (2e-2 if act == "bfloat16" else 4e-3), f"{wt} M={M} g={g} zp={zp} {act}: max rel error {err:.2e}"
    return pw


def _types_for(act):
    return [t for t in dtypes.ALL_TYPES if t.exact_in(act) and not (t.bits == 1 and t.kind != "float")]


@pytest.mark.gpu
@pytest.mark.parametrize("wt", _types_for("float16"), ids=str)
def test_every_type_float16(wt):
    _check(16, 256, 512, wt, zp=wt.kind == "uint")


@pytest.mark.gpu
@pytest.mark.parametrize("wt", _types_for("bfloat16"), ids=str)
def test_every_type_bfloat16(wt):
    _check(16, 256, 512, wt, act="bfloat16", zp=wt.kind == "uint")


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
@pytest.mark.parametrize("wt", ["float4_e2m1", "float6_e3m2", "float3_e1m1"])
def test_prescaled_floats_with_zero_points_and_overflowing_scales(wt, act):
    """Float codes decoded raw against prescaled scales (pack_weight's choice), with offsets or zero points, and
    weights whose scales times 2^k overflow (packed unscaled)."""
    _check(16, 256, 512, wt, act=act, zp=True)
    assert _check(16, 256, 512, wt, act=act).prescaled
    # weights of ~100: every scale * 2^k overflows, so the decoder keeps its own multiply
    assert not _check(16, 256, 512, wt, act=act, magnitude=3000.0).prescaled


@pytest.mark.gpu
@pytest.mark.parametrize("wt", ["int1", "uint1"])
def test_one_bit_with_zero_points(wt):
    _check(16, 256, 512, wt, zp=True)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 5, 16, 17, 33, 100])
@pytest.mark.parametrize("g", [32, 64, 128, 512, None])
@pytest.mark.parametrize("zp", [False, True])
def test_int4_shapes_groups_zero_points(M, g, zp):
    _check(M, 384, 1024, "int4" if not zp else "uint4", g=g, zp=zp)


@pytest.mark.gpu
@pytest.mark.parametrize("N,K,g", [(200, 300, None), (1000, 1024, 128), (136, 520, 8)])
def test_ragged_weights(N, K, g):
    _check(7, N, K, "int4", g=g)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["float16", "bfloat16"])
def test_offsets(act):
    """The kernel with an offset tile (Z = -(zero * scale)) against torch, in both activation dtypes."""
    from tilex.jit import compile as compile_kernel
    from tilex.kernels.quant_matmul import quant_matmul

    M, N, K, g = 9, 256, 512, 64
    tdt = getattr(torch, act)
    qw = quant.quantize(torch.randn(N, K, device="cuda") / K ** 0.5, "uint4", group_size=g, zero_point=True)
    pw = ops.pack_weight(qw, act=act)
    offsets = (-(pw.scales.float() * qw.zeros.T.float())).to(tdt).contiguous()
    k = compile_kernel(quant_matmul(M, N, K, "uint4", g, pw.tiles, act=act, zero_point=True, offset=True),
                       out_idx=-1)
    x = torch.randn(M, K, device="cuda", dtype=tdt)
    ref = x.float() @ quant.dequantize(qw, tdt).float().T
    err = ((k(x, pw.words, pw.scales, offsets).float() - ref).abs().max() / ref.abs().max()).item()
    assert err < (2e-2 if act == "bfloat16" else 4e-3), err


@pytest.mark.gpu
@pytest.mark.parametrize("split_k,M", [(2, 16), (4, 5), (3, 33)])
def test_last_block_split_k(split_k, M):
    """The last split of each tile writes Y; the workspace and counters are zero again after every call."""
    from tilex.jit import compile as compile_kernel
    from tilex.kernels.quant_matmul import quant_matmul

    N, K, g = 384, 1024, 128
    qw = quant.quantize(torch.randn(N, K, device="cuda") / K ** 0.5, "int4", group_size=g)
    pw = ops.pack_weight(qw)
    bm = 16 if M <= 16 else 64
    tiles = QuantTiles(pw.tiles.bn, bm, pw.tiles.bk, pw.tiles.threads, pw.tiles.num_stages)
    k = compile_kernel(quant_matmul(M, N, K, "int4", g, tiles, split_k=split_k, split_reduce="last_block"))
    ws = torch.zeros(M, N, device="cuda")
    cnt = torch.zeros(-(-M // bm), -(-N // tiles.bn), device="cuda", dtype=torch.int32)
    for _ in range(2):
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        y = torch.empty(M, N, device="cuda", dtype=torch.float16)
        k(x, pw.words, pw.scales, pw.scales[:1], ws, cnt, y)
        ref = x.float() @ quant.dequantize(qw).float().T
        assert ((y.float() - ref).abs().max() / ref.abs().max()).item() < 4e-3
        assert not ws.any() and not cnt.any()


@pytest.mark.gpu
def test_prefill_tiles():
    _check(300, 256, 512, "int4", tiles=QuantTiles(bn=128, bk=64, threads=256, num_stages=3))


@pytest.mark.gpu
def test_wrong_activation_is_refused():
    qw = quant.quantize(torch.randn(128, 128, device="cuda"), "int4", group_size=128)
    pw = ops.pack_weight(qw)
    with pytest.raises(ValueError, match="packed for float16"):
        ops.quant_matmul(torch.randn(4, 128, device="cuda", dtype=torch.bfloat16), pw)
    with pytest.raises(ValueError, match="K = 64"):
        ops.quant_matmul(torch.randn(4, 64, device="cuda", dtype=torch.float16), pw)


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [1, 3, 4, 6, 8])
@pytest.mark.parametrize("shape", [(256, 512), (200, 300)])
def test_prepack_kernel_matches_host_packing(bits, shape):
    from tilex.kernels.quant_matmul import prepack_weight
    from tilex.ops.quant import prepack_weight_kernel

    codes = torch.randint(0, 2 ** bits, shape, dtype=torch.uint8, device="cuda")
    wt = f"uint{bits}"
    tiles = QuantTiles()
    assert torch.equal(prepack_weight_kernel(codes, wt, tiles, "sm_90a"), prepack_weight(codes, wt, tiles, "sm_90a"))


@pytest.mark.gpu
@pytest.mark.parametrize("split_k,g", [(2, 128), (3, 64), (4, None)])
def test_split_k(split_k, g):
    N, K = 256, 1280  # 10 k tiles: the last split of 3 or 4 runs past K (zeros)
    w = torch.randn(N, K, device="cuda") / K ** 0.5
    qw = quant.quantize(w, "uint4", group_size=g, zero_point=True)
    pw = ops.pack_weight(qw)
    x = torch.randn(9, K, device="cuda", dtype=torch.float16)
    ref = x.float() @ quant.dequantize(qw, torch.float16).float().T
    for reduce in ("last_block", "atomic", "last_block"):  # the last-block workspace is left at zero for reuse
        y = ops.quant_matmul(x, pw, split_k=split_k, split_reduce=reduce)
        assert y.dtype == torch.float16
        torch.testing.assert_close(y.float(), ref, atol=4e-3 * ref.abs().max().item(), rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("M, wt, zp", [(512, "int4", False), (600, "uint4", True)])
def test_prefill_rows(M, wt, zp):
    """M >= 512 takes 256-row blocks (ops.quant.m_tile); 600 leaves a partial second block."""
    _check(M, 256, 512, wt, zp=zp)
