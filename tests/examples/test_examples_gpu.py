"""The examples' tile programs against torch on the GPU, including ragged shapes: softmax and the norms from
tilex.kernels, the others from the example scripts themselves (examples/*.py, run as modules: main() not called)."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
from tilex.kernels.norms import layernorm_kernel, rmsnorm_kernel  # noqa: E402
from tilex.kernels.softmax import softmax_kernel  # noqa: E402
from programs import example as _example  # noqa: E402

column_sum_kernel = _example("column_sum")["column_sum_kernel"]
transpose_kernel = _example("transpose")["transpose_kernel"]
_epilogue = _example("gemm_epilogue")
gemm_bias_act_kernel, reference = _epilogue["gemm_bias_act_kernel"], _epilogue["reference"]
splitk_gemm_kernel = _example("splitk_gemm")["splitk_gemm_kernel"]
_dequant = _example("dequantize_gemm")
dequant_gemm_kernel, pack_nibbles = _dequant["dequant_gemm_kernel"], _dequant["pack_nibbles"]

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("shape,bm,threads", [((4096, 4096), 1, 256), ((1000, 1000), 1, 128), ((33, 4100), 1, 256),
                                              ((256, 512), 4, 128), ((64, 64), 8, 128)])
def test_softmax(shape, bm, threads):
    M, N = shape
    k = tilex.compile(softmax_kernel(M, N, bm=bm, threads=threads), out_idx=[1])
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(k(x), torch.softmax(x.float(), 1).half(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 1000), (7, 8192)])
def test_rmsnorm_layernorm(shape):
    M, N = shape
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    w = torch.randn(N, device="cuda", dtype=torch.float16)
    b = torch.randn(N, device="cuda", dtype=torch.float16)
    rms = tilex.compile(rmsnorm_kernel(M, N), out_idx=[2])
    ln = tilex.compile(layernorm_kernel(M, N), out_idx=[3])
    ref_rms = torch.nn.functional.rms_norm(x.float(), (N,), w.float(), eps=1e-6)
    ref_ln = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), eps=1e-5)
    torch.testing.assert_close(rms(x, w).float(), ref_rms, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(ln(x, w, b).float(), ref_ln, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 1000), (100, 33)])
def test_column_sum(shape):
    M, N = shape
    k = tilex.compile(column_sum_kernel(M, N))
    x = torch.randint(-8, 8, (M, N), device="cuda").float()
    s = torch.zeros(N, device="cuda")
    k(x, s)
    torch.testing.assert_close(s, x.sum(0), atol=0, rtol=0)  # integer-valued: exact, atomics from many blocks


@pytest.mark.parametrize("shape", [(1024, 2048), (1000, 700), (65, 3)])
def test_transpose(shape):
    M, N = shape
    k = tilex.compile(transpose_kernel(M, N), out_idx=[1])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(k(a), a.t().contiguous(), atol=0, rtol=0)


@pytest.mark.parametrize("act", ["relu", "gelu"])
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 1000, 1000), (257, 129, 512)])
def test_gemm_bias_activation(shape, act):
    M, N, K = shape
    k = tilex.compile(gemm_bias_act_kernel(M, N, K, act), out_idx=[3])
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16) / K ** 0.5
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(k(a, b, bias).float(), reference(a, b, bias, act), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("shape", [(512, 512, 8192, 4), (1000, 1000, 1000, 3), (129, 257, 4096, 8)])
def test_splitk_gemm_with_atomics(shape):
    M, N, K, split = shape
    k = tilex.compile(splitk_gemm_kernel(M, N, K, split))
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.zeros(M, N, device="cuda")
    k(a, b, c)
    torch.testing.assert_close(c / K ** 0.5, (a.float() @ b.float()) / K ** 0.5, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq,dim", [(512, 128), (1024, 64)])
def test_tilelang_style_flash_attention(causal, seq, dim):
    flashattn = _example("flash_attention/mha_fwd_tilelang_style")["flashattn"]
    k = tilex.compile(flashattn(2, 4, seq, dim, causal), out_idx=[3])
    q, kk, v = (torch.randn(2, 4, seq, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=causal)
    torch.testing.assert_close(k(q, kk, v), ref, atol=1e-2, rtol=1e-2)


_SHARED = {"tilex.disable_decode_into_registers": True}


# (M, tile, pass configs): the example's default, a decode tile, and prefill tiles with the decoded tile in the
# MMA's registers (transform/register_operand.py: full and partial M tiles); then prefill tiles kept in shared
# memory, where the warp-specialized loop double-buffers the decoded tile (two k stages, a partial last M tile)
@pytest.mark.parametrize("M, tile, configs", [
    (1, {}, None), (16, {}, None), (33, {}, None), (16, dict(bn=32, bk=256, stages=4), None),
    (512, dict(bm=256, bn=128, bk=64, stages=4, threads=256), None),
    (200, dict(bm=256, bn=128, bk=128, stages=2, threads=256), None),
    (128, dict(bm=128, bn=128, bk=64, stages=3, threads=256), None),
    (512, dict(bm=256, bn=128, bk=128, stages=2, threads=256), _SHARED),
    (200, dict(bm=128, bn=256, bk=64, stages=3, threads=256), _SHARED)])
def test_dequantize_gemm_hand_written(M, tile, configs):
    from tilex import quant

    N, K, g = 512, 1024, 128
    qw = quant.quantize(torch.randn(N, K, device="cuda") / K ** 0.5, "uint4", group_size=g)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    k = tilex.compile(dequant_gemm_kernel(M, N, K, g, **tile), out_idx=-1, pass_configs=configs)
    if M > 64:  # prefill tiles: the decoded weights are the MMA's register operand unless turned off
        assert ("_rs_" in k.get_kernel_source()) == (configs is None)
    ref = x.float() @ quant.dequantize(qw).float().T
    torch.testing.assert_close(k(x, pack_nibbles(qw.codes), qw.scales.half()).float(), ref, atol=2e-2, rtol=2e-2)
