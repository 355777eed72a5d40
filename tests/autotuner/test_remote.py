"""AutoTuner(..., runners=[...]): the benchmark phase on other machines through TVM's RPC tracker
(tilex.autotuner.remote). CPU tests replace the remote measurement; the GPU test times on a local GPU server."""
import os

import pytest
import torch

import tilex.autotuner as at
import tilex.language as T
import tune_kernels
from tilex.autotuner import rpc
from tilex.autotuner.remote import arg_specs
from tilex.jit.args import ArgChecker

CONFIGS = [dict(bm=64, bn=64, bk=32, num_stages=2, threads=128), dict(bm=128, bn=128, bk=64, num_stages=3,
                                                                      threads=128)]


class Runner:
    def __init__(self, key):
        self.key = key


def test_arg_specs_are_static_shapes_in_parameter_order():
    params = ArgChecker(tune_kernels.gemm(256, 128, 64), out_idx=[2]).params
    assert arg_specs(params) == [((256, 64), "float16"), ((64, 128), "float16"), ((256, 128), "float16")]
    with pytest.raises(at.AutotuneError, match="symbolic shape"):
        arg_specs(ArgChecker(tune_kernels.gemm(T.dynamic("m"), 128, 64), out_idx=[2]).params)


def test_tuner_times_on_the_runners(monkeypatch):
    """Each compiled configuration travels as an exported library; the fastest remote time wins; the cache and
    measurement keys name the runners' keys instead of the local GPU."""
    seen = []

    def fake_map_measure(runners, jobs, return_exceptions=False):
        out = []
        for job in jobs:
            assert os.path.isfile(job["lib_path"]) and job["arg_specs"][0] == ((256, 64), "float16")
            seen.append((tuple(r.key for r in runners), os.path.basename(job["lib_path"]), job["func_name"]))
            out.append([3.0, 2.0, 2.5] if "config1" in job["lib_path"] else RuntimeError("remote launch failed"))
        return out

    monkeypatch.setattr(rpc, "map_measure", fake_map_measure)
    t = at.AutoTuner(tune_kernels.gemm, CONFIGS, out_idx=[2], target="sm_90a", progress=False, cache=False,
                     skip_check=True, record=False, runners=[Runner("h100"), Runner("h200")], parallel="thread")
    res = t.benchmark(t.compile(256, 128, 64))
    assert [s[1] for s in seen] == ["config0.so", "config1.so"] and seen[0][0] == ("h100", "h200")
    assert res.best.index == 1 and res.latency == 2.5 and res.best.device == "remote"
    assert res.results[0].status == at.RUNTIME_ERROR and "remote launch failed" in res.results[0].reason
    assert t._device_label() == "rpc:h100,h200"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_checking_remote_results_needs_a_local_gpu():
    t = at.AutoTuner(tune_kernels.gemm, CONFIGS[:1], out_idx=[2], target="sm_90a", progress=False, cache=False,
                     ref_prog=lambda a, b: a @ b, runners=[Runner("h100")], parallel="thread")
    with pytest.raises(at.AutotuneError, match="skip_check=True"):
        t.benchmark(t.compile(256, 128, 64))


def test_dynamic_sizes_are_not_timed_remotely():
    t = at.AutoTuner(tune_kernels.gemm, CONFIGS, out_idx=[2], target="sm_90a", progress=False, cache=False,
                     dynamic="m", runners=[Runner("h100")], parallel="thread")
    with pytest.raises(at.AutotuneError, match="static shapes only"):
        t.run(T.dynamic("m"), 128, 64)


@pytest.mark.gpu
def test_tuner_times_on_a_local_gpu_server():
    """Checked on the local GPU, timed through a tracker and a GPU server on this host."""
    pytest.importorskip("tornado", reason="TVM's RPC tracker needs tornado (pip install tornado)")
    with rpc.local_tracker("tilex-test-tune") as (host, port):
        t = at.AutoTuner(tune_kernels.gemm, CONFIGS, out_idx=[2], progress=False, cache=False, record=False,
                         ref_prog=lambda a, b: (a.float() @ b.float()).half(), rep=20,
                         runners=[rpc.RemoteRunner(host, port, "tilex-test-tune", device="cuda")])
        res = t.run(512, 512, 512)
    assert all(r.ok and r.device == "remote" and 0 < r.latency < 5 for r in res.results), res.table()
    assert res.latency == min(r.latency for r in res.results)
