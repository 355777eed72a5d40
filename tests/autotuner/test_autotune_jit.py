"""@tilex.autotune over @tilex.jit functions, lazy and eager (tilex/autotuner/decorator.py): `.compile(...)`, TileLang's
rule that a call giving any tuned parameter is compiled as given, tuning per shape key for eager functions,
`do_not_specialize`, a configuration's own `pass_configs`, `manual_check_prog` and `max_mismatched_ratio`.

On CPU the compile phase is real (nvcc, sm_90a) and the benchmark phase is replaced by a stand-in that picks the
last compiled configuration (what tools/tilelang_examples.py does with the first); the checks run through the
benchmark phase's logic with fake kernels, as in test_autotuner.py. The GPU tests at the end tune for real."""
import contextlib

import pytest
import torch
import tvm

import tilex
import tilex.autotuner as at
import tilex.language as T
import tune_kernels
from tilex import config as tconfig
from tilex.autotuner import configs as cfg_mod
from tilex.autotuner import inputs
from tilex.autotuner import tuner as tuner_mod
from tilex.jit import JITKernel, ParamSpec
from tilex.jit.eager import EagerFactory

NO_GPU = not torch.cuda.is_available()
BLOCKS = [dict(block=256), dict(block=512)]


# ------------------------------------------------------------------------------------------------
# programs
# ------------------------------------------------------------------------------------------------
@tilex.jit
def eager_scale(A, block, threads=128):
    """B = A * 2, eager: N from A's shape; `block` has no default (a tuned parameter the configurations give)."""
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    B = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                B[bx * block + i] = A[bx * block + i] * 2.0
    return B


#: compiled in worker processes: they import this module and find the eager program under this name
eager_scale_in_processes = tilex.autotune(configs=BLOCKS, progress=False, cache=False, max_workers=2)(eager_scale)


def scale_with_pass_configs(N, block=256, pass_configs=None):
    """A factory with a parameter named pass_configs: a configuration's "pass_configs" reaches it too."""
    assert pass_configs is None or isinstance(pass_configs, dict)
    return tune_kernels.scale(N, block)


def scale_all_required(N, block, threads):
    return tune_kernels.scale(N, block, threads)


# ------------------------------------------------------------------------------------------------
# the benchmark phase's stand-in
# ------------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _fresh_autotune_cache():
    at.clear_cache()
    yield
    at.clear_cache()


@pytest.fixture
def last_compiled(monkeypatch):
    """AutoTuner.benchmark picks the last configuration that compiled (it does not label the kernel: the tuner
    does); returns the list of benchmarked configuration lists."""
    calls = []

    def benchmark(self, report):
        calls.append([r.config for r in report.results])
        ok = [r for r in report.results if r.status == at.COMPILED]
        assert ok, report.table()
        best = ok[-1]
        best.status, best.latency = at.OK, 1.0
        return at.TuneResult(best, report.results)

    monkeypatch.setattr(tuner_mod.AutoTuner, "benchmark", benchmark)
    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: True)
    return calls


@pytest.fixture
def no_benchmark(monkeypatch):
    monkeypatch.setattr(tuner_mod.AutoTuner, "benchmark", lambda *a: pytest.fail("tuned"))
    monkeypatch.setattr(tuner_mod.AutoTuner, "_compile_job", lambda *a: pytest.fail("tuned"))


@pytest.fixture
def kernel_calls(monkeypatch):
    """A kernel call returns ("ran", kernel, args) instead of launching (there is no GPU)."""
    monkeypatch.setattr(JITKernel, "__call__", lambda self, *args: ("ran", self, args))


def _tuned(fn, configs=BLOCKS, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("cache", False)
    kw.setdefault("parallel", "thread")
    return tilex.autotune(configs=configs, **kw)(fn)


# ------------------------------------------------------------------------------------------------
# lazy @tilex.jit factories
# ------------------------------------------------------------------------------------------------
def test_compile_tunes_and_returns_the_best_kernel(last_compiled):
    f = _tuned(tune_kernels.scale_jit)
    k = f.compile(4096)
    assert isinstance(k, JITKernel) and k.config == dict(block=512) and k.latency == 1.0 and k.out_idx == [1]
    assert len(last_compiled) == 1 and last_compiled[0] == BLOCKS
    # one tuning key: the arguments by name, defaults applied; calling is the same as compile
    assert f(4096) is k and f.compile(N=4096) is k and f(4096, __return_kernel=True) is k
    assert len(last_compiled) == 1 and len(f._tuner_cache) == 1 and f.last_result.kernel is k
    assert f.tune_results(4096).config == dict(block=512)
    tir = f.get_tir(4096)
    assert isinstance(tir, tvm.tirx.PrimFunc) and "512" in tir.script()
    assert f.get_kernel_source(N=4096) == k.get_kernel_source()
    f.compile(8192)  # another size: tuned again
    assert len(last_compiled) == 2 and len(f._tuner_cache) == 2


def test_any_tuned_parameter_given_compiles_as_given(no_benchmark):
    """TileLang's rule: one tuned parameter given is enough to skip tuning; the others take their defaults."""
    f = _tuned(tune_kernels.scale_jit, [dict(block=256, threads=128), dict(block=512, threads=256)])
    k = f(4096, block=128)
    assert k.config == dict(block=128, threads=128) and k.latency is None
    assert f(4096, 128) is k and f.compile(N=4096, block=128, threads=128) is k
    assert f.get_tir(4096, threads=64).script().count("64") >= 1
    g = _tuned(scale_all_required, [dict(block=256, threads=128)])
    with pytest.raises(TypeError, match=r"tuned parameter\(s\) \['block'\] were given.*'threads'"):
        g(4096, block=128)


def test_unknown_configuration_keys_and_arguments():
    with pytest.raises(TypeError, match=r"\['blk'\] are not parameters"):
        _tuned(tune_kernels.scale_jit, [dict(blk=64)]).compile(4096)
    with pytest.raises(TypeError, match="do_not_specialize names \\['M'\\]"):
        _tuned(tune_kernels.scale_jit, do_not_specialize=["M"])
    with pytest.raises(TypeError, match="do_not_specialize takes parameter names"):
        _tuned(tune_kernels.scale_jit, do_not_specialize=[1])


def test_do_not_specialize_reuses_the_configuration(last_compiled):
    f = _tuned(tune_kernels.scale_jit, do_not_specialize="N")
    k1 = f(4096)
    k2 = f(8192)
    assert len(last_compiled) == 1 and len(f._tuner_cache) == 1
    # the best configuration, compiled for this call's own N (not the kernel tuned for 4096)
    assert k2 is not k1 and k2.config == k1.config == dict(block=512) and k2.latency is None
    assert k1.params[0].shape == (4096,) and k2.params[0].shape == (8192,)
    assert f(8192) is k2 and f(4096) is k1
    f(4096, threads=256)  # not in do_not_specialize: a new tuning key
    assert len(last_compiled) == 2


# ------------------------------------------------------------------------------------------------
# eager @tilex.jit functions
# ------------------------------------------------------------------------------------------------
def test_eager_function_is_tuned_per_shape(last_compiled, kernel_calls):
    f = _tuned(eager_scale)
    assert isinstance(f.tuner.factory, EagerFactory) and f.__name__ == "eager_scale"
    a = torch.ones(4096)
    tag, kernel, args = f(a)  # tuned for N = 4096, then run on the call's tensor
    assert tag == "ran" and args == (a,) and kernel.config == dict(block=512) and kernel.out_idx == [1]
    assert len(last_compiled) == 1 and last_compiled[0] == BLOCKS
    assert f(torch.zeros(4096))[1] is kernel and f.compile(N=4096) is kernel and f.compile(a) is kernel
    assert f(a, __return_kernel=True) is kernel and len(last_compiled) == 1
    f(torch.ones(1024))  # another shape: tuned again
    assert len(last_compiled) == 2 and len(f._tuner_cache) == 2
    f(a, threads=256)  # another compile-time argument: tuned again
    assert len(last_compiled) == 3
    assert "512" in f.get_tir(N=4096).script()
    with pytest.raises(TypeError, match="missing tensor argument"):
        f(N=4096)
    with pytest.raises(TypeError, match="unexpected keyword argument.*M"):
        f.compile(M=4096)
    with pytest.raises(ValueError, match="T.const 'N'.*no value"):
        f.compile()


def test_eager_tuned_parameter_given_compiles_as_given(no_benchmark, kernel_calls):
    f = _tuned(eager_scale)
    a = torch.ones(4096)
    _, kernel, _ = f(a, block=128)
    assert kernel.config == dict(block=128) and kernel.latency is None
    assert f.compile(N=4096, block=128) is kernel and f(a, 128)[1] is kernel
    with pytest.raises(ValueError, match="out_idx"):
        tilex.autotune(configs=BLOCKS, out_idx=[1])(eager_scale)


def test_eager_do_not_specialize(last_compiled, kernel_calls):
    f = _tuned(eager_scale, do_not_specialize=["N"])
    k1 = f(torch.ones(4096))[1]
    k2 = f(torch.ones(2048))[1]
    assert len(last_compiled) == 1 and k2.config == k1.config and k2 is not k1
    assert k2.params[0].shape == (2048,)
    with pytest.raises(TypeError, match=r"do_not_specialize names \['Q'\]"):
        _tuned(eager_scale, do_not_specialize=["Q"]).compile(N=64)


def test_eager_function_compiles_in_worker_processes():
    rep = eager_scale_in_processes.tuner.compile(N=4096)
    assert rep.mode == "process", rep.mode_reason
    assert [r.status for r in rep.results] == [at.COMPILED] * 2, rep.table()
    assert rep.results[1].kernel.out_idx == [1] and "__global__" in rep.results[1].kernel.get_kernel_source()


# ------------------------------------------------------------------------------------------------
# a configuration's own pass_configs
# ------------------------------------------------------------------------------------------------
def test_per_configuration_pass_configs():
    configs = [dict(block=256, pass_configs={tilex.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}),
               dict(block=256),
               dict(block=512, pass_configs={"tilex.disable_tma": True})]
    t = at.AutoTuner(tune_kernels.scale, configs, out_idx=[1], target="sm_90a", parallel="thread", progress=False,
                     pass_configs={"tilex.disable_warp_specialized": False, "tilex.num_sms": 132})
    job = t._bind((1024,), {})
    assert job.configs == configs and all("pass_configs" not in c for c in job.call_cfgs)
    # the configuration's value wins over the tuner's spelling of the same option
    assert job.pass_configs_of(0) == {"tilex.num_sms": 132, "tl.disable_warp_specialized": True}
    assert job.pass_configs_of(1) == {"tilex.disable_warp_specialized": False, "tilex.num_sms": 132}
    assert job.pass_configs_of(2) == {"tilex.disable_warp_specialized": False, "tilex.num_sms": 132,
                                      "tilex.disable_tma": True}
    rep = t.compile(1024)
    assert [r.status for r in rep.results] == [at.COMPILED] * 3, rep.table()
    for i, r in enumerate(rep.results):
        assert tconfig.plain(r.kernel.pass_configs) == job.pass_configs_of(i)
    # part of the cache key
    assert t.cache_key(1024) != at.AutoTuner(tune_kernels.scale, [dict(block=256)] * 3, out_idx=[1],
                                             target="sm_90a").cache_key(1024)
    with pytest.raises(TypeError, match="'pass_configs' must be a dict"):
        at.AutoTuner(tune_kernels.scale, [dict(block=256, pass_configs=True)])._bind((1024,), {})
    # a factory with a parameter of that name gets it as well
    t = at.AutoTuner(scale_with_pass_configs, [dict(block=256, pass_configs={"tilex.num_sms": 100})])
    job = t._bind((1024,), {})
    assert job.call_cfgs == [dict(block=256, pass_configs={"tilex.num_sms": 100})]
    assert job.pass_configs_of(0) == {"tilex.num_sms": 100}
    assert cfg_mod.merge_pass_configs(None, None) is None and cfg_mod.merge_pass_configs({"a": 1}, {}) == {"a": 1}


def test_decorated_pass_configs_in_one_compilation(no_benchmark):
    """A configuration's pass_configs apply to the kernel compiled for a call that reuses it (do_not_specialize)
    and to compile_config."""
    t = at.AutoTuner(tune_kernels.scale_jit, [dict(block=256, pass_configs={"tilex.num_sms": 100})],
                     progress=False)
    k = t.compile_config((1024,), {}, dict(block=256, pass_configs={"tilex.num_sms": 100}))
    assert k.out_idx == [1] and tconfig.plain(k.pass_configs) == {"tilex.num_sms": 100}


# ------------------------------------------------------------------------------------------------
# checks: max_mismatched_ratio and manual_check_prog (the benchmark phase's logic with fake kernels)
# ------------------------------------------------------------------------------------------------
class _FakeKernel:
    def __init__(self, fn):
        self.params = [ParamSpec(0, "A", "buffer", "float32", torch.float32, (200,), None, False, None),
                       ParamSpec(1, "B", "buffer", "float32", torch.float32, (200,), None, True, None)]
        self.fn = fn

    def __call__(self, a):
        return self.fn(a)


def _one_off(a):
    out = a * 2
    out[7] += 1.0
    return out


def _benchmark(monkeypatch, kernels, **kw):
    import tilex.autotuner.bench as bench
    from tilex.autotuner import devices as devices_mod

    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: True)
    monkeypatch.setattr(tuner_mod, "_device_name", lambda: "fake GPU")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(bench, "do_bench", lambda fn, *a, **k: (fn(), 1.0)[1])
    monkeypatch.setattr(tuner_mod, "bench_devices", lambda devices=None: [0])
    monkeypatch.setattr(devices_mod, "_cuda_device", lambda dev: contextlib.nullcontext())
    t = at.AutoTuner(tune_kernels.scale, [dict(block=64 * (i + 1)) for i in range(len(kernels))], out_idx=[1],
                     target="sm_90a", progress=False, record=False, ref_prog=lambda a: a * 2,
                     supply=lambda params: [torch.arange(200.0)], **kw)
    job = t._bind((1024,), {})
    res = [tuner_mod.ConfigResult(i, c, at.COMPILED, kernel=_FakeKernel(k)) for i, (c, k) in
           enumerate(zip(job.configs, kernels))]
    return t.benchmark(tuner_mod.CompileReport(job, res, "thread", "test"))


def test_max_mismatched_ratio(monkeypatch):
    res = _benchmark(monkeypatch, [_one_off, lambda a: a * 3])
    assert [r.status for r in res.results] == [at.OK, at.WRONG]  # 1 of 200 elements off: within 1 %
    assert "199/200 elements mismatched (at most 2 may)" in res.results[1].reason
    with pytest.raises(at.AutotuneError, match="1/200 elements mismatched"):
        _benchmark(monkeypatch, [_one_off], max_mismatched_ratio=0.0)
    with pytest.raises(ValueError, match="max_mismatched_ratio"):
        at.AutoTuner(tune_kernels.scale, BLOCKS, max_mismatched_ratio=1.5)
    ref = torch.arange(200.0)
    bad = ref.clone()
    bad[:3] += 1
    assert inputs.compare_outputs(bad, ref, 1e-2, 1e-2, 0.01)[0].startswith("output 0: max abs error 1")
    assert inputs.compare_outputs(bad, ref, 1e-2, 1e-2, 0.015)[0] == ""


def test_manual_check_prog(monkeypatch):
    seen = []

    def exact(outs, refs):
        seen.append((len(outs), len(refs)))
        assert torch.equal(outs[0], refs[0]), "not bit-exact"

    res = _benchmark(monkeypatch, [_one_off, lambda a: a * 2], manual_check_prog=exact)
    assert [r.status for r in res.results] == [at.WRONG, at.OK] and seen == [(1, 1), (1, 1)]
    assert res.results[0].reason == "manual_check_prog: AssertionError: not bit-exact"
    two = torch.ones(2)
    assert inputs.manual_check(exact, (two, two), two).startswith("the kernel returned 2 output(s)")
    with pytest.raises(TypeError, match="manual_check_prog must be callable"):
        at.AutoTuner(tune_kernels.scale, BLOCKS, manual_check_prog="exact")
    f = tilex.autotune(configs=BLOCKS, manual_check_prog=exact, max_mismatched_ratio=0.05, ref_prog=abs)(
        tune_kernels.scale)
    assert f.tuner.manual_check_prog is exact and f.tuner.max_mismatched_ratio == 0.05
    with pytest.raises(NotImplementedError, match="timeout"):
        f.tuner.set_profile_args(timeout=30)
    f.tuner.set_profile_args(timeout=0)


# ------------------------------------------------------------------------------------------------
# on a GPU: tuning for real
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_eager_autotune_on_gpu():
    f = tilex.autotune(configs=BLOCKS, ref_prog=lambda A: A * 2, warmup=2, rep=5, progress=False)(eager_scale)
    a = torch.randn(10000, device="cuda")
    torch.testing.assert_close(f(a), a * 2)
    kernel = f.compile(N=10000)
    assert kernel.config in BLOCKS and kernel.latency > 0
    torch.testing.assert_close(kernel(a), a * 2)
    b = torch.randn(3000, device="cuda")
    torch.testing.assert_close(f(b), b * 2)
    assert len(f._tuner_cache) == 2


@pytest.mark.gpu
def test_do_not_specialize_and_checks_on_gpu():
    f = tilex.autotune(configs=BLOCKS, ref_prog=lambda A: A * 2, warmup=2, rep=5, progress=False,
                       do_not_specialize=["N"])(tune_kernels.scale_jit)
    for n in (4096, 8192):
        a = torch.randn(n, device="cuda")
        k = f(n)
        torch.testing.assert_close(k(a), a * tune_kernels.VARIANT)
    assert len(f._tuner_cache) == 1

    def never(outs, refs):
        raise AssertionError("rejected")

    g = tilex.autotune(configs=BLOCKS, ref_prog=lambda A: A * 2, manual_check_prog=never, warmup=2, rep=5,
                       progress=False, cache=False)(tune_kernels.scale_jit)
    with pytest.raises(at.AutotuneError, match="manual_check_prog: AssertionError: rejected"):
        g(4096)
