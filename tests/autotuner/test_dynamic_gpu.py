"""tilex.autotune(..., dynamic={"m": ...}) on the GPU: configurations compiled once with M symbolic, profiled at
wave-aligned values, a DynamicKernel that picks one per call; correct for ragged, tiny and past-the-table values
of M, and the dispatch table reloaded from the autotune cache."""
import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
import tilex.language as T  # noqa: E402
from tilex.autotuner import AutoTuner  # noqa: E402
from tilex.autotuner.dispatch import DynamicKernel  # noqa: E402

from isolated import run_without_nvcc  # noqa: E402
from programs import matmul  # noqa: E402

CONFIGS = [dict(bm=64, bn=64, stages=3), dict(bm=128, bn=128, stages=3), dict(bm=128, bn=128, stages=4)]


def gemm(M, N, K, bm=128, bn=128, stages=3):
    return matmul(M, N, K, bm=bm, bn=bn, bk=64, stages=stages, threads=128)


@pytest.mark.gpu
def test_dynamic_m_selects_per_call_and_reloads_its_table():
    tuner = AutoTuner(gemm, CONFIGS, out_idx=-1, ref_prog=lambda a, b: a @ b, dynamic={"m": 1024}, progress=False,
                      warmup=1, rep=3)
    res = tuner.run(T.dynamic("m"), 512, 256)
    dk = res.kernel
    assert isinstance(dk, DynamicKernel) and not res.from_cache and dk.samples
    b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    for m in (1, 7, 129, 1000, 1500):  # 1500: past the table, the model decides
        a = torch.randn(m, 256, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(dk(a, b).float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2)
        assert 0 <= dk.choose(m) < len(CONFIGS)
    with pytest.raises(ValueError, match="argument 'B'"):
        dk(a, torch.randn(128, 512, device="cuda", dtype=torch.float16))
    again = AutoTuner(gemm, CONFIGS, out_idx=-1, ref_prog=lambda a, b: a @ b, dynamic={"m": 1024},
                      progress=False).run(T.dynamic("m"), 512, 256)
    assert again.from_cache and again.kernel.table.choices == dk.table.choices


@pytest.mark.gpu
def test_dynamic_profile_on_two_threads_of_one_gpu():
    # devices=[0, 0]: the sample values are shared by two threads (each with its own inputs)
    tuner = AutoTuner(gemm, CONFIGS, out_idx=-1, ref_prog=lambda a, b: a @ b, dynamic={"m": 1024}, progress=False,
                      warmup=1, rep=3, cache=False, devices=[0, 0])
    dk = tuner.run(T.dynamic("m"), 512, 256).kernel
    assert sorted(dk.samples) == list(range(len(CONFIGS)))
    for points in dk.samples.values():
        values = [v for v, _ in points]
        assert values == sorted(values) and all(ms > 0 for _, ms in points)
    b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    a = torch.randn(300, 256, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(dk(a, b).float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
def test_dynamic_kernel_export_loads_in_a_process_without_nvcc(tmp_path):
    import json

    tuner = AutoTuner(gemm, CONFIGS, out_idx=-1, ref_prog=lambda a, b: a @ b, dynamic={"m": 1024}, progress=False,
                      warmup=1, rep=3, cache=False)
    dk = tuner.run(T.dynamic("m"), 512, 256).kernel
    dk.export(tmp_path / "dyn")
    values = [1, 7, 129, 1000, 1500, 5000]
    expected = {m: dk.choose(m) for m in values}
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    script = f"""
        import json, torch
        from tilex.autotuner.dispatch import DynamicKernel
        dk = tilex.load({str(tmp_path / "dyn")!r})
        assert isinstance(dk, DynamicKernel), dk
        expected = json.load(open({str(tmp_path / "expected.json")!r}))
        b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
        for m, choice in expected.items():
            assert dk.choose(int(m)) == choice, (m, dk.choose(int(m)), choice)
            a = torch.randn(int(m), 256, device="cuda", dtype=torch.float16)
            torch.testing.assert_close(dk(a, b).float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2)
        try:
            dk(a, b[:128])
        except ValueError as e:
            assert "argument 'B'" in str(e), e
        else:
            raise AssertionError("a B of the wrong shape was accepted")
        print("LOADED OK")
    """
    r = run_without_nvcc(script, tmp_path)
    assert r.returncode == 0 and "LOADED OK" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
