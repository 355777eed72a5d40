import os

import pytest
import tvm_ffi

import tilex
from tilex import env
from tilex.engine import nvcc

import tilex.language as T
from tilex.kernels.softmax import softmax_kernel


@T.prim_func
def _double(A: T.Buffer((128,), "float32")):
    """A hand-scheduled kernel that needs no tilex header."""
    T.func_attr({"global_symbol": "double_k", "tirx.is_scheduled": True})
    tx = T.launch_thread("threadIdx.x", 128)
    A[tx] = A[tx] * T.float32(2)

PLAIN = r"""
extern "C" __global__ void axpy(float* __restrict__ y, const float* __restrict__ x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
"""


def _source_with_common():
    common = os.path.join(env.include_dir(), nvcc.COMMON_HEADER)
    if os.path.isfile(common):
        return '#include "tilex/common.h"\n' + PLAIN
    return PLAIN


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_compile_cuda_cubin(arch):
    cubin = nvcc.compile_cuda(_source_with_common(), arch)
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"


def test_compile_cuda_ptx():
    ptx = nvcc.compile_cuda(PLAIN, "sm_90a", fmt="ptx")
    assert b".target sm_90a" in ptx


def test_nvcc_command_flags():
    cmd = nvcc.nvcc_command("k.cu", "k.cubin", "sm_90a")
    joined = " ".join(cmd)
    assert "-gencode arch=compute_90a,code=sm_90a" in joined
    assert "-std=c++17" in cmd and "-O3" in cmd and "--expt-relaxed-constexpr" in cmd and "-lineinfo" in cmd
    assert f"-I{env.include_dir()}" in cmd
    assert "--use_fast_math" not in cmd
    assert "-gencode arch=compute_80,code=sm_80" in " ".join(nvcc.nvcc_command("k.cu", "o", "sm_80"))


def test_compile_error_is_readable():
    bad = PLAIN + "\n__global__ void broken() { this_is_not_declared(); }\n"
    with pytest.raises(tilex.TilexCompileError) as ei:
        nvcc.compile_cuda(bad, "sm_90a")
    e = ei.value
    msg = str(e)
    assert "nvcc failed" in msg and "this_is_not_declared" in msg and "-gencode" in msg
    assert "this_is_not_declared" in msg.splitlines()[0]  # the first error line heads the message
    assert os.path.isfile(e.source_path) and e.source_path in msg
    assert "this_is_not_declared" in open(e.source_path).read()


def test_hooks_registered():
    f = tvm_ffi.get_global_func("tvm_callback_cuda_compile")
    n0 = nvcc.compile_count()
    import tvm

    with tvm.target.Target({"kind": "cuda", "arch": "sm_80"}):
        out = f(PLAIN)
    assert bytes(out)[:4] == b"\x7fELF"
    assert nvcc.compile_count() == n0 + 1
    post = tvm_ffi.get_global_func("tvm_callback_cuda_postproc")
    assert post is not None


def test_postproc_adds_common_include(monkeypatch, tmp_path):
    inc = tmp_path / "inc"
    (inc / "tilex").mkdir(parents=True)
    (inc / "tilex" / "common.h").write_text(
        "#pragma once\n__device__ __forceinline__ int tilex_test_marker() { return 7; }\n")
    monkeypatch.setenv("TILEX_INCLUDE_DIR", str(inc))
    assert nvcc.add_common_include("int x;").startswith('#include "tilex/common.h"\n')
    assert nvcc.add_common_include('#include "tilex/common.h"\nint x;').count("tilex/common.h") == 1
    # through TVM codegen: the generated source includes the header and nvcc finds it through -I
    tilex.jit.cache.disable()
    try:
        k = tilex.compile(_double, target="sm_90a")
    finally:
        tilex.jit.cache.reset()
    src = k.get_kernel_source()
    assert src.startswith('#include "tilex/common.h"')
    assert nvcc.compile_cuda(src, "sm_90a")[:4] == b"\x7fELF"


def test_postproc_without_header(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEX_INCLUDE_DIR", str(tmp_path))
    assert nvcc.add_common_include("int x;") == "int x;"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_generated_kernel_compiles(arch):
    tilex.jit.cache.disable()
    try:
        k = tilex.compile(softmax_kernel(256, 256), out_idx=[1], target=arch)
    finally:
        tilex.jit.cache.reset()
    src = k.get_kernel_source()
    assert "softmax_kernel" in src
    assert nvcc.compile_cuda(src, arch)[:4] == b"\x7fELF"


WS_KERNEL = ('extern "C" __global__ void __launch_bounds__(384) k(half* A) {\n'
             "  tilex::min_blocks_per_sm<2>();\n  tilex::cluster_dims<2>();\n  tilex::reg_alloc<232>();\n}\n")


def test_launch_markers_become_launch_bounds():
    out = nvcc.cap_registers_for_setmaxnreg(WS_KERNEL)
    assert "__cluster_dims__(2, 1, 1) __launch_bounds__(384, 2) k(" in out
    plain = WS_KERNEL.replace("  tilex::cluster_dims<2>();\n", "").replace("tilex::min_blocks_per_sm<2>", "f")
    assert "__launch_bounds__(384, 1)" in nvcc.cap_registers_for_setmaxnreg(plain)
    no_ws = "__global__ void __launch_bounds__(128) k() {}"
    assert nvcc.cap_registers_for_setmaxnreg(no_ws) == no_ws


def test_postprocessing_fails_loudly_when_tvm_text_changes():
    """The edits of TVM's CUDA text name what they did not find instead of silently leaving the kernel without
    its launch bounds or its 1 KB shared-memory alignment."""
    with pytest.raises(tilex.TilexCompileError, match="__launch_bounds__"):
        nvcc.cap_registers_for_setmaxnreg(WS_KERNEL.replace("__launch_bounds__(384) ", ""))
    tvm_style = "extern __shared__ __align__(64) uchar buf_dyn_shmem_ptr[];"
    assert "__align__(1024)" in nvcc.align_dynamic_shared(tvm_style)
    with pytest.raises(tilex.TilexCompileError, match="dynamic shared memory"):
        nvcc.align_dynamic_shared("extern __shared__ __align__(16) uchar buf_dyn_shmem_ptr[];")
