"""Autotuner tests that need no GPU: configurations, binding errors, the cache key and the cache, failing
configurations, the shared-memory estimate, and the compile phase (threads and worker processes, sm_90a)."""
import contextlib
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import tilex
import tilex.autotuner as at
import tune_kernels
from tilex.autotuner import cache as acache
from tilex.autotuner import devices as devices_mod
from tilex.autotuner import inputs, results
from tilex.autotuner import tuner as tuner_mod

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

GOOD = dict(bm=128, bn=128, bk=64, num_stages=3, threads=128)
SMALL = dict(bm=64, bn=64, bk=32, num_stages=2, threads=128)
BAD_THREADS = dict(bm=128, bn=128, bk=64, num_stages=3, threads=96)
HUGE = dict(bm=256, bn=256, bk=64, num_stages=4, threads=256)  # 4 * (256*64 + 64*256) * 2 = 262144 bytes


def _subprocess_env():
    """The environment for a Python subprocess that imports tune_kernels and tilex (and what this one imports)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, REPO, os.environ.get("PYTHONPATH", "")]))


def _run_script(path, text, tag):
    """Write `text` to the script `path`, run it in a Python subprocess, return (the words of its stdout lines that
    start with `tag`, after the tag; its output for a failure message)."""
    path.write_text(text)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                         env=_subprocess_env())
    found = [ln[len(tag):].strip() for ln in out.stdout.splitlines() if ln.startswith(tag)]
    return found, out.stdout + out.stderr[-3000:]


def _tuner(configs, **kw):
    kw.setdefault("progress", False)
    return at.AutoTuner.from_kernel(tune_kernels.matmul, configs, **kw).set_compile_args(out_idx=[2],
                                                                                         target="sm_90a")


@pytest.fixture(autouse=True)
def _fresh_autotune_cache():
    at.clear_cache()
    yield
    at.clear_cache()


# ------------------------------------------------------------------------------------------------
# API surface
# ------------------------------------------------------------------------------------------------
def test_exports():
    assert tilex.autotune is at.autotune and tilex.AutoTuner is at.AutoTuner
    for name in ("do_bench", "clear_cache", "shared_memory_bytes", "TuneResult", "ConfigResult", "AutotuneError"):
        assert hasattr(at, name)


# ------------------------------------------------------------------------------------------------
# configurations and binding
# ------------------------------------------------------------------------------------------------
def test_config_list_callable_and_product():
    t = _tuner([GOOD, SMALL])
    assert t._bind((256, 256, 256), {}).configs == [GOOD, SMALL]

    seen = []

    def from_args(M, N, K):
        seen.append((M, N, K))
        return [GOOD] if M >= 256 else [SMALL]

    t = _tuner(from_args)
    assert t._bind((256, 256, 256), {}).configs == [GOOD]
    assert t._bind((64, 64, 64), {}).configs == [SMALL]
    assert seen == [(256, 256, 256), (64, 64, 64)]

    t = _tuner(lambda: [SMALL, GOOD])  # a callable taking nothing
    assert t._bind((256, 256, 256), {}).configs == [SMALL, GOOD]

    t = _tuner({"bm": [64, 128], "bn": [64, 128], "threads": 128})  # dict of lists: the cartesian product
    cfgs = t._bind((256, 256, 256), {}).configs
    assert len(cfgs) == 4 and dict(bm=128, bn=64, threads=128) in cfgs


def test_explicit_parameters_override_configs():
    t = _tuner([GOOD, dict(GOOD, num_stages=4), SMALL])
    job = t._bind((256, 256, 256), {"num_stages": 2})
    # num_stages fixed to 2: the first two collapse into one; the factory gets num_stages from kwargs
    assert job.configs == [dict(GOOD, num_stages=2), dict(SMALL, num_stages=2)]
    assert all("num_stages" not in c for c in job.call_cfgs)
    # positional values count as explicit too
    job = t._bind((256, 256, 256, 64), {})
    assert [c["bm"] for c in job.configs] == [64, 64, 64]
    assert all("bm" not in c for c in job.call_cfgs)


def test_config_errors():
    with pytest.raises(ValueError, match="empty"):
        _tuner([])._bind((256, 256, 256), {})
    with pytest.raises(ValueError, match="empty"):
        _tuner(lambda M, N, K: [])._bind((256, 256, 256), {})
    with pytest.raises(ValueError, match="configs is required"):
        at.AutoTuner(tune_kernels.matmul, None)
    with pytest.raises(TypeError, match="must be a dict"):
        _tuner([GOOD, (128, 128)])._bind((256, 256, 256), {})
    with pytest.raises(TypeError, match=r"\['blockM'\] are not parameters of matmul"):
        _tuner([dict(blockM=64)])._bind((256, 256, 256), {})


def test_missing_factory_arguments():
    with pytest.raises(TypeError, match="missing a required argument: 'K'.*problem arguments"):
        _tuner([GOOD])._bind((256, 256), {})
    with pytest.raises(TypeError, match="bad arguments for matmul"):
        _tuner([GOOD])._bind((256, 256, 256), {"nonsense": 1})
    # through the decorator, before any compilation
    tuned = at.autotune(configs=[GOOD], out_idx=[2], target="sm_90a", progress=False)(tune_kernels.matmul)
    with pytest.raises(TypeError, match="'K'"):
        tuned(256, 256)


# ------------------------------------------------------------------------------------------------
# the cache key
# ------------------------------------------------------------------------------------------------
def test_cache_key_stable_and_sensitive(monkeypatch):
    args = (512, 512, 512)
    k0 = _tuner([GOOD, SMALL]).cache_key(*args)
    assert len(k0) == 64
    assert _tuner([GOOD, SMALL]).cache_key(*args) == k0  # another tuner instance
    assert _tuner([dict(GOOD), dict(SMALL)]).cache_key(*args) == k0  # equal, not identical, configs
    # dict order inside a configuration does not matter, list order does
    assert _tuner([dict(reversed(list(GOOD.items()))), SMALL]).cache_key(*args) == k0
    assert _tuner([SMALL, GOOD]).cache_key(*args) != k0
    assert _tuner([GOOD]).cache_key(*args) != k0
    assert _tuner([GOOD, SMALL]).cache_key(512, 512, 1024) != k0
    assert _tuner([GOOD, SMALL]).cache_key(512, 512, K=512) != k0  # how arguments are passed is part of it
    assert _tuner([GOOD, SMALL]).set_compile_args(out_idx=[-1], target="sm_90a").cache_key(*args) != k0
    assert _tuner([GOOD, SMALL]).set_compile_args(out_idx=[2], target="sm_80").cache_key(*args) != k0
    t = _tuner([GOOD, SMALL]).set_compile_args(out_idx=[2], target="sm_90a",
                                               pass_configs={"tilex.disable_wgmma": True})
    assert t.cache_key(*args) != k0
    monkeypatch.setattr(tilex, "__version__", "99.0")
    assert _tuner([GOOD, SMALL]).cache_key(*args) != k0


def test_cache_key_follows_the_program(monkeypatch):
    t = at.AutoTuner(tune_kernels.scale, [dict(block=256), dict(block=512)], out_idx=[1], target="sm_90a",
                     progress=False)
    k0 = t.cache_key(4096)
    monkeypatch.setattr(tune_kernels, "VARIANT", 3.0)  # same source code, different program text
    assert t.cache_key(4096) != k0
    monkeypatch.setattr(tune_kernels, "VARIANT", 2.0)
    assert t.cache_key(4096) == k0


def test_cache_key_same_in_another_process():
    k0 = _tuner([GOOD, SMALL]).cache_key(512, 512, 512)
    code = ("import tilex.autotuner as at, tune_kernels\n"
            "t = at.AutoTuner(tune_kernels.matmul, [%r, %r], out_idx=[2], target='sm_90a')\n"
            "print(t.cache_key(512, 512, 512))\n") % (GOOD, SMALL)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=_subprocess_env())
    assert out.stdout.strip().splitlines()[-1] == k0


def test_stable_repr():
    assert acache.stable_repr((1, 2)) != acache.stable_repr([1, 2])
    assert acache.stable_repr({"b": 1, "a": 2}) == acache.stable_repr({"a": 2, "b": 1})
    assert acache.stable_repr(torch.float16) == {"torch": "torch.float16"}
    assert acache.stable_repr(tune_kernels.matmul) == {"callable": "tilex.kernels.gemm.matmul"}
    with pytest.raises(acache.UnstableKeyError):
        acache.stable_repr(object())
    # an argument without a stable representation disables caching instead of failing
    t = at.AutoTuner(lambda N, block=256, tag=None: tune_kernels.scale(N, block), [dict(block=256)],
                     out_idx=[1], target="sm_90a")
    assert t.cache_key(1024, tag="x") is not None
    assert t.cache_key(1024, tag=object()) is None


def test_cache_hit_compiles_only_the_best(tmp_path, monkeypatch):
    """A stored result is used without benchmarking (works without a GPU): only the best config is built."""
    configs = [GOOD, SMALL, BAD_THREADS]
    t = _tuner(configs)
    key = t.cache_key(256, 256, 256)
    assert acache.load(key) is None
    results = [tuner_mod.ConfigResult(0, GOOD, at.OK, latency=0.5),
               tuner_mod.ConfigResult(1, SMALL, at.OK, latency=0.25),
               tuner_mod.ConfigResult(2, BAD_THREADS, at.BUILD_ERROR, reason="TileOpError: ...")]
    path = acache.save(key, {"best_index": 1, "latency": 0.25, "results": [r.to_json() for r in results]})
    assert path.startswith(acache.autotune_cache_dir()) and path.endswith(f"{key}.json")
    assert acache.autotune_cache_dir() == os.path.join(os.environ["TILEX_CACHE_DIR"], "autotune")

    built = []
    real = tuner_mod._Job.build_func
    monkeypatch.setattr(tuner_mod._Job, "build_func", lambda self, i: built.append(i) or real(self, i))
    monkeypatch.setattr(tuner_mod.AutoTuner, "benchmark", lambda *a: pytest.fail("benchmarked on a cache hit"))
    res = t.run(256, 256, 256)
    assert res.from_cache and res.config is configs[1] and res.latency == 0.25
    assert res.kernel.config == SMALL and isinstance(res.kernel, tilex.JITKernel)
    assert [r.status for r in res.results] == [at.OK, at.OK, at.BUILD_ERROR]
    assert built.count(1) == 1 and 2 not in built  # the key hashes config 0's program; only #1 is compiled
    assert "*" in res.table().splitlines()[2]  # the best row is marked

    # the decorator uses the same cache
    tuned = at.autotune(configs=configs, out_idx=[2], target="sm_90a", progress=False)(tune_kernels.matmul)
    k = tuned(256, 256, 256)
    assert k.config == SMALL and tuned.tune_results(256, 256, 256).from_cache

    # a corrupt entry is ignored; clear_cache removes entries
    with open(path, "w") as f:
        f.write("{not json")
    assert acache.load(key) is None
    at.clear_cache()
    assert not os.path.exists(path)
    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: False)  # a miss tunes, which needs a GPU
    with pytest.raises(at.AutotuneError, match="needs a CUDA GPU"):
        t.run(256, 256, 256)


def test_cache_entry_for_another_list_is_not_used(monkeypatch):
    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: False)  # a miss tunes, which needs a GPU
    t = _tuner([GOOD, SMALL])
    acache.save(t.cache_key(256, 256, 256), {"best_index": 1, "results": []})
    assert _tuner([SMALL, GOOD]).cache_key(256, 256, 256) != t.cache_key(256, 256, 256)
    with pytest.raises(at.AutotuneError, match="needs a CUDA GPU"):
        _tuner([SMALL, GOOD]).run(256, 256, 256)


# ------------------------------------------------------------------------------------------------
# shared memory
# ------------------------------------------------------------------------------------------------
def test_shared_memory_estimate_gemm():
    from tilex.autotuner.smem import shared_memory_usage

    f = tune_kernels.matmul(1024, 1024, 1024, 128, 128, 64, 3, 128, dtype="float16")
    stages = 3 * (128 * 64 + 64 * 128) * 2
    assert stages == 98304
    # wgmma / mma.sync paths: the same multi-buffered tiles; on sm_90a the epilogue goes through a 128 x 64 tile
    # (the widest that keeps two blocks per multiprocessor)
    for arch, expect in (("sm_90a", stages + 128 * 64 * 2), ("sm_80", stages)):
        usage = shared_memory_usage(f, arch)
        assert usage["dynamic"] == expect, (arch, usage)
        assert usage["static"] < 1024  # mbarriers of a TMA pipeline, if any
        assert at.shared_memory_bytes(f, arch) == expect + usage["static"]
        assert shared_memory_usage(f, arch, merged=False) == usage
    assert shared_memory_usage(f, "sm_80")["static"] == 0
    f2 = tune_kernels.matmul(1024, 1024, 1024, 64, 64, 32, 2, 128, dtype="float16")
    # (two iterations of its 32-wide K loop per stage: CoarsenBlocks makes 64-element rows of 128 bytes)
    assert shared_memory_usage(f2, "sm_90a")["dynamic"] == 2 * (64 * 64 + 64 * 64) * 2 + 64 * 64 * 2
    f3 = tune_kernels.matmul(1024, 1024, 1024, 128, 64, 32, 4, 128, dtype="bfloat16")
    assert at.shared_memory_bytes(f3, "sm_80") == 4 * (128 * 32 + 32 * 64) * 2


def test_shared_memory_limits():
    from tilex.autotuner import smem

    assert smem.arch_shared_memory_limit("sm_90a") == 227 * 1024
    assert smem.arch_shared_memory_limit("sm_80") == 163 * 1024
    assert smem.arch_shared_memory_limit("sm_89") == 99 * 1024
    assert smem.arch_shared_memory_limit("sm_37") is None
    if not torch.cuda.is_available():
        assert at.device_shared_memory_limit() is None


# ------------------------------------------------------------------------------------------------
# compile phase
# ------------------------------------------------------------------------------------------------
def test_compile_threads_records_reasons(monkeypatch):
    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: False)  # the limit of the target arch, not the GPU's
    t = _tuner([GOOD, BAD_THREADS, HUGE, SMALL], parallel="thread", max_workers=2)
    rep = t.compile(1024, 1024, 1024)
    assert rep.mode == "thread"
    by = {r.index: r for r in rep.results}
    # 3 stages of A and B, and the epilogue's 128 x 64 staging tile
    assert by[0].status == at.COMPILED and 114688 <= by[0].smem < 114688 + 1024 and by[0].kernel is not None
    assert by[3].status == at.COMPILED and by[3].kernel is not None and 40960 <= by[3].smem < 40960 + 1024
    assert by[1].status == at.BUILD_ERROR and by[1].kernel is None
    assert by[1].reason.startswith("TileOpError:") and "3 warps" in by[1].reason and "TileOpError" in by[1].error
    assert by[2].status == at.SMEM and 262144 <= by[2].smem < 262144 + 1024
    assert f"needs {by[2].smem} bytes" in by[2].reason and "232448" in by[2].reason and "sm_90a" in by[2].reason
    assert [r.index for r in rep.compiled] == [0, 3]
    table = rep.table()
    assert "3 warps" in table and "shared memory" in table and "256." in table
    # an explicit limit
    rep = _tuner([SMALL, GOOD], parallel="thread", max_shared_memory=64 * 1024).compile(1024, 1024, 1024)
    assert [r.status for r in rep.results] == [at.COMPILED, at.SMEM]
    assert "max_shared_memory" in rep.results[1].reason


def test_factory_errors_are_recorded():
    def factory(N, block=256):
        if block == 3:
            raise ValueError("block must be a power of two")
        if block == 5:
            return "not a prim_func"
        return tune_kernels.scale(N, block)

    t = at.AutoTuner(factory, [dict(block=256), dict(block=3), dict(block=5)], out_idx=[1], target="sm_90a",
                     progress=False)
    rep = t.compile(1024)
    assert rep.mode == "thread" and "local function" in rep.mode_reason  # a closure cannot go to a worker
    assert [r.status for r in rep.results] == [at.COMPILED, at.BUILD_ERROR, at.BUILD_ERROR]
    assert rep.results[1].reason == "ValueError: block must be a power of two"
    assert "not a T.prim_func" in rep.results[2].reason


def test_nvcc_error_reason():
    from tilex.jit import TilexCompileError

    err = TilexCompileError("tilex: nvcc failed", ["nvcc"], "/tmp/x/kernel_1.cu(12): error: identifier \"foo\" is "
                            "undefined\n1 error detected", "/tmp/x/kernel_1.cu")
    assert results.reason_of(err) == 'nvcc: error: identifier "foo" is undefined'
    # ptxas's failures say "fatal", after nvcc's warnings about unused helpers
    err = TilexCompileError("tilex: nvcc failed", ["nvcc"], "k.cu(53): warning #177-D: function \"hpow\" was "
                            "declared but never referenced\nptxas fatal   : (C7602) Insufficient registers (128) to "
                            "compile instruction\nptxas fatal   : Ptx assembly aborted due to errors", "k.cu")
    assert results.reason_of(err) == "nvcc: ptxas fatal   : (C7602) Insufficient registers (128) to compile instruction"


def test_all_failing_configs_raise_with_table(monkeypatch):
    t = _tuner([BAD_THREADS, HUGE], parallel="thread")
    rep = t.compile(1024, 1024, 1024)
    assert not rep.compiled
    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: True)  # get past the GPU check
    with pytest.raises(at.AutotuneError) as ei:
        t.run(1024, 1024, 1024)
    msg = str(ei.value)
    assert "no configuration compiled" in msg and "3 warps" in msg and "needs 262" in msg
    assert len(ei.value.results) == 2


def test_compare():
    ref = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert inputs.compare_outputs(ref.half(), ref, 1e-2, 1e-2) == ("", 0.0)
    bad = ref.clone()
    bad[1, 2] += 0.5
    reason, err = inputs.compare_outputs(bad, ref, 1e-2, 1e-2)
    assert "max abs error 0.5" in reason and "1/12 elements" in reason and err == pytest.approx(0.5)
    assert "2 output(s)" in inputs.compare_outputs((ref, ref), ref, 1e-2, 1e-2)[0]
    assert "shape" in inputs.compare_outputs(ref.T, ref, 1e-2, 1e-2)[0]


def test_jit_decorator_and_explicit_config():
    jitted = at.jit(out_idx=[2], target="sm_90a")(tune_kernels.matmul)
    k = jitted(256, 256, 256, 64, 64, 32, 2, 128)
    assert isinstance(k, tilex.JITKernel) and k.out_idx == [2]
    tuned = at.autotune(configs=[GOOD, SMALL], progress=False)(jitted)
    assert tuned.tuner.out_idx == [2] and tuned.tuner.target == "sm_90a"
    assert tuned.tuner.factory is tune_kernels.matmul and tuned.__name__ == "matmul"
    # every tuned parameter given: compiled as asked, nothing tuned (so no GPU needed)
    k = tuned(256, 256, 256, bm=64, bn=64, bk=32, num_stages=2, threads=128)
    assert k.config == SMALL and k.latency is None


def test_jitted_factory_in_worker_processes():
    """@tilex.autotune over a module-level @tilex.jit factory: the workers import the module attribute (the
    JitFactory), unwrap it, and compile with the jit's compile arguments."""
    tuned = at.autotune(configs=[dict(block=256), dict(block=512)], max_workers=2, progress=False)(
        tune_kernels.scale_jit)
    assert tuned.tuner.factory is tune_kernels.scale_jit.__wrapped__ and tuned.tuner.out_idx == [1]
    rep = tuned.tuner.compile(4096)
    assert rep.mode == "process", rep.mode_reason
    assert [r.status for r in rep.results] == [at.COMPILED, at.COMPILED], rep.table()
    assert rep.results[1].kernel.out_idx == [1] and "__global__" in rep.results[1].kernel.get_kernel_source()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_run_without_gpu_fails_early():
    with pytest.raises(at.AutotuneError, match="compile phase alone"):
        _tuner([GOOD]).run(256, 256, 256)
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        at.do_bench(lambda: None)


def test_compile_in_worker_processes():
    """The process-pool path for the compile phase (sm_90a): failures come back with reasons, a configuration
    that hangs times out, and the parent re-creates the compiled kernels. (Without a GPU nothing runs nvcc, so
    compilation is quick and the timeout can be short; on a GPU machine the hanging configuration is left out.)"""
    fast = not torch.cuda.is_available()
    configs = [dict(GOOD), dict(BAD_THREADS), dict(HUGE), dict(SMALL)] + ([dict(SMALL, delay=600.0)] if fast else [])
    t = at.AutoTuner(tune_kernels.gemm, configs, out_idx=[2], target="sm_90a", timeout=10 if fast else None,
                     max_workers=3, progress=False)
    rep = t.compile(1024, 1024, 1024)
    assert rep.mode == "process", rep.mode_reason
    st = [r.status for r in rep.results]
    assert st == [at.COMPILED, at.BUILD_ERROR, at.SMEM, at.COMPILED] + ([at.TIMEOUT] if fast else []), rep.table()
    assert "3 warps" in rep.results[1].reason
    assert 262144 <= rep.results[2].smem < 262144 + 1024
    if fast:
        assert "within 10 s" in rep.results[4].reason
    k = rep.results[0].kernel
    assert isinstance(k, tilex.JITKernel) and "wgmma" in k.get_kernel_source()
    assert 114688 <= rep.results[0].smem < 114688 + 1024 and rep.results[0].compile_time > 0
    if torch.cuda.is_available():  # the workers ran nvcc and filled the kernel cache; the parent loaded from it
        assert rep.results[0].from_kernel_cache and rep.results[3].from_kernel_cache


def test_worker_pool_is_kept_between_compile_phases(monkeypatch):
    """Tuning several problems in one process starts the worker processes once: a later compile phase reuses the
    pool and its processes, unless the environment a spawned worker took from this process changed."""
    from tilex.autotuner import workers

    workers.release_pool()
    t = at.AutoTuner(tune_kernels.gemm, [dict(SMALL), dict(GOOD)], out_idx=[2], target="sm_90a", max_workers=2,
                     progress=False)
    assert [r.status for r in t.compile(256, 256, 256).results] == [at.COMPILED] * 2
    first = workers._kept["ex"]
    pids = set(first._processes)
    assert len(pids) == 2
    assert [r.status for r in t.compile(512, 256, 256).results] == [at.COMPILED] * 2
    assert workers._kept["ex"] is first and set(first._processes) == pids
    monkeypatch.setenv("TILEX_TEST_POOL_KEY", "1")  # what a worker inherited at start no longer holds
    assert [r.status for r in t.compile(768, 256, 256).results] == [at.COMPILED] * 2
    assert workers._kept["ex"] is not first and not pids & set(workers._kept["ex"]._processes)
    monkeypatch.setattr(workers, "KEEP_IDLE_SECONDS", 0.5)  # an idle pool goes away on its own
    t.compile(1024, 256, 256)
    time.sleep(2)
    assert "ex" not in workers._kept


def test_worker_crash_is_pinned_on_its_config():
    configs = [dict(SMALL), dict(SMALL, crash=True), dict(GOOD)]
    t = at.AutoTuner(tune_kernels.gemm, configs, out_idx=[2], target="sm_90a", max_workers=1, progress=False)
    rep = t.compile(512, 512, 512)
    assert rep.mode == "process"
    assert [r.status for r in rep.results] == [at.COMPILED, at.BUILD_ERROR, at.COMPILED], rep.table()
    assert "worker process died" in rep.results[1].reason


def test_unguarded_script_falls_back_to_threads(tmp_path):
    """A script that tunes at import time without `if __name__ == "__main__":` makes every spawned worker
    re-run it; the tuner notices that the workers cannot start and compiles in threads."""
    lines, output = _run_script(
        tmp_path / "unguarded.py",
        "import warnings\n"
        "import tilex.autotuner as at, tune_kernels\n"
        f"t = at.AutoTuner(tune_kernels.matmul, [{SMALL!r}], out_idx=[2], target='sm_90a', progress=False)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    rep = t.compile(256, 256, 256)\n"
        "print('RESULT', rep.mode, [r.status for r in rep.results], any('__main__' in str(x.message) for x in w))\n",
        "RESULT")
    assert lines == ["thread ['compiled'] True"], output


def test_factory_of_a_guarded_script_compiles_in_processes(tmp_path):
    """A factory defined in the script being run (``__main__``, TileLang's usual autotune example) is compiled in
    worker processes: each runs the script again as its own ``__main__`` (not its guarded block) and finds the
    factory there by name."""
    lines, output = _run_script(
        tmp_path / "guarded.py",
        "import os\n"
        "import tilex.autotuner as at, tune_kernels\n"
        "def matmul(M, N, K, **cfg):\n"
        "    return tune_kernels.gemm(M, N, K, **cfg)\n"
        "if __name__ == '__main__':\n"
        f"    t = at.AutoTuner(matmul, [{SMALL!r}, {GOOD!r}], out_idx=[2], target='sm_90a', max_workers=2,\n"
        "                     progress=False)\n"
        "    rep = t.compile(256, 256, 256)\n"
        "    print('RESULT', rep.mode, [r.status for r in rep.results])\n",
        "RESULT")
    assert lines == ["process ['compiled', 'compiled']"], output


def test_kept_workers_end_with_their_parent(tmp_path):
    """A process that leaves through os._exit (or is killed) with its worker pool still kept does not leave the
    workers behind waiting for work."""
    lines, output = _run_script(
        tmp_path / "leaves.py",
        "import os\n"
        "import tilex.autotuner as at, tune_kernels\n"
        "from tilex.autotuner import workers\n"
        "if __name__ == '__main__':\n"
        f"    t = at.AutoTuner(tune_kernels.gemm, [{SMALL!r}], out_idx=[2], target='sm_90a', max_workers=1,\n"
        "                     progress=False)\n"
        "    t.compile(256, 256, 256)\n"
        "    print('PIDS', *workers._kept['ex']._processes, flush=True)\n"
        "    os._exit(0)\n",
        "PIDS")
    pids = [int(p) for ln in lines for p in ln.split()]
    assert pids, output
    deadline = time.time() + 20
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.5)
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")], "orphaned compile workers are still running"


def test_tilelang_cpu_count_variables_size_the_pool(monkeypatch):
    from tilex import env

    monkeypatch.delenv("TILELANG_AUTO_TUNING_CPU_COUNTS", raising=False)
    monkeypatch.delenv("TILELANG_AUTO_TUNING_MAX_CPU_COUNT", raising=False)
    assert env.autotune_workers(1000) == (os.cpu_count() or 1)
    assert env.autotune_workers(1) == 1
    monkeypatch.setenv("TILELANG_AUTO_TUNING_CPU_COUNTS", "3")
    assert env.autotune_workers(1000) == 3
    monkeypatch.setenv("TILELANG_AUTO_TUNING_MAX_CPU_COUNT", "2")
    assert env.autotune_workers(1000) == 2
    monkeypatch.setenv("TILELANG_AUTO_TUNING_MAX_CPU_COUNT", "two")
    with pytest.raises(ValueError, match="TILELANG_AUTO_TUNING_MAX_CPU_COUNT"):
        env.autotune_workers(1000)

# ------------------------------------------------------------------------------------------------
# the benchmark phase's logic, with stand-ins for the GPU (the real thing is in test_autotune_gpu.py)
# ------------------------------------------------------------------------------------------------
class _FakeKernel:
    """Acts like a JITKernel for benchmark(): ``params`` and a call computing on CPU tensors."""
    clock = {"latency": None}

    def __init__(self, latency, fn):
        from tilex.jit import ParamSpec

        self.params = [ParamSpec(0, "A", "buffer", "float32", torch.float32, (8,), None, False, None),
                       ParamSpec(1, "B", "buffer", "float32", torch.float32, (8,), None, True, None)]
        self.latency_ms, self.fn = latency, fn

    def __call__(self, a):
        _FakeKernel.clock["latency"] = self.latency_ms
        return self.fn(a)


def _fake_gpu(monkeypatch):
    import tilex.autotuner.bench as bench

    def fake_do_bench(fn, warmup=25, rep=100, **kw):
        fn()
        return _FakeKernel.clock["latency"]

    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: True)
    monkeypatch.setattr(tuner_mod, "_device_name", lambda: "fake GPU")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(bench, "do_bench", fake_do_bench)
    monkeypatch.setattr(tuner_mod, "bench_devices", lambda devices=None: [0])
    monkeypatch.setattr(devices_mod, "_cuda_device", lambda dev: contextlib.nullcontext())


def test_benchmark_phase_logic(monkeypatch):
    _fake_gpu(monkeypatch)
    supplied = []

    def supply(params):
        supplied.append([p.name for p in params])
        return [torch.arange(8, dtype=torch.float32)]

    def ref(a):
        _FakeKernel.clock["latency"] = 5.0
        return a * 2

    def boom(a):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    configs = [dict(block=128), dict(block=256), dict(block=512), dict(block=1024)]
    t = at.AutoTuner(tune_kernels.scale, configs, out_idx=[1], target="sm_90a", ref_prog=ref, supply=supply,
                     progress=False)
    kernels = [_FakeKernel(2.0, lambda a: a * 2), _FakeKernel(1.0, lambda a: a * 2),
               _FakeKernel(0.5, lambda a: a * 2 + 0.25), _FakeKernel(0.1, boom)]
    job = t._bind((1024,), {})

    def fake_compile(self, job):
        res = [tuner_mod.ConfigResult(i, c, at.COMPILED, kernel=k) for i, (c, k) in
               enumerate(zip(job.configs, kernels))]
        return tuner_mod.CompileReport(job, res, "thread", "test")

    monkeypatch.setattr(tuner_mod.AutoTuner, "_compile_job", fake_compile)
    res = t.benchmark(fake_compile(t, job))
    assert [r.status for r in res.results] == [at.OK, at.OK, at.WRONG, at.RUNTIME_ERROR]
    assert res.best.index == 1 and res.latency == 1.0 and res.ref_latency == 5.0 and res.kernel is kernels[1]
    assert kernels[1].config == dict(block=256) and kernels[1].latency == 1.0
    assert res.results[2].max_error == pytest.approx(0.25) and "max abs error 0.25" in res.results[2].reason
    assert res.results[3].reason == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert supplied == [["A"]]  # cache_input_tensors: one set of inputs for every configuration
    assert "*  1" in res.table()

    # run(): tunes, then stores the best; a second run loads it (compiling only config #1 for real)
    first = t.run(1024)
    assert not first.from_cache and first.config == dict(block=256) and os.path.isfile(first.cache_path)
    with open(first.cache_path) as f:
        entry = json.load(f)
    assert entry["best_index"] == 1 and entry["payload"]["device"] == "fake GPU"
    assert [r["status"] for r in entry["results"]] == [at.OK, at.OK, at.WRONG, at.RUNTIME_ERROR]
    second = t.run(1024)
    assert second.from_cache and second.config is configs[1] and second.latency == 1.0
    assert isinstance(second.kernel, tilex.JITKernel) and second.kernel.config == dict(block=256)

    # without input caching every configuration gets fresh inputs
    supplied.clear()
    t.set_profile_args(ref_prog=ref, supply=supply, cache_input_tensors=False)
    t.benchmark(fake_compile(t, job))
    assert len(supplied) == 4

    # nothing works: the error carries the table
    t.set_profile_args(ref_prog=lambda a: a * 3, supply=supply)
    with pytest.raises(at.AutotuneError, match="no configuration worked") as ei:
        t.benchmark(fake_compile(t, job))
    assert "wrong result" in str(ei.value) and "illegal memory access" in str(ei.value)
    # checking needs the kernel to return its outputs
    t.set_compile_args(out_idx=None, target="sm_90a")
    with pytest.raises(at.AutotuneError, match="needs out_idx"):
        t.benchmark(fake_compile(t, t._bind((1024,), {})))
