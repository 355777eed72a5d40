"""GEMM on the GPU against torch: fp16/bf16, NN/NT/TN, aligned and ragged shapes."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
from tilex.kernels.gemm import matmul  # noqa: E402

SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (1000, 1000, 1000), (1, 4096, 4096), (257, 129, 4096)]
LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False)}


def _operands(M, N, K, dtype="float16"):
    tdt = getattr(torch, dtype)
    return torch.randn(M, K, device="cuda", dtype=tdt), torch.randn(K, N, device="cuda", dtype=tdt)


def _assert_product(c, a, b):
    """c == a @ b, compared at the scale of one output element's standard deviation (sqrt(K))."""
    K = a.shape[1]
    torch.testing.assert_close(c.float() / K ** 0.5, (a.float() @ b.float()) / K ** 0.5, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_matches_torch(shape, layout, dtype):
    M, N, K = shape
    ta, tb = LAYOUTS[layout]
    kernel = tilex.compile(matmul(M, N, K, dtype=dtype, trans_a=ta, trans_b=tb), out_idx=[2])
    tdt = getattr(torch, dtype)
    a = torch.randn((K, M) if ta else (M, K), device="cuda", dtype=tdt)
    b = torch.randn((N, K) if tb else (K, N), device="cuda", dtype=tdt)
    c = kernel(a, b)
    ref = (a.t() if ta else a).float() @ (b.t() if tb else b).float()
    torch.cuda.synchronize()
    # inputs are O(1) random: scale tolerances by sqrt(K) as accumulation error grows with K
    torch.testing.assert_close(c.float() / K ** 0.5, ref / K ** 0.5, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [(1000, 1000, 1000), (257, 129, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_gemm_mma_sync_path_matches_torch(shape, layout, dtype):
    """The sm80 path (ldmatrix + mma.sync), forced on the H200 by disabling wgmma."""
    M, N, K = shape
    ta, tb = LAYOUTS[layout]
    kernel = tilex.compile(matmul(M, N, K, dtype=dtype, trans_a=ta, trans_b=tb), out_idx=[2],
                           pass_configs={"tilex.disable_wgmma": True})
    assert "mma_m16n8k16" in kernel.get_kernel_source()
    tdt = getattr(torch, dtype)
    a = torch.randn((K, M) if ta else (M, K), device="cuda", dtype=tdt)
    b = torch.randn((N, K) if tb else (K, N), device="cuda", dtype=tdt)
    ref = (a.t() if ta else a).float() @ (b.t() if tb else b).float()
    torch.testing.assert_close(kernel(a, b).float() / K ** 0.5, ref / K ** 0.5, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [(128, 256, 64, 3, 256), (256, 128, 64, 3, 256), (64, 128, 64, 4, 128),
                                 (128, 128, 128, 2, 128)])
def test_gemm_tile_configs(cfg):
    bm, bn, bk, stages, threads = cfg
    M, N, K = 1000, 1000, 1000
    kernel = tilex.compile(matmul(M, N, K, bm, bn, bk, stages, threads), out_idx=[2])
    a, b = _operands(M, N, K)
    _assert_product(kernel(a, b), a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("ws", [True, False])
@pytest.mark.parametrize("swizzle", [0, 8])
@pytest.mark.parametrize("cfg", [(128, 128, 64, 4, 256), (128, 256, 64, 4, 256), (256, 128, 64, 3, 256)])
def test_gemm_multi_warpgroup_configs(cfg, swizzle, ws):
    """Several warpgroups per block, with and without warp specialization and block rasterization."""
    bm, bn, bk, stages, threads = cfg
    M, N, K = 1024, 1024, 1024
    pc = None if ws else {"tilex.disable_warp_specialized": True}
    kernel = tilex.compile(matmul(M, N, K, bm, bn, bk, stages, threads, swizzle=swizzle), out_idx=[2],
                           pass_configs=pc)
    a, b = _operands(M, N, K)
    _assert_product(kernel(a, b), a, b)


ISSUE_SHAPES = [(4096, 4096, 4096, (128, 256, 64, 4, 256, 0)), (8192, 8192, 8192, (128, 256, 64, 4, 256, 16)),
                (4096, 28672, 8192, (128, 256, 64, 4, 256, 8)), (8192, 8192, 1024, (128, 256, 64, 4, 256, 0)),
                (128, 8192, 8192, (128, 64, 128, 4, 256, 0)), (16, 8192, 8192, (64, 128, 128, 4, 128, 0)),
                # ragged: TMA zero-fills the edges, stores are guarded; 31 block rows leave no pairs for multicast
                (4000, 3000, 1000, (128, 256, 64, 4, 256, 8)), (3900, 4100, 1000, (128, 256, 64, 4, 256, 0))]
SCHEDULES = {"persistent+multicast": None, "persistent": {"tilex.disable_tma_multicast": True},
             "one block per tile": {"tilex.disable_persistent": True},
             "one block per tile, clusters of 4": {"tilex.disable_persistent": True, "tilex.cluster_size": 4},
             "one block per tile, clusters of 2": {"tilex.disable_persistent": True, "tilex.cluster_size": 2},
             "no warp specialization": {"tilex.disable_warp_specialized": True}}


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", ISSUE_SHAPES, ids=lambda c: "x".join(map(str, c[:3])))
def test_gemm_benchmark_shapes_and_schedules(case, dtype, schedule):
    """The benchmark's shapes with its best configs, under each schedule the sm90 path can take."""
    M, N, K, (bm, bn, bk, stages, threads, swizzle) = case
    kernel = tilex.compile(matmul(M, N, K, bm, bn, bk, stages, threads, dtype=dtype, swizzle=swizzle), out_idx=[2],
                           pass_configs=SCHEDULES[schedule])
    a, b = _operands(M, N, K, dtype)
    c = kernel(a, b)
    c2 = kernel(a, b)  # a second launch: barriers and phases start fresh
    _assert_product(c, a, b)
    assert torch.equal(c, c2)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [(16, 8192, 8192, 4), (128, 8192, 8192, 2), (100, 3000, 5000, 3)],
                         ids=lambda c: "x".join(map(str, c)))
def test_splitk_gemm_fp16(case):
    from tilex.kernels.gemm import matmul_splitk

    M, N, K, split = case
    kernel = tilex.compile(matmul_splitk(M, N, K, 64, 128, 64, 4, 128, split))
    a, b = _operands(M, N, K)
    c = torch.zeros(M, N, device="cuda", dtype=torch.float16)
    kernel(a, b, c)
    _assert_product(c, a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("pc", [None, {"tilex.disable_persistent": True}, {"tilex.disable_warp_specialized": True},
                                {"tilex.disable_tma_store": True}], ids=["default", "nonpersistent", "nows", "notma"])
@pytest.mark.parametrize("shape", [(4096, 4096, 1024), (4000, 3000, 1000), (1000, 1000, 1000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gemm_staged_epilogue(shape, pc):
    """C written through a shared tile (a TMA store on sm90), ragged edges clipped by the hardware."""
    M, N, K = shape
    kernel = tilex.compile(matmul(M, N, K, 128, 256, 64, 3, 256, swizzle=8, stage_c=True), out_idx=[2],
                           pass_configs=pc)
    a, b = _operands(M, N, K)
    _assert_product(kernel(a, b), a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [(16, 8192, 8192, 16, 64, 128, 8, 128), (16, 4096, 2048, 16, 128, 128, 6, 128),
                                  (5, 1000, 3000, 16, 64, 128, 8, 128), (40, 3000, 1000, 32, 64, 64, 6, 128),
                                  (16, 2048, 1024, 16, 128, 128, 4, 256)],
                         ids=lambda c: "x".join(map(str, c[:3])) + f"_{c[3]}x{c[4]}")
def test_swap_ab_gemm(case, dtype):
    """Skinny A through C^T = B^T A^T tiles (MN-major A operand, narrow wgmma N), ragged M and N guarded."""
    from tilex.kernels.gemm import matmul_swap_ab

    M, N, K, *cfg = case
    kernel = tilex.compile(matmul_swap_ab(M, N, K, *cfg, dtype=dtype), out_idx=[2])
    a, b = _operands(M, N, K, dtype)
    _assert_product(kernel(a, b), a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [(128, 8192, 8192, 8, 128, True, {}), (128, 8192, 8192, 8, 256, False, {}),
                                  (100, 3000, 1000, 6, 128, True, {}), (200, 1000, 2048, 6, 128, False, {}),
                                  (128, 4096, 4096, 8, 128, False, {"tilex.cluster_size": 2}),
                                  (100, 3000, 1000, 6, 128, True, {"tilex.disable_tma_store": True})],
                         ids=lambda c: "x".join(map(str, c[:3])) + f"_s{c[3]}_t{c[4]}" + ("_stagec" if c[5] else "")
                         + "".join("_" + k.split(".")[1] for k in c[6]))
def test_swap_ab_row_blocks_on_x(case, dtype):
    """Swap-AB with A's row blocks on the grid's x axis (64-row blocks, C^T tiles of 128 x 64), C written directly
    or through a shared tile; ragged M, N and K; clusters along x multicasting B."""
    from tilex.kernels.gemm import matmul_swap_ab

    M, N, K, stages, threads, stage_c, pc = case
    kernel = tilex.compile(matmul_swap_ab(M, N, K, 64, 128, 64, stages, threads, dtype=dtype, stage_c=stage_c,
                                          m_major=True), out_idx=[2], pass_configs=pc)
    a, b = _operands(M, N, K, dtype)
    _assert_product(kernel(a, b), a, b)
