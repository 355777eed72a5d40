"""Autotuning on a real GPU (skipped without one)."""
import pytest
import torch

import tilex
import tilex.autotuner as at
import tune_kernels
from tilex.autotuner import tuner as tuner_mod

pytestmark = pytest.mark.gpu

CONFIGS = [
    dict(bm=128, bn=128, bk=64, num_stages=3, threads=128),
    dict(bm=128, bn=128, bk=64, num_stages=3, threads=96),   # invalid: 3 warps cannot split the C tile
    dict(bm=64, bn=64, bk=32, num_stages=2, threads=128),
    dict(bm=128, bn=256, bk=64, num_stages=3, threads=256),
]


def _ref(A, B):
    return (A.float() @ B.float()).half()


@pytest.fixture(autouse=True)
def _fresh_autotune_cache():
    at.clear_cache()
    yield
    at.clear_cache()


def test_tune_small_gemm_space_then_cache_hit(monkeypatch):
    tuned = at.autotune(configs=CONFIGS, ref_prog=_ref, out_idx=[2], warmup=5, rep=20)(tune_kernels.matmul)
    kernel = tuned(1024, 1024, 1024)
    res = tuned.tune_results(1024, 1024, 1024)
    assert not res.from_cache and res.cache_path
    assert kernel is res.kernel and kernel.config == res.config and kernel.config in CONFIGS
    assert kernel.config["threads"] != 96 and res.latency > 0 and res.ref_latency > 0
    statuses = {r.index: r for r in res.results}
    assert statuses[1].status == at.BUILD_ERROR and "3 warps" in statuses[1].reason
    for i in (0, 2, 3):
        assert statuses[i].status == at.OK and statuses[i].latency > 0 and statuses[i].max_error is not None
    assert res.latency == min(r.latency for r in res.results if r.ok)
    print("\n" + res.table())

    A = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    B = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(A, B), _ref(A, B), rtol=1e-2, atol=1e-2)

    # a second tuner (a fresh process would do the same) finds the cached best: no benchmarking, one compile
    monkeypatch.setattr(tuner_mod.AutoTuner, "benchmark", lambda *a: pytest.fail("benchmarked on a cache hit"))
    monkeypatch.setattr(tuner_mod.AutoTuner, "_compile_job", lambda *a: pytest.fail("compiled every config"))
    again = at.AutoTuner.from_kernel(tune_kernels.matmul, CONFIGS).set_compile_args(out_idx=[2]).set_profile_args(
        ref_prog=_ref).run(1024, 1024, 1024)
    assert again.from_cache and again.config == res.config and again.cache_path == res.cache_path
    torch.testing.assert_close(again.kernel(A, B), _ref(A, B), rtol=1e-2, atol=1e-2)


def test_wrong_results_are_rejected():
    t = at.AutoTuner(tune_kernels.matmul, CONFIGS[2:3], out_idx=[2], warmup=1, rep=5, cache=False,
                     ref_prog=lambda A, B: _ref(A, B) + 1)
    with pytest.raises(at.AutotuneError, match="wrong result") as ei:
        t.run(256, 256, 256)
    r = ei.value.results[0]
    assert r.status == at.WRONG and r.max_error == pytest.approx(1.0, abs=0.05) and "max abs error" in r.reason


def test_shared_memory_limit_on_device():
    limit = at.device_shared_memory_limit()
    assert limit and limit >= 48 * 1024
    assert limit == torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    huge = dict(bm=256, bn=256, bk=128, num_stages=4, threads=256)  # 4 * 2 * 256*128 * 2 bytes = 512 KiB
    t = at.AutoTuner(tune_kernels.matmul, [CONFIGS[2], huge], out_idx=[2], warmup=1, rep=5, cache=False,
                     ref_prog=_ref, parallel="thread")
    res = t.run(256, 256, 256)
    assert res.results[1].status == at.SMEM and "shared_memory_per_block_optin" in res.results[1].reason
    assert res.config == CONFIGS[2]


def test_supply_and_skip_check():
    seen, ref_calls = [], []

    def supply(params):
        seen.append([(p.name, p.dtype, tuple(p.shape)) for p in params])
        return [torch.ones(tuple(p.shape), dtype=p.torch_dtype, device="cuda") for p in params]

    def wrong_ref(A, B):  # only timed (for ref_latency), never compared with skip_check
        ref_calls.append(1)
        return torch.zeros(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)

    t = at.AutoTuner(tune_kernels.matmul, CONFIGS[2:3], out_idx=[2], warmup=1, rep=5, cache=False, supply=supply,
                     skip_check=True, ref_prog=wrong_ref)
    res = t.run(256, 128, 64)
    assert seen == [[("A", "float16", (256, 64)), ("B", "float16", (64, 128))]]
    assert res.best.status == at.OK and res.best.max_error is None and res.ref_latency > 0 and ref_calls
    torch.testing.assert_close(res.kernel(*supply(res.kernel.params[:2])),
                               torch.full((256, 128), 64.0, dtype=torch.float16, device="cuda"))


def test_default_supply():
    from tilex.jit import ParamSpec

    specs = [ParamSpec(0, "a", "buffer", "float16", torch.float16, (4, 8), None, False, None),
             ParamSpec(1, "i", "buffer", "int32", torch.int32, (16,), None, False, None),
             ParamSpec(2, "m", "buffer", "bool", torch.bool, (3,), None, False, None)]
    a, i, m = at.default_supply(specs)
    assert a.shape == (4, 8) and a.dtype == torch.float16 and a.is_cuda
    assert i.dtype == torch.int32 and int(i.abs().max()) <= 4 and m.dtype == torch.bool
    with pytest.raises(at.AutotuneError, match="scalar"):
        at.default_supply([ParamSpec(0, "n", "scalar", "int32", None, (("sym", 0, "n"),), None, False, None)])


def test_do_bench():
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    t = at.do_bench(lambda: x @ x, warmup=5, rep=20)
    assert 0 < t < 100
    times = at.do_bench(lambda: x @ x, n_warmup=2, n_repeat=7, return_mode="all")
    assert len(times) == 7 and all(v > 0 for v in times)
    # 2*4096^3 flop; any GPU this runs on does it in well under 100 ms and above 0.01 ms
    assert 0.01 < at.do_bench(lambda: x @ x, return_mode="min", n_warmup=1, n_repeat=3) < 100
    k = tilex.compile(tune_kernels.matmul(1024, 1024, 1024, 64, 64, 32, 2, 128), out_idx=[2])
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    assert at.do_bench(lambda: k(a, a), warmup=2, rep=10) > 0


def test_benchmark_phase_on_two_threads_of_one_gpu():
    # devices=[0, 0]: the multi-GPU path (one thread per device pulling configurations) on a one-GPU machine
    t = at.AutoTuner(tune_kernels.matmul, CONFIGS, out_idx=[2], warmup=1, rep=5, cache=False, ref_prog=_ref,
                     progress=False, devices=[0, 0])
    res = t.run(512, 512, 512)
    ok = [r for r in res.results if r.ok]
    assert len(ok) == 3 and all(r.device == 0 and r.latency > 0 for r in ok)
    assert res.latency == min(r.latency for r in ok) and res.ref_latency > 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_benchmark_phase_uses_every_gpu():
    t = at.AutoTuner(tune_kernels.matmul, CONFIGS * 2, out_idx=[2], warmup=1, rep=50, cache=False,
                     ref_prog=_ref, progress=False)
    res = t.run(1024, 1024, 1024)
    assert {r.device for r in res.results if r.ok} == set(range(torch.cuda.device_count()))
