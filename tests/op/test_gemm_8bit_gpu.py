"""8-bit T.gemm on the GPU: int8/uint8 -> int32 (exact) and float8 e4m3/e5m2 -> float32 with scales, on wgmma
and on the mma.sync path (forced with tilex.disable_wgmma), aligned and ragged shapes."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
from tilex.kernels.gemm_8bit import int_matmul, scaled_matmul  # noqa: E402
from gemm_rs_kernels import rs_8bit_matmul  # noqa: E402

SHAPES = [(1024, 1024, 1024), (1000, 776, 1024), (129, 264, 4096), (64, 8, 96)]
SM80 = {"tilex.disable_wgmma": True}
SM80_TILES = dict(bm=128, bn=128, bk=64, num_stages=3, threads=128)


def _ints(shape, dtype):
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    return torch.randint(lo, hi, shape, dtype=getattr(torch, dtype), device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["wgmma", "mma_sync"])
@pytest.mark.parametrize("types", [("int8", "int8"), ("uint8", "int8"), ("int8", "uint8"), ("uint8", "uint8")])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_int_matmul_is_exact(shape, types, path):
    M, N, K = shape
    tiles = SM80_TILES if path == "mma_sync" else {}
    kernel = tilex.compile(int_matmul(M, N, K, a_dtype=types[0], b_dtype=types[1], **tiles), out_idx=-1,
                           pass_configs=SM80 if path == "mma_sync" else None)
    assert ("mma_m16n8k32_i8" if path == "mma_sync" else "k32_i8") in kernel.get_kernel_source()
    a, b = _ints((M, K), types[0]), _ints((N, K), types[1])
    ref = (a.double() @ b.double().T).to(torch.int64)  # exact: |sum| < 2^31 < 2^53 (CUDA has no int64 matmul)
    assert torch.equal(kernel(a, b).to(torch.int64), ref)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["wgmma", "mma_sync"])
@pytest.mark.parametrize("types", [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn"),
                                   ("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e5m2")])
@pytest.mark.parametrize("scales", [("tensor", "tensor"), ("row", "row")])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_scaled_matmul_fp8(shape, scales, types, path):
    M, N, K = shape
    tiles = SM80_TILES if path == "mma_sync" else {}
    kernel = tilex.compile(scaled_matmul(M, N, K, in_dtype=types[0], b_dtype=types[1], scale_a=scales[0],
                                         scale_b=scales[1], **tiles), out_idx=-1,
                           pass_configs=SM80 if path == "mma_sync" else None)
    a = torch.randn(M, K, device="cuda").to(getattr(torch, types[0]))
    b = torch.randn(N, K, device="cuda").to(getattr(torch, types[1]))
    sa = torch.rand(M if scales[0] == "row" else 1, device="cuda") + 0.5
    sb = torch.rand(N if scales[1] == "row" else 1, device="cuda") + 0.5
    c = kernel(a, b, sa, sb)
    assert c.dtype == torch.bfloat16
    ref = (a.double() @ b.double().T) * sa.double()[:, None] * sb.double()[None, :]
    # fp32 accumulation of exact fp8 products: the bf16 rounding of the output dominates
    torch.testing.assert_close(c.double(), ref, atol=2e-2 * K ** 0.5, rtol=1e-2)


@pytest.mark.gpu
def test_scaled_matmul_matches_torch_scaled_mm():
    M = N = K = 2048
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([2.0], device="cuda")
    kernel = tilex.compile(scaled_matmul(M, N, K, out_dtype="float16"), out_idx=-1)
    ref = torch._scaled_mm(a, b.T, sa, sb, out_dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b, sa, sb).float(), ref.float(), atol=0.25, rtol=1e-2)


@pytest.mark.gpu
def test_int8_scaled_matmul_w8a8():
    """int8 inputs with per-row / per-column scales (W8A8): exact int32 sums, then scaled in fp32."""
    M, N, K = 256, 512, 1024
    a, b = _ints((M, K), "int8"), _ints((N, K), "int8")
    sa, sb = torch.rand(M, device="cuda") / 100, torch.rand(N, device="cuda") / 100
    kernel = tilex.compile(scaled_matmul(M, N, K, in_dtype="int8", out_dtype="float32", scale_a="row",
                                         scale_b="row"), out_idx=-1)
    ref = (a.double() @ b.double().T) * sa.double()[:, None] * sb.double()[None, :]
    torch.testing.assert_close(kernel(a, b, sa, sb).double(), ref, atol=1e-3, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["wgmma", "mma_sync"])
@pytest.mark.parametrize("dtype,acc", [("int8", "int32"), ("float8_e4m3fn", "float32"), ("float8_e5m2", "float32")])
def test_8bit_a_in_registers(dtype, acc, path):
    """A tiles copied into a register fragment (wgmma's rs form / mma.sync from registers)."""
    M, N, K = 256, 384, 512
    kernel = tilex.compile(rs_8bit_matmul(M, N, K, dtype, acc), out_idx=-1,
                           pass_configs=SM80 if path == "mma_sync" else None)
    if dtype == "int8":
        a, b = _ints((M, K), "int8"), _ints((N, K), "int8")
        assert torch.equal(kernel(a, b).to(torch.int64), (a.double() @ b.double().T).to(torch.int64))
    else:
        a = torch.randn(M, K, device="cuda").to(getattr(torch, dtype))
        b = torch.randn(N, K, device="cuda").to(getattr(torch, dtype))
        ref = a.double() @ b.double().T
        # Hopper's float8 wgmma adds its products with a narrower accumulator than fp32 (as cuBLAS's fast
        # accumulation does): errors of ~1e-3 of |sum| over K = 512; mma.sync stays within the tighter bound
        torch.testing.assert_close(kernel(a, b).double(), ref, atol=1e-2 * K ** 0.5, rtol=1e-3)
