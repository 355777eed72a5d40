"""T.gemm with A in a register fragment ("rs") on the GPU against torch: fp16/bf16, on wgmma (the sm90 default) and
on mma.sync (tilex.disable_wgmma); a plain kernel (A copied shared -> fragment), pipelined ones, a cast one (an
fp32 fragment computed in T.Parallel, cast into the A fragment) and attention's two-GEMM chain (S = Q K^T, P =
cast(S), O = P V)."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402
from gemm_rs_kernels import qk_pv, rs_cast_matmul, rs_matmul  # noqa: E402

PATHS = {"wgmma": None, "mma_sync": {"tilex.disable_wgmma": True}}
DTYPES = ["float16", "bfloat16"]


def _check_path(kernel, path, dtype):
    src = kernel.get_kernel_source()
    ty = "f16" if dtype == "float16" else "bf16"
    if path == "wgmma":
        assert f"k16_rs_{ty}<" in src
    else:
        assert f"mma_m16n8k16_{ty}" in src and "wgmma_m64" not in src


def _operands(M, N, K, dtype):
    tdt = getattr(torch, dtype)
    return torch.randn(M, K, device="cuda", dtype=tdt), torch.randn(K, N, device="cuda", dtype=tdt)


def _assert_close(c, ref, k):
    """Compared at the scale of one output element's standard deviation (sqrt of the reduction length)."""
    torch.testing.assert_close(c.float() / k ** 0.5, ref.float() / k ** 0.5, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 1000, 1000)], ids=lambda s: "x".join(map(str, s)))
def test_rs_gemm_plain(shape, dtype, path):
    M, N, K = shape
    kernel = tilex.compile(rs_matmul(M, N, K, dtype=dtype), out_idx=[2], pass_configs=PATHS[path])
    _check_path(kernel, path, dtype)
    a, b = _operands(M, N, K, dtype)
    _assert_close(kernel(a, b), a.float() @ b.float(), K)


@pytest.mark.gpu
@pytest.mark.parametrize("path", list(PATHS) + ["wgmma-no-ws"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("cfg", [(128, 128, 64, 128), (64, 128, 64, 256), (128, 256, 64, 256)],
                         ids=lambda c: "x".join(map(str, c)))
def test_rs_gemm_pipelined(cfg, stages, dtype, path):
    """T.Pipelined: A lands in shared memory asynchronously and is copied into the fragment every k tile; with
    256 threads and 64 rows the two warpgroups split N and both hold all of A."""
    bm, bn, bk, threads = cfg
    M, N, K = 1024, 1024, 1024
    pc = {"tilex.disable_warp_specialized": True} if path == "wgmma-no-ws" else PATHS[path]
    kernel = tilex.compile(rs_matmul(M, N, K, bm, bn, bk, stages, threads, dtype), out_idx=[2], pass_configs=pc)
    _check_path(kernel, "mma_sync" if path == "mma_sync" else "wgmma", dtype)
    a, b = _operands(M, N, K, dtype)
    c = kernel(a, b)
    _assert_close(c, a.float() @ b.float(), K)
    assert torch.equal(c, kernel(a, b))  # a second launch gives the same bits


@pytest.mark.gpu
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("stages", [1, 2])
def test_rs_gemm_cast_fragment(stages, dtype, path):
    """C = (0.5 * A) @ B with 0.5 * A computed into an fp32 fragment by T.Parallel and cast into the A fragment."""
    M, N, K = 512, 768, 1024
    kernel = tilex.compile(rs_cast_matmul(M, N, K, num_stages=stages, dtype=dtype, scale=0.5), out_idx=[2],
                           pass_configs=PATHS[path])
    _check_path(kernel, path, dtype)
    a, b = _operands(M, N, K, dtype)
    _assert_close(kernel(a, b), (0.5 * a.float()) @ b.float(), K)


@pytest.mark.gpu
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", [(64, 64, 128), (128, 64, 256)], ids=lambda t: "x".join(map(str, t)))
def test_attention_chain_p_times_v(tile, dtype, path):
    """O = sum over key tiles of cast(Q K^T / sqrt(D)) V: the first gemm's fp32 accumulator, scaled and cast in
    T.Parallel, is the second gemm's register A operand (FullRow keeps S's rows in P's threads on mma.sync)."""
    bm, bn, threads = tile
    M, N, D = 512, 1024, 64
    kernel = tilex.compile(qk_pv(M, N, D, bm, bn, threads, dtype, policy=T.GemmWarpPolicy.FullRow), out_idx=[3],
                           pass_configs=PATHS[path])
    _check_path(kernel, path, dtype)
    tdt = getattr(torch, dtype)
    q, k, v = (torch.randn(n, D, device="cuda", dtype=tdt) for n in (M, N, N))
    p = ((q.float() @ k.float().t()) * D ** -0.5).to(tdt)
    _assert_close(kernel(q, k, v), p.float() @ v.float(), N)


@pytest.mark.gpu
@pytest.mark.parametrize("pc", [None, {"tilex.disable_warp_specialized": True}, {"tilex.disable_wgmma": True}],
                         ids=["default", "nows", "mma_sync"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rs_gemm_more_tiles_than_multiprocessors(dtype, pc):
    """512 output tiles: the schedules a large sm90 GEMM takes (persistent, clustered, if the loop is warp-
    specialized), with A through registers; a ragged edge in M and N."""
    M, N, K = 4000, 4000, 1024
    kernel = tilex.compile(rs_matmul(M, N, K, 128, 256, 64, 3, 256, dtype), out_idx=[2], pass_configs=pc)
    a, b = _operands(M, N, K, dtype)
    c = kernel(a, b)
    _assert_close(c, a.float() @ b.float(), K)
    assert torch.equal(c, kernel(a, b))
