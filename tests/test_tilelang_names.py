"""TileLang's package-level names outside the kernel language, on the CPU: tilex.math / tilex.cdiv,
tilex.testing, tilex.profiler.do_bench, tilex.utils.tensor (supplies, torch_assert_close), tilex.utils.target,
tilex.contrib.nvcc, the cache / log switches, tilex.layout.make_swizzled_layout(buffer), the autotuner's
set_autotune_inputs / early_stop / supply_type / run options, and the refused carver and tools names."""
import contextlib
import logging
import random
import threading

import numpy as np
import pytest
import torch
import tvm
from tvm import tirx

import tilex
import tilex.autotuner as at
import tilex.language as T
import tilex.testing
from tilex.autotuner import tuner as tuner_mod
from tilex.contrib import nvcc
from tilex.ir.visit import substitute
from tilex.jit import ParamSpec
from tilex.jit import cache as kcache
from tilex.jit import profiler as profiler_mod
from tilex.testing import perf_regression
from tilex.utils import target as utarget
from tilex.utils.tensor import TensorSupplyType, get_tensor_supply, supply_tensor, torch_assert_close

NO_GPU = not torch.cuda.is_available()


def _param(shape, dtype="float32", torch_dtype=torch.float32, name="A", kind="buffer"):
    return ParamSpec(0, name, kind, dtype, torch_dtype, tuple(shape), None, False, None)


# ------------------------------------------------------------------------------------------------
# the package face
# ------------------------------------------------------------------------------------------------
def test_package_level_names():
    for name in ("cdiv", "next_power_of_2", "Profiler", "TensorSupplyType", "disable_cache", "enable_cache",
                 "is_cache_enabled", "set_log_level", "profiler", "math", "utils", "contrib", "tools"):
        assert hasattr(tilex, name), name
    assert tilex.profiler.Profiler is tilex.Profiler is profiler_mod.Profiler
    assert tilex.TensorSupplyType is tilex.utils.TensorSupplyType is tilex.jit.TensorSupplyType
    assert tilex.math.cdiv is tilex.cdiv and tilex.math.next_power_of_2 is tilex.next_power_of_2
    assert callable(tilex.utils.tensor.torch_assert_close) and callable(tilex.profiler.do_bench)


def test_cache_switches_and_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEX_CACHE_DIR", str(tmp_path))
    assert tilex.env.TILELANG_CACHE_DIR == tilex.env.TILEX_CACHE_DIR == kcache.cache_dir() == str(tmp_path)
    with pytest.raises(AttributeError):
        tilex.env.TILELANG_NO_SUCH_SETTING  # noqa: B018
    try:
        tilex.disable_cache()
        assert not tilex.is_cache_enabled() and not kcache.enabled()
        tilex.enable_cache()
        assert tilex.is_cache_enabled()
    finally:
        kcache.reset()


def test_set_log_level():
    log = logging.getLogger("tilex")
    before = log.level
    try:
        tilex.set_log_level("warning")
        assert log.level == logging.WARNING and logging.getLogger("tilex.autotuner").getEffectiveLevel() >= 30
        tilex.set_log_level(logging.DEBUG)
        assert log.level == logging.DEBUG
        with pytest.raises(ValueError, match="unknown level"):
            tilex.set_log_level("LOUD")
        with pytest.raises(TypeError):
            tilex.set_log_level(1.5)
    finally:
        log.setLevel(before)


# ------------------------------------------------------------------------------------------------
# tilex.math
# ------------------------------------------------------------------------------------------------
def test_next_power_of_2():
    assert [tilex.next_power_of_2(x) for x in (1, 2, 3, 5, 64, 65, 1000)] == [1, 2, 4, 8, 64, 128, 1024]
    assert tilex.next_power_of_2(np.int64(17)) == 32
    with pytest.raises(ValueError, match="at least 1"):
        tilex.next_power_of_2(0)
    with pytest.raises(TypeError):
        tilex.next_power_of_2(3.5)


def test_cdiv():
    assert [tilex.cdiv(a, 4) for a in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert tilex.cdiv(-5, 2) == -2  # ceil(-2.5)
    m = tirx.Var("m", "int32")
    e = tilex.cdiv(m, 64)
    assert isinstance(e, tvm.ir.expr.Expr)
    assert tvm.sym.Analyzer().simplify(substitute(e, {m: tirx.IntImm("int32", 130)})).value == 3
    with pytest.raises(ValueError, match="positive"):
        tilex.cdiv(5, 0)
    with pytest.raises(TypeError):
        tilex.cdiv(5.0, 2)


# ------------------------------------------------------------------------------------------------
# tilex.utils.tensor
# ------------------------------------------------------------------------------------------------
def test_torch_assert_close_budget():
    a = torch.zeros(1000)
    b = a.clone()
    b[:3] = 1.0  # 3 mismatches of 1000
    assert torch_assert_close(a, a.clone()) is True
    assert torch_assert_close(a, b, max_mismatched_ratio=0.003) is True  # int(1000 * 0.003) = 3 allowed
    with pytest.raises(AssertionError, match=r"0\.30% of 1000 elements.*3 > 2"):
        torch_assert_close(a, b, max_mismatched_ratio=0.002)
    with pytest.raises(AssertionError, match=r"First mismatch at index \[0\]"):
        torch_assert_close(a, b)  # the default budget: int(1000 * 0.001) = 1
    # within atol + rtol * |b| is close
    assert torch_assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.005, 2.0]), rtol=1e-2, atol=0)
    # NaN == NaN by default; not with equal_nan=False
    n = torch.tensor([float("nan"), 1.0])
    assert torch_assert_close(n, n.clone())
    with pytest.raises(AssertionError):
        torch_assert_close(n, n.clone(), equal_nan=False, max_mismatched_ratio=0)


def test_torch_assert_close_attributes():
    a = torch.ones(4, dtype=torch.float16)
    with pytest.raises(AssertionError, match="dtypes differ"):
        torch_assert_close(a, torch.ones(4))
    assert torch_assert_close(a, torch.ones(4), check_dtype=False)
    with pytest.raises(AssertionError, match="shapes differ"):
        torch_assert_close(torch.ones(4), torch.ones(2, 2))
    with pytest.raises(TypeError):
        torch_assert_close(np.ones(4), torch.ones(4))
    with pytest.raises(ValueError, match="max_mismatched_ratio"):
        torch_assert_close(torch.ones(4), torch.ones(4), max_mismatched_ratio=2)
    assert tilex.testing.torch_assert_close is torch_assert_close


def test_tensor_supply_values_on_cpu():
    torch.manual_seed(0)
    big = (64, 64)

    def make(kind, dtype, shape=big):
        return get_tensor_supply(kind)(_param(shape, str(dtype).replace("torch.", ""), dtype))

    t = make(TensorSupplyType.Auto, torch.float16)
    assert t.dtype == torch.float16 and t.shape == big and t.device.type == ("cpu" if NO_GPU else "cuda")
    assert -1 <= float(t.min()) and float(t.max()) <= 1 and float(t.float().std()) > 0.4  # uniform in [-1, 1)
    for dt in (torch.int32, torch.float64):  # Auto: small integers for everything but fp16 / bf16 / fp32
        t = make("auto", dt)
        assert t.dtype == dt and set(t.unique().tolist()) == {-2, -1, 0, 1, 2}
    assert set(make("auto", torch.uint8).unique().tolist()) == {0, 1, 2}
    assert set(make("integer", torch.bool).unique().tolist()) == {False, True}
    f8 = make(TensorSupplyType.Integer, torch.float8_e4m3fn)
    assert f8.dtype == torch.float8_e4m3fn and float(f8.float().abs().max()) > 2
    t = make(TensorSupplyType.Integer, torch.float32)
    assert set(t.unique().tolist()) == {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert torch.equal(make("uniform", torch.int8).cpu(), torch.ones(big, dtype=torch.int8))
    assert torch.equal(make("normal", torch.int8).cpu(), torch.ones(big, dtype=torch.int8))
    normal = make(TensorSupplyType.Normal, torch.float32, (256, 256))
    assert abs(float(normal.mean()) + 1) < 0.05 and abs(float(normal.std()) - 1) < 0.05  # mean -1, std 1
    randn = make(TensorSupplyType.Randn, torch.bfloat16, (256, 256))
    assert randn.dtype == torch.bfloat16 and abs(float(randn.float().mean())) < 0.05
    uni = make(TensorSupplyType.Uniform, torch.float16)
    assert float(uni.min()) >= -1 and float(uni.max()) <= 1
    assert float(make("zero", torch.float32).abs().sum()) == 0 and float(make("one", torch.int32).sum()) == 64 * 64
    # an enum of another library with the same member names
    import enum
    other = enum.Enum("TensorSupplyType", "Integer Uniform Normal Randn Zero One Auto")
    assert TensorSupplyType.of(other.Normal) is TensorSupplyType.Normal
    with pytest.raises(ValueError, match="unknown tensor_supply_type"):
        TensorSupplyType.of("gaussian")


def test_tensor_supply_refuses():
    sym = ParamSpec(0, "A", "buffer", "float32", torch.float32, (("sym", 0, "m"), 8), None, False, None)
    with pytest.raises(ValueError, match="symbolic shape"):
        supply_tensor(sym, "randn", "cpu")
    with pytest.raises(ValueError, match="scalar"):
        supply_tensor(_param((), kind="scalar"), "randn", "cpu")
    with pytest.raises(ValueError, match="torch cannot allocate"):
        supply_tensor(_param((4,), "int4", None), "randn", "cpu")
    # the profiler's dynamic_symbolic_constraints give the size
    sized = profiler_mod._with_sizes(sym, {"m": 3})
    assert supply_tensor(sized, "one", "cpu").shape == (3, 8)
    with pytest.raises(ValueError, match="symbolic size 'm'"):
        profiler_mod._with_sizes(sym, {"n": 3})


# ------------------------------------------------------------------------------------------------
# the profiler
# ------------------------------------------------------------------------------------------------
class _Kernel:
    """Stands in for a JITKernel: B = A * 2 (+ a fault), on the CPU."""

    def __init__(self, fault=None, dtype=torch.float32):
        self.params = [ParamSpec(0, "A", "buffer", "float32", torch.float32, (100,), None, False, None),
                       ParamSpec(1, "B", "buffer", "float32", torch.float32, (100,), None, True, None)]
        self.out_idx = [1]
        self.fault, self.dtype = fault, dtype

    def __call__(self, a):
        out = (a * 2).to(self.dtype)
        if self.fault is not None:
            out = self.fault(out)
        return out


def test_profiler_assert_allclose_budget():
    a = torch.linspace(-1, 1, 100)
    prof = tilex.Profiler(_Kernel(), tilex.TensorSupplyType.Normal)
    assert prof.supply_type is TensorSupplyType.Normal and prof.func is prof.kernel
    prof.assert_allclose(lambda x: x * 2, input_tensors=[a])

    def one_off(out):
        out = out.clone()
        out[0] += 1
        return out

    prof = tilex.Profiler(_Kernel(fault=one_off))
    prof.assert_allclose(lambda x: x * 2, input_tensors=[a], max_mismatched_ratio=0.01)  # 1 of 100 allowed
    with pytest.raises(AssertionError, match="output 0: 1.00% of 100 elements"):
        prof.assert_allclose(lambda x: x * 2, input_tensors=[a], max_mismatched_ratio=0.005)
    # a half-precision kernel against a float32 reference: compared in the promoted dtype
    tilex.Profiler(_Kernel(dtype=torch.float16)).assert_allclose(lambda x: x * 2, input_tensors=[a])
    # an output the reference gives as None is not checked
    tilex.Profiler(_Kernel(fault=lambda o: o + 5)).assert_allclose(lambda x: [None], input_tensors=[a])
    with pytest.raises(AssertionError, match="1 outputs, the reference 0"):
        tilex.Profiler(_Kernel()).assert_allclose(lambda x: None, input_tensors=[a])
    seen = []
    tilex.Profiler(_Kernel()).manual_assert_close(lambda x: x * 2, input_tensors=[a],
                                                  manual_check_prog=lambda o, r: seen.append((len(o), len(r))))
    assert seen == [(1, 1)]


def test_do_bench_without_gpu_and_bad_arguments():
    for call in (lambda: tilex.profiler.do_bench(lambda: None, backend="wallclock"),
                 lambda: tilex.profiler.do_bench(lambda: None, quantiles=[0.5, 2.0]),
                 lambda: tilex.profiler.do_bench(lambda: None, quantiles=[0.5], backend="cupti"),
                 lambda: tilex.profiler.do_bench(lambda: None, return_mode="p99"),
                 lambda: tilex.profiler.do_bench(lambda: None, cache_size=-1),
                 lambda: tilex.profiler.do_bench(lambda: None, early_stop_baseline=-1.0)):
        with pytest.raises(ValueError):
            call()
    if NO_GPU:
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            tilex.profiler.do_bench(lambda: None, backend="cudagraph", quantiles=[0.5, 0.2, 0.8])
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            tilex.Profiler(_Kernel()).do_bench(backend="cupti")


@pytest.mark.gpu
def test_do_bench_backends_on_gpu():
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    fn = lambda: x @ x  # noqa: E731
    for backend in ("event", "cupti", "cudagraph"):
        t = tilex.profiler.do_bench(fn, warmup=5, rep=20, backend=backend)
        assert 0.001 < t < 100, (backend, t)
    qs = tilex.profiler.do_bench(fn, warmup=5, rep=20, quantiles=[0.5, 0.2, 0.8])
    assert len(qs) == 3 and qs[1] <= qs[0] <= qs[2]
    est = tilex.profiler.do_bench(fn, early_stop_baseline=0.0)  # stops after the estimate
    assert est > 0
    k = tilex.Profiler(_Kernel())
    a = torch.randn(100, device="cuda")
    assert k.do_bench(input_tensors=[a], n_warmup=2, n_repeat=5, return_mode="median") > 0


# ------------------------------------------------------------------------------------------------
# tilex.testing
# ------------------------------------------------------------------------------------------------
def _fresh():
    """A new stand-in test function for a decorator (pytest's marks take a lambda for a mark argument)."""

    def test_case():
        pass

    return test_case


def _marks(func):
    return {m.name: m for m in getattr(func, "pytestmark", [])}


def _skipped(func) -> bool:
    return any(m.name == "skip" or (m.name == "skipif" and m.args[0]) for m in getattr(func, "pytestmark", []))


def test_set_random_seed_reproducible():
    tilex.testing.set_random_seed(7)
    first = (random.random(), np.random.rand(), torch.rand(3))
    tilex.testing.set_random_seed(7)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[0] == again[0] and first[1] == again[1] and torch.equal(first[2], again[2])
    tilex.testing.set_random_seed()
    assert random.random() != first[0]


def test_requires_cuda_marks():
    @tilex.testing.requires_cuda
    def f():
        pass

    assert "gpu" in _marks(f) and _skipped(f) == NO_GPU
    assert _skipped(tilex.testing.requires_cuda_or_cdna(_fresh())) == NO_GPU
    for name in ("requires_rocm", "requires_cdna", "requires_gfx950", "requires_metal", "requires_llvm"):
        deco = getattr(tilex.testing, name)
        assert deco.__name__ == name and _skipped(deco(_fresh()))
    assert not _skipped(tilex.testing.requires_package("numpy", "torch")(_fresh()))
    g = tilex.testing.requires_package("numpy", "no_such_package_xyz")(_fresh())
    assert _skipped(g) and "no_such_package_xyz" in _marks(g)["skipif"].kwargs["reason"]


def test_requires_cuda_compute_version(monkeypatch):
    with pytest.raises(ValueError, match="mode"):
        tilex.testing.requires_cuda_compute_version(9, 0, mode="ne")
    if NO_GPU:
        f = tilex.testing.requires_cuda_compute_version_ge(8)(_fresh())
        assert _skipped(f) and "gpu" in _marks(f)
    monkeypatch.setattr(tilex.testing, "_compute_version", lambda: (9, 0))

    def skipped(deco, *version):
        marks = [m for m in deco(*version)(_fresh()).pytestmark if m.name == "skipif"]
        return marks[0].args[0]  # the compute-version condition (the first skipif)

    t = tilex.testing
    assert not skipped(t.requires_cuda_compute_version_ge, 9, 0) and skipped(t.requires_cuda_compute_version_ge, 10)
    assert not skipped(t.requires_cuda_compute_version_eq, 9, 0) and skipped(t.requires_cuda_compute_version_eq, 8, 9)
    assert not skipped(t.requires_cuda_compute_version_lt, 10) and skipped(t.requires_cuda_compute_version_lt, 9, 0)
    assert not skipped(t.requires_cuda_compute_version_le, 9) and skipped(t.requires_cuda_compute_version_gt, 9, 0)
    assert not skipped(t.requires_cuda_compute_version, 8, 0)  # mode "ge" by default


def regression_tiny_case():
    perf_regression.process_func(lambda scale=1.0: 1.5 * scale, "regression_tiny", scale=2.0)
    with pytest.warns(RuntimeWarning, match="latency"):
        perf_regression.process_func(lambda: 0.0, "never_positive")


def test_process_func_and_regression(capsys, monkeypatch):
    monkeypatch.delenv("TILEX_PERF_REGRESSION_ONLY", raising=False)
    monkeypatch.setenv("TL_PERF_REGRESSION_FORMAT", "json")
    tilex.testing.regression(verbose=False)
    out = capsys.readouterr().out
    assert perf_regression.results() == [perf_regression.PerfResult("tiny", 3.0, "tiny_case")]
    assert out.strip() == perf_regression.RESULTS_JSON_PREFIX + '[{"name":"tiny","latency":3.0,"case":"tiny_case"}]'
    monkeypatch.setenv("TILEX_PERF_REGRESSION_ONLY", "other*")
    tilex.testing.regression(verbose=False)
    assert perf_regression.results() == []


# ------------------------------------------------------------------------------------------------
# tilex.contrib.nvcc and tilex.utils.target
# ------------------------------------------------------------------------------------------------
def test_compute_versions():
    assert nvcc.get_target_compute_version(tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})) == "9.0"
    assert nvcc.get_target_compute_version("sm_100a") == "10.0"
    with tvm.target.Target({"kind": "cuda", "arch": "sm_86"}):
        assert nvcc.get_target_compute_version() == "8.6"
    if NO_GPU:
        with pytest.raises(ValueError, match="no GPU"):
            nvcc.get_target_compute_version()
    assert nvcc.parse_compute_version("12.1") == (12, 1)
    with pytest.raises(ValueError):
        nvcc.parse_compute_version("sm90")
    assert [nvcc.get_target_arch(v) for v in ("8.0", "8.9", "9.0", (10, 0))] == ["80", "89", "90a", "100a"]
    assert nvcc.have_fp16("5.3") and not nvcc.have_fp16("5.2") and nvcc.have_bf16("8.0") and not nvcc.have_bf16("7.5")
    assert nvcc.have_fp8("8.9") and not nvcc.have_fp8("8.6") and nvcc.have_int8("6.1")
    assert nvcc.have_tensorcore("7.0") and not nvcc.have_tensorcore("6.1")
    h100, a100 = tilex.env.resolve_target("sm_90a"), tilex.env.resolve_target("sm_80")
    assert nvcc.have_tma(h100) and nvcc.is_hopper(h100) and nvcc.have_mbarrier(h100) and nvcc.have_pdl(h100)
    assert not nvcc.have_tma(a100) and not nvcc.is_hopper(a100)


def test_nvcc_toolkit_and_compile_cuda(tmp_path):
    if not utarget.check_cuda_availability():
        pytest.skip("needs nvcc")
    assert nvcc.get_cuda_version() >= (11, 0) and nvcc.have_cudagraph()
    assert nvcc.get_nvcc_compiler().endswith("nvcc") and nvcc.find_cuda_path()
    code = 'extern "C" __global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }\n'
    out = tmp_path / "k.ptx"
    ptx = tilex.contrib.compile_cuda(code, "ptx", arch="sm_90a", path_target=str(out))
    assert isinstance(ptx, bytearray) and b".entry add_one" in ptx and out.read_bytes() == bytes(ptx)
    with pytest.raises(ValueError, match="target_format"):
        nvcc.compile_cuda(code, "sass")
    with pytest.raises(tilex.TilexCompileError):
        nvcc.compile_cuda("this is not C++", "ptx", arch="sm_80")


def test_determine_target_and_predicates():
    t = utarget.determine_target("auto")
    assert isinstance(t, tvm.target.Target) and t.kind.name == "cuda"
    with tvm.target.Target({"kind": "cuda", "arch": "sm_80"}):
        assert str(utarget.determine_target("auto").attrs["arch"]) == "sm_80"
    assert utarget.determine_target("sm_90a") == "sm_90a"
    assert isinstance(utarget.determine_target({"kind": "cuda", "arch": "sm_90a"}, return_object=True),
                      tvm.target.Target)
    for bad in ("hip", "llvm", {"kind": "metal"}):
        with pytest.raises(ValueError, match="CUDA only"):
            utarget.determine_target(bad)
    h100, a100, b200 = (tilex.env.resolve_target(a) for a in ("sm_90a", "sm_80", "sm_100a"))
    assert utarget.target_is_hopper(h100) and not utarget.target_is_hopper(a100) and utarget.target_is_sm100(b200)
    assert utarget.target_is_ampere(a100) and utarget.target_is_cuda(a100) and not utarget.target_is_cdna(a100)
    assert utarget.target_has_async_copy(a100) and not utarget.target_has_bulk_copy(a100)
    assert utarget.target_has_bulk_copy(h100) and utarget.target_has_wgmma(h100) and not utarget.target_has_wgmma(b200)
    assert utarget.target_get_warp_size(h100) == 32


# ------------------------------------------------------------------------------------------------
# tilex.layout.make_swizzled_layout(buffer)
# ------------------------------------------------------------------------------------------------
def test_make_swizzled_layout_of_a_buffer():
    two = tirx.decl_buffer((64, 64), "float16", name="A_s", scope="shared.dyn")
    three = tirx.decl_buffer((3, 64, 64), "float16", name="B_s", scope="shared.dyn")
    ref = tilex.layout.make_swizzled_layout(64, 64, 16)
    assert tilex.layout.make_swizzled_layout(two).is_equal(ref)
    assert tilex.layout.make_swizzled_layout(two, k_major=False, allow_pad=False).is_equal(ref)
    assert tilex.layout.make_swizzled_layout(three).is_equal(ref.expand((3,)))
    region = tirx.BufferRegion(two, [tvm.ir.Range(0, 64), tvm.ir.Range(0, 64)])
    assert tilex.layout.make_swizzled_layout(region).is_equal(ref)
    assert tilex.layout.make_swizzled_layout(tirx.BufferLoad(two, [0, 0])).is_equal(ref)
    with pytest.raises(ValueError, match="at least 2 dims"):
        tilex.layout.make_swizzled_layout(tirx.decl_buffer((64,), "float16", name="v"))


# ------------------------------------------------------------------------------------------------
# the autotuner's TileLang names
# ------------------------------------------------------------------------------------------------
def scale(N, block=256, threads=128):
    """B = A * 2 (a factory for the tuner; the tests below never compile it)."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0

    return main


def test_set_autotune_inputs_stack():
    a, b = torch.ones(2), torch.zeros(2)
    assert at.get_autotune_inputs() is None
    with at.set_autotune_inputs(a, b):
        assert at.get_autotune_inputs() == [a, b]
        with at.set_autotune_inputs([b]):
            assert at.get_autotune_inputs() == [b]
        seen = []
        th = threading.Thread(target=lambda: seen.append(at.get_autotune_inputs()))
        th.start()
        th.join()
        assert seen == [None]  # per thread
        assert at.get_autotune_inputs() == [a, b]
    assert at.get_autotune_inputs() is None


class _FakeKernel:
    """A compiled configuration for benchmark(): ``latency`` is what the fake timer reports for it."""

    def __init__(self, latency):
        self.params = [ParamSpec(0, "A", "buffer", "float32", torch.float32, (8,), None, False, None),
                       ParamSpec(1, "B", "buffer", "float32", torch.float32, (8,), None, True, None)]
        self.latency = latency

    def __call__(self, a):
        _FakeKernel.current = self
        return a * 2


def _benchmark(monkeypatch, latencies, **tuner_kw):
    """Run AutoTuner.benchmark over fake kernels with the given latencies; returns (result, timer calls,
    supplied inputs)."""
    import tilex.autotuner.bench as bench
    from tilex.autotuner import devices as devices_mod

    calls = []

    def fake_do_bench(fn, warmup=25, rep=100, **kw):
        fn()
        calls.append(dict(kw, latency=_FakeKernel.current.latency))
        base = kw.get("early_stop_baseline")
        est = _FakeKernel.current.latency
        return est if base is None or est <= base else est + 100  # the estimate, not a full measurement

    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: True)
    monkeypatch.setattr(tuner_mod, "_device_name", lambda: "fake GPU")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(bench, "do_bench", fake_do_bench)
    monkeypatch.setattr(tuner_mod, "bench_devices", lambda devices=None: [0])
    monkeypatch.setattr(devices_mod, "_cuda_device", lambda dev: contextlib.nullcontext())
    supplied = []
    tuner_kw.setdefault("supply", lambda params: supplied.append("supply") or [torch.arange(8.0)])
    t = at.AutoTuner(scale, [dict(block=b) for b in (64, 128, 256)], out_idx=[1], target="sm_90a",
                     progress=False, record=False, ref_prog=lambda a: a * 2, **tuner_kw)
    job = t._bind((1024,), {})
    res = [tuner_mod.ConfigResult(i, c, at.COMPILED, kernel=_FakeKernel(lat))
           for i, (c, lat) in enumerate(zip(job.configs, latencies))]
    return t.benchmark(tuner_mod.CompileReport(job, res, "thread", "test")), calls, supplied


def test_early_stop(monkeypatch):
    res, calls, _ = _benchmark(monkeypatch, [1.0, 5.0, 0.5], early_stop=True, early_stop_factor=2.0)
    assert [c.get("early_stop_baseline") for c in calls] == [None, 2.0, 2.0]
    assert [r.latency for r in res.results] == [1.0, 105.0, 0.5] and res.best.index == 2
    res, calls, _ = _benchmark(monkeypatch, [1.0, 5.0, 0.5])  # off by default
    assert all("early_stop_baseline" not in c for c in calls) and res.results[1].latency == 5.0
    with pytest.raises(ValueError, match="early_stop_factor"):
        at.AutoTuner(scale, [dict(block=64)], early_stop=True, early_stop_factor=0.5)
    res, calls, _ = _benchmark(monkeypatch, [1.0, 2.0, 3.0], backend="cupti")
    assert {c["backend"] for c in calls} == {"cupti"}


def test_autotune_inputs_and_supply_type(monkeypatch):
    given = torch.full((8,), 3.0)
    with at.set_autotune_inputs(given):
        res, _, supplied = _benchmark(monkeypatch, [1.0, 2.0, 3.0])
    assert supplied == [] and res.best.index == 0  # the captured inputs, not supply()
    t = at.AutoTuner(scale, [dict(block=64)], supply_type=tilex.TensorSupplyType.One)
    ones = t._supply()([_param((8,))])
    assert torch.equal(ones[0].cpu(), torch.ones(8))
    with at.set_autotune_inputs(given):
        got = t._supply()([_param((8,))])
        assert torch.equal(got[0].cpu(), given) and got[0] is not given  # a copy per device
        with pytest.raises(ValueError, match="1 inputs, the kernel takes 2"):
            t._supply()([_param((8,)), _param((8,), name="B")])
    assert t._supply() is not None and at.AutoTuner(scale, [dict(block=64)])._supply() is at.default_supply
    with pytest.raises(ValueError, match="unknown tensor_supply_type"):
        at.AutoTuner(scale, [dict(block=64)], supply_type="gaussian")


def test_run_takes_tilelang_run_options(monkeypatch):
    t = at.AutoTuner(scale, [dict(block=64), dict(block=128)], warmup=25, rep=100, progress=False)
    seen = {}

    def fake_run(self, args, kwargs):
        seen.update(args=args, kwargs=kwargs, warmup=self.warmup, rep=self.rep, early_stop=self.early_stop,
                    factor=self.early_stop_factor)
        return "result"

    monkeypatch.setattr(tuner_mod.AutoTuner, "_run", fake_run)
    assert t.run(1024, warmup=5, rep=50, early_stop=True, early_stop_factor=1.2, enable_grouped_compile=True) \
        == "result"
    assert seen == dict(args=(1024,), kwargs={}, warmup=5, rep=50, early_stop=True, factor=1.2)
    assert (t.warmup, t.rep, t.early_stop) == (25, 100, False)  # for that run only
    t.run(N=1024, block=64)  # factory parameters stay factory arguments
    assert seen["kwargs"] == {"N": 1024, "block": 64}
    with pytest.raises(NotImplementedError, match="timeout"):
        t.run(1024, timeout=30)


def test_disable_cache_disables_the_autotune_cache(monkeypatch):
    t = at.AutoTuner(scale, [dict(block=64)], progress=False)
    keys = []
    monkeypatch.setattr(tuner_mod.AutoTuner, "_key", lambda self, job: keys.append(job) or None)
    monkeypatch.setattr(tuner_mod, "_cuda_available", lambda: False)
    try:
        tilex.disable_cache()
        with pytest.raises(at.AutotuneError):
            t.run(1024)
        assert keys == []
        tilex.enable_cache()
        with pytest.raises(at.AutotuneError):
            t.run(1024)
        assert len(keys) == 1
    finally:
        kcache.reset()


def test_set_compile_args_takes_tilelang_arguments():
    t = at.AutoTuner.from_kernel(scale, [dict(block=64)]).set_compile_args(out_idx=[-1], target="auto",
                                                                          execution_backend="cython")
    assert t.out_idx == [-1]
    with pytest.raises(ValueError, match="execution_backend"):
        t.set_compile_args(execution_backend="ctypes")
    with pytest.raises(NotImplementedError, match="target_host"):
        t.set_compile_args(target_host="llvm")


def test_autotune_decorator_takes_tilelang_arguments():
    f = tilex.autotune(configs=[dict(block=64)], early_stop=True, early_stop_factor=1.5,
                       supply_type="integer", backend="cudagraph")(scale)
    assert f.tuner.early_stop and f.tuner.early_stop_factor == 1.5
    assert f.tuner.supply_type is TensorSupplyType.Integer and f.tuner.backend == "cudagraph"


# ------------------------------------------------------------------------------------------------
# refused: the carver recommender and the tools
# ------------------------------------------------------------------------------------------------
def test_carver_and_tools():
    from tilex.carver.arch import CDNA, CUDA, driver, get_arch
    from tilex.carver.roller.rasterization import NoRasterization
    from tilex.carver.template import MatmulTemplate

    for make in (lambda: CUDA("cuda"), lambda: CDNA("hip"), lambda: get_arch("cuda"), lambda: MatmulTemplate(),
                 lambda: NoRasterization(), lambda: tilex.tools.plot_layout(None),
                 lambda: tilex.tools.Analyzer.analysis(None, None)):
        with pytest.raises(NotImplementedError, match="not implemented"):
            make()
    if NO_GPU:
        assert driver.get_device_name() is None and driver.get_cuda_device_properties() is None
        with pytest.raises(RuntimeError, match="no CUDA device"):
            driver.get_num_sms()
    with pytest.raises(ValueError, match="format"):
        driver._scaled(1024, "gb")


@pytest.mark.gpu
def test_driver_queries_on_gpu():
    from tilex.carver.arch import driver

    props = torch.cuda.get_device_properties(0)
    assert driver.get_num_sms() == props.multi_processor_count
    assert driver.get_shared_memory_per_block(format="kb") == 48
    assert driver.get_max_dynamic_shared_size_bytes() >= 100 * 1024
    assert driver.get_registers_per_block() == 65536
    assert driver.get_persisting_l2_cache_max_size() >= 0
    assert driver.get_device_name() == props.name
