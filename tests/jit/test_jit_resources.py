"""nvcc on every machine, ptxas statistics (kernel.resources, spill warning), get_profiler, export_library and
the nvcc version in the cache key. Runs without a GPU (nvcc is needed for most of it)."""
import warnings

import pytest
import torch
import tvm
from tvm.script import tirx as T

import tilex
from tilex.engine import nvcc
from tilex.jit import ArgChecker, cache, kernel as kernel_mod
from tilex.jit.profiler import Profiler, TensorSupplyType, supply_tensor
from tilex.jit.resources import KernelResources, TilexPerformanceWarning, parse_ptxas, warn_spills
from tilex.kernels.gemm import matmul

import jit_kernels

needs_nvcc = pytest.mark.skipif(not nvcc.nvcc_available(), reason="nvcc not found")
SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})

# nvcc 13.0 --resource-usage, tilex.kernels.gemm.matmul(512, 512, 512, bm=256, bn=256, threads=128) on sm_90a,
# with a second, hand-written entry function and a non-inlined device function added
RECORDED = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for __internal_helper
    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'main_kernel' for 'sm_90a'
ptxas info    : Function properties for main_kernel
    3848 bytes stack frame, 7224 bytes spill stores, 6940 bytes spill loads
ptxas info    : Used 240 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 812.350 ms
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'
ptxas info    : Function properties for _Z3fooPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 35.923 ms
"""

# the older (CUDA 11/12) form of the "Used" line: no barrier count, constant banks listed
RECORDED_OLD = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'axpy' for 'sm_80'
ptxas info    : Function properties for axpy
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 2048 bytes smem, 380 bytes cmem[0], 8 bytes cmem[2]
"""


def test_parse_recorded_ptxas_output():
    res = parse_ptxas(RECORDED)
    assert list(res.functions) == ["main_kernel", "_Z3fooPf"]
    main = res["main_kernel"]
    assert (main.arch, main.registers, main.spill_stores, main.spill_loads, main.stack_frame, main.shared_memory,
            main.barriers) == ("sm_90a", 240, 7224, 6940, 3848, 1024, 1)
    assert main.spilled and not res["_Z3fooPf"].spilled and res["_Z3fooPf"].registers == 32
    assert res.registers == 240 and res.spill_stores == 7224 and res.spill_loads == 6940 and res.spilled
    assert KernelResources.from_json(res.to_json()) == res
    old = parse_ptxas(RECORDED_OLD)["axpy"]
    assert (old.arch, old.registers, old.shared_memory, old.constant_memory, old.barriers) == ("sm_80", 10, 2048,
                                                                                               388, 0)
    assert len(parse_ptxas("nvcc warning : something\n")) == 0


@T.prim_func
def _calls_undeclared(A: T.Buffer((128,), "float32")):
    T.func_attr({"global_symbol": "calls_undeclared", "tirx.is_scheduled": True})
    tx = T.launch_thread("threadIdx.x", 128)
    A[tx] = T.call_extern("float32", "tilex_test_function_nvcc_does_not_know", A[tx])


@needs_nvcc
def test_nvcc_runs_in_compile_without_gpu(monkeypatch):
    """TVM accepts the program (codegen emits the call); nvcc rejects it, on a GPU machine and without one."""
    monkeypatch.setenv("TILEX_DISABLE_CACHE", "1")
    with pytest.raises(tilex.TilexCompileError, match="tilex_test_function_nvcc_does_not_know"):
        tilex.compile(_calls_undeclared, target="sm_90a")


@needs_nvcc
def test_resources_of_a_compiled_kernel(monkeypatch):
    monkeypatch.setenv("TILEX_DISABLE_CACHE", "1")
    n0 = nvcc.compile_count()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilexPerformanceWarning)
        k = tilex.compile(jit_kernels.vec_add(256), out_idx=-1, target="sm_90a")
    assert nvcc.compile_count() == n0 + 1
    res = k.resources
    assert isinstance(res, KernelResources) and len(res) == 1
    (f,) = res
    assert f.name.startswith("vec_add_k") and f.arch == "sm_90a" and 0 < f.registers <= 255
    assert not res.spilled and res.stack_frame == 0


@needs_nvcc
def test_spill_warning(monkeypatch):
    """A 256x256 fp32 accumulator on 128 threads holds 512 values per thread: ptxas spills."""
    monkeypatch.setenv("TILEX_DISABLE_CACHE", "1")
    with pytest.warns(TilexPerformanceWarning, match=r"kernel 'main' spills registers.*bytes spill stores"):
        k = tilex.compile(matmul(512, 512, 512, bm=256, bn=256, threads=128), out_idx=[-1], target="sm_90a")
    assert k.resources.spilled and k.resources.spill_stores > 0 and k.resources.registers > 128


@needs_nvcc
def test_ptxas_report_reused_without_gpu(monkeypatch, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    monkeypatch.setenv("TILEX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEX_DISABLE_CACHE", raising=False)
    cache.reset()
    first = tilex.compile(jit_kernels.vec_add(384), out_idx=-1, target="sm_90a")
    n0 = nvcc.compile_count()
    again = tilex.compile(jit_kernels.vec_add(384), out_idx=-1, target="sm_90a")
    assert nvcc.compile_count() == n0  # same key: ptxas's report is read back, nvcc does not run again
    assert again.resources == first.resources and again.resources.registers > 0
    assert cache.load_ptxas_report(first.cache_key) == first.resources.to_json()
    assert not any((tmp_path / "cache").rglob(cache.META_NAME))  # no kernel entry without a binary


def test_without_nvcc_warns_once(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    monkeypatch.setenv("TILEX_DISABLE_CACHE", "1")
    monkeypatch.setattr(nvcc, "nvcc_available", lambda: False)
    monkeypatch.setattr(kernel_mod, "_no_nvcc_warned", False)
    with pytest.warns(RuntimeWarning, match="nvcc was not found"):
        k = tilex.compile(jit_kernels.vec_add(256), out_idx=-1, target="sm_90a")
    assert k.resources is None and "vec_add_k" in k.get_kernel_source()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tilex.compile(jit_kernels.vec_add(512), out_idx=-1, target="sm_90a")


def test_cache_key_has_nvcc_version(monkeypatch):
    version = nvcc.nvcc_version()
    if nvcc.nvcc_available():
        assert "release" in version and version == nvcc.nvcc_version()
    f = jit_kernels.vec_add(1024)
    base = cache.make_key(f, [2], SM90, None)
    monkeypatch.setattr(nvcc, "nvcc_version", lambda: "Cuda compilation tools, release 12.8, V12.8.93")
    assert cache.make_key(f, [2], SM90, None) != base


@needs_nvcc
def test_export_library_writes_a_library(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEX_DISABLE_CACHE", "1")
    k = tilex.compile(jit_kernels.vec_add(256), out_idx=-1, target="sm_90a")
    path = k.export_library(str(tmp_path / "out" / "vec_add.so"))
    assert path == str(tmp_path / "out" / "vec_add.so")
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"
    if torch.cuda.is_available():
        mod = tvm.runtime.load_module(path)
        assert mod["vec_add_k"] is not None


class _FakeKernel:
    """Stands in for a JITKernel on CPU: C = A + B."""

    def __init__(self, offset=0.0):
        checker = ArgChecker(jit_kernels.vec_add(128), [-1])
        self.params, self.out_idx, self.offset = checker.params, checker.out_idx, offset

    def __call__(self, a, b):
        return a + b + self.offset


def test_profiler_supply_and_allclose():
    prof = Profiler(_FakeKernel(), "uniform")
    assert prof.supply_type is TensorSupplyType.Uniform and [p.name for p in prof.params] == ["A", "B"]
    assert TensorSupplyType.of("Randn") is TensorSupplyType.Randn
    with pytest.raises(ValueError, match="unknown tensor_supply_type"):
        TensorSupplyType.of("gaussian")
    a = supply_tensor(prof.params[0], "uniform", "cpu")
    assert a.shape == (128,) and a.dtype == torch.float32 and float(a.abs().max()) <= 1
    assert float(supply_tensor(prof.params[0], TensorSupplyType.One, "cpu").sum()) == 128
    b = supply_tensor(prof.params[1], "zero", "cpu")
    prof.assert_allclose(lambda x, y: x + y, input_tensors=[a, b])
    with pytest.raises(AssertionError, match="output 0: 100.00% of 128 elements"):
        Profiler(_FakeKernel(offset=1.0)).assert_allclose(lambda x, y: x + y, input_tensors=[a, b])
    # a few mismatching elements are tolerated up to max_mismatched_ratio
    ref = lambda x, y: torch.cat([x[:1] + 5, (x + y)[1:]])  # noqa: E731
    prof.assert_allclose(ref, input_tensors=[a, b], max_mismatched_ratio=0.01)
    with pytest.raises(AssertionError):
        prof.assert_allclose(ref, input_tensors=[a, b], max_mismatched_ratio=0.0)


@needs_nvcc
def test_get_profiler_without_gpu(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only behaviour")
    monkeypatch.setenv("TILEX_DISABLE_CACHE", "1")
    k = tilex.compile(jit_kernels.vec_add(256), out_idx=-1, target="sm_90a")
    prof = k.get_profiler(tensor_supply_type="randn")
    assert isinstance(prof, Profiler) and prof.kernel is k
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        prof.do_bench()


def test_serialized_wgmma_is_reported_and_warned():
    report = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
              "non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline "
              "stage in the function 'main_kernel'\n"
              "ptxas info    : Compiling entry function 'main_kernel' for 'sm_90a'\n"
              "ptxas info    : Function properties for main_kernel\n"
              "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
              "ptxas info    : Used 168 registers, used 2 barriers, 1024 bytes smem\n")
    res = parse_ptxas(report)
    f = res.functions["main_kernel"]
    assert f.registers == 168 and "reading accumulator registers" in f.wgmma_serialized
    with pytest.warns(TilexPerformanceWarning, match="serialized the wgmma"):
        warn_spills(res, "k")
    assert not parse_ptxas(report.split("\n", 1)[1]).functions["main_kernel"].wgmma_serialized
