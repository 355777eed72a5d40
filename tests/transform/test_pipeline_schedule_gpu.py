"""Explicit T.Pipelined(order=, stage=) schedules on the GPU against torch: the derived schedule written out, operands
loaded in different stages, an element-wise step between load and MMA; on the sm90 default path (warp-specialized
where the schedule is the derived one), on the cp.async path with wgmma, and with mma.sync."""
import pytest

torch = pytest.importorskip("torch")

import pipeline_schedule_kernels as K  # noqa: E402

import tilex  # noqa: E402

CONFIGS = {
    "sm90": None,
    "no_ws": {"tilex.disable_warp_specialized": True},
    "mma_sync": {"tilex.disable_wgmma": True},
}

# name: (kernel, stage, order, scale of A, scale of B)
SCHEDULES = {
    "derived2": (K.gemm, (0, 0, 1), None, 1, 1),
    "derived3": (K.gemm, (0, 0, 2), None, 1, 1),
    "b_one_later3": (K.gemm, (0, 1, 2), None, 1, 1),
    "b_one_later3_gemm_first": (K.gemm, (0, 1, 2), (1, 2, 0), 1, 1),
    "b_with_gemm2": (K.gemm, (0, 1, 1), None, 1, 1),
    "a_one_later2": (K.gemm, (1, 0, 1), None, 1, 1),
    "copies_swapped3": (K.gemm, (0, 0, 2), (1, 0, 2), 1, 1),
    "scale_stage3": (K.gemm_scaled_b, (0, 0, 1, 2), None, 1, 2),
    "scale_stage3_late_order": (K.gemm_scaled_b, (0, 0, 1, 2), (0, 1, 3, 2), 1, 2),
    "scale_with_gemm2": (K.gemm_scaled_b, (0, 0, 1, 1), None, 1, 2),
    "scale_in_place3": (K.gemm_scaled_b_inplace, (0, 0, 1, 2), None, 1, 2),
    "scale_a_to_fragment2": (K.gemm_scaled_a_fragment, (0, 0, 1, 1), None, 2, 1),
}

# (M, N, K): aligned, ragged, and two with fewer k-tiles (bk = 32) than some of the schedules have stages
SHAPES = [(1024, 1024, 1024), (1000, 1000, 1000), (257, 129, 64), (128, 128, 32)]


def _check(kernel, M, N, Kdim, sa, sb):
    a = torch.randn(M, Kdim, device="cuda", dtype=torch.float16)
    b = torch.randn(Kdim, N, device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    ref = (sa * a.float()) @ (sb * b.float())
    torch.cuda.synchronize()
    scale = sa * sb * Kdim ** 0.5  # accumulation error grows with K
    torch.testing.assert_close(c.float() / scale, ref / scale, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_explicit_schedule_matches_torch(name, shape, config):
    make, stage, order, sa, sb = SCHEDULES[name]
    M, N, Kdim = shape
    kernel = tilex.compile(make(M, N, Kdim, stage=stage, order=order), out_idx=[2], pass_configs=CONFIGS[config])
    _check(kernel, M, N, Kdim, sa, sb)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_explicit_derived_schedule_is_warp_specialized(stages):
    """stage=[0, 0, S-1] is the schedule tilex derives: on sm90 it keeps the TMA producer warpgroup."""
    M = N = Kdim = 2048
    kernel = tilex.compile(K.gemm(M, N, Kdim, stage=(0, 0, stages - 1), bk=64, threads=128), out_idx=[2])
    assert "tilex::tma_load_2d" in kernel.get_kernel_source()
    _check(kernel, M, N, Kdim, 1, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("config", list(CONFIGS))
def test_explicit_schedule_two_warpgroups(config):
    """256 threads (two consumer warpgroups): barriers between warpgroups around in-flight wgmma."""
    M = N = Kdim = 1024
    kernel = tilex.compile(K.gemm(M, N, Kdim, stage=(0, 1, 2), order=(1, 2, 0), bm=128, bn=256, bk=64, threads=256),
                           out_idx=[2], pass_configs=CONFIGS[config])
    _check(kernel, M, N, Kdim, 1, 1)
    kernel = tilex.compile(K.gemm_scaled_b(M, N, Kdim, stage=(0, 0, 1, 2), bm=128, bn=256, bk=64, threads=256),
                           out_idx=[2], pass_configs=CONFIGS[config])
    _check(kernel, M, N, Kdim, 1, 2)
