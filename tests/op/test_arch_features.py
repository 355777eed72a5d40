"""Every target gets a GEMM with real matrix instructions, and only the paths its features allow
(tilex.ir.hardware.ARCH_FEATURES): wgmma + TMA warp specialization on sm_90a alone, ldmatrix + mma.sync (+ cp.async
pipeline, TMA store where the target has it) everywhere else, Blackwell included. CPU only: TVM generates the CUDA
for the target named, nvcc compiles it (PTX; SASS too when cuobjdump is on PATH)."""
import re
import shutil
import subprocess
import tempfile

import pytest
import tvm
from tvm import tirx

import tilex
from tilex.engine import nvcc
from tilex.ir.hardware import (ARCH_FEATURES, CLUSTERS, CP_ASYNC, FEATURES, LDMATRIX, MMA_SYNC, SETMAXNREG,
                               TMA_LOAD, TMA_MULTICAST, TMA_STORE, WGMMA, arch_features, supports,
                               unsupported_message)
from tilex.ir.visit import map_nodes
from tilex.kernels.gemm import matmul
from tilex.op.base import TileOpError
from tilex.op.copy import CopyOp, copy_call
from tilex.transform.hopper.ws_decision import target_allows_warp_specialization

ARCHS = sorted(ARCH_FEATURES)


def _nvcc_knows(arch):
    try:
        out = subprocess.run([tilex.env.find_nvcc(), "--list-gpu-arch"], capture_output=True, text=True).stdout
    except Exception:  # noqa: BLE001 - no nvcc: the compile tests skip
        return False
    return f"compute_{arch[3:].rstrip('af')}" in out.split()


def _gemm_source(arch, dtype, **kw):
    prog = matmul(512, 512, 512, bm=128, bn=128, bk=32, num_stages=3, threads=256, dtype=dtype, stage_c=True)
    return tilex.compile(prog, out_idx=[2], target=arch, **kw).get_kernel_source()


# ---- the table --------------------------------------------------------------------------------------------------

def test_table_facts():
    assert [a for a in ARCHS if supports(a, WGMMA)] == ["sm_90a"]
    for arch in ("sm_100", "sm_100a", "sm_103a", "sm_110a", "sm_120", "sm_120a", "sm_121a"):
        assert not supports(arch, WGMMA)
        assert supports(arch, MMA_SYNC) and supports(arch, LDMATRIX) and supports(arch, CP_ASYNC)
        assert supports(arch, TMA_LOAD) and supports(arch, TMA_STORE) and supports(arch, CLUSTERS)
    for arch in ("sm_80", "sm_86", "sm_89"):
        assert not (supports(arch, TMA_LOAD) or supports(arch, TMA_STORE) or supports(arch, CLUSTERS))
    assert [a for a in ARCHS if supports(a, SETMAXNREG)] == [a for a in ARCHS if a[-1] in "af"]
    assert not supports("sm_120a", TMA_MULTICAST) and supports("sm_100a", TMA_MULTICAST)
    assert not supports("sm_90", TMA_MULTICAST) and not supports("sm_100", TMA_MULTICAST)
    # targets and None read like arch strings; archs missing from the table get their generation's row
    assert arch_features(tilex.env.resolve_target("sm_100a")) == ARCH_FEATURES["sm_100a"]
    assert arch_features(None) == ARCH_FEATURES["sm_80"]
    assert arch_features("sm_75") == frozenset()
    assert not supports("sm_130a", WGMMA) and supports("sm_130a", SETMAXNREG)
    with pytest.raises(ValueError, match="unknown target feature"):
        supports("sm_90a", "tcgen05")
    msg = unsupported_message(tilex.env.resolve_target("sm_120a"), WGMMA, "T.gemm(A, B, C)")
    assert "sm_120a" in msg and "wgmma" in msg and "T.gemm(A, B, C)" in msg
    assert set(FEATURES) >= set().union(*ARCH_FEATURES.values())


def test_gemm_without_mma_refused():
    with pytest.raises(TileOpError, match=r"T\.gemm.*needs mma\.sync.*sm_75"):
        _gemm_source("sm_75", "float16")


# ---- every arch: real matrix instructions, paths as the table allows ----------------------------------------------

def _sass(cubin):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(["cuobjdump", "-sass", f.name], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_gemm_matrix_instructions(arch, dtype):
    src = _gemm_source(arch, dtype)
    wgmma, ws = supports(arch, WGMMA), target_allows_warp_specialization(arch)
    # the CUDA: wgmma and the warp-specialized TMA pipeline only where the table has them
    assert ("tilex::wgmma_m64n" in src) == wgmma
    assert ("tilex::mma_m16n8k16" in src) == (not wgmma)
    assert ("tilex::tma_load_2d" in src) == ws and ("tilex::reg_alloc" in src) == ws
    assert ("tilex::cp_async<" in src) == (not ws)
    assert ("tilex::tma_store_2d" in src) == supports(arch, TMA_STORE)
    if not _nvcc_knows(arch):
        pytest.skip(f"this nvcc cannot compile for {arch}")
    ptx = nvcc.compile_cuda(src, arch, fmt="ptx").decode()
    assert "tilex_error_" not in ptx
    if wgmma:
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32", ptx)
    else:
        assert "mma.sync.aligned.m16n8k16.row.col.f32" in ptx and "wgmma.mma_async" not in ptx
    if shutil.which("cuobjdump") and shutil.which("nvdisasm"):
        sass = _sass(nvcc.compile_cuda(src, arch))
        assert ("HGMMA" in sass) if wgmma else ("HMMA.16816.F32" in sass and "HGMMA" not in sass)


@pytest.mark.parametrize("arch", ["sm_100a", "sm_120a"])
def test_blackwell_cubin_assembles(arch):
    """ptxas accepts the whole kernel (a wrapper without an implementation on the arch would stop it)."""
    if not _nvcc_knows(arch):
        pytest.skip(f"this nvcc cannot compile for {arch}")
    assert nvcc.compile_cuda(_gemm_source(arch, "bfloat16"), arch)


def test_header_wrappers_fail_loudly():
    """A wgmma / setmaxnreg / TMA wrapper used on an arch without the instruction is a compile error."""
    if not _nvcc_knows("sm_100a"):
        pytest.skip("this nvcc cannot compile for sm_100a")
    head = '#include "tilex/common.h"\nextern "C" __global__ void k(float* o) {\n'
    cases = [("sm_100a", "tilex::wgmma_m64n8k16_f16<0, 0>(o, 0, 0, 1);", "wgmma needs sm_90a"),
             ("sm_120a", "tilex::wgmma_fence();", "tilex_error_wgmma_requires_sm_90a"),
             ("sm_100", "tilex::reg_alloc<232>();", "setmaxnreg needs"),
             ("sm_80", "tilex::mbar_init(o, 1);", "tilex_error_tma_mbarrier_requires_sm_90")]
    for arch, call, message in cases:
        with pytest.raises(RuntimeError, match=message):
            nvcc.compile_cuda(head + call + "\n}\n", arch)
    for arch in ("sm_100a", "sm_120a"):  # available there
        assert nvcc.compile_cuda(head + "tilex::reg_alloc<232>(); tilex::mbar_init(o, 1);\n}\n", arch)


# ---- T.copy(..., disable_tma=True) ------------------------------------------------------------------------------

def _with_disable_tma(func, pick):
    """`func` with every tilex.copy call for which pick(CopyOp) holds carrying disable_tma."""
    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and c.op.name == "tilex.copy":
            op = CopyOp.from_call(c)
            if pick(op):
                return tirx.call_intrin("handle", "tilex.copy", c.args[0], c.args[1], c.args[2], 1)
        return c

    return func.with_body(map_nodes(func.body, (tvm.ir.Call, on_call)))


def test_copy_call_carries_disable_tma():
    A = tirx.decl_buffer((64, 64), "float16", "A")
    S = tirx.decl_buffer((64, 64), "float16", "S", scope="shared.dyn")
    plain, off = copy_call(A, S), copy_call(A, S, disable_tma=True)
    assert len(plain.args) == 3 and not CopyOp.from_call(plain).disable_tma  # existing programs unchanged
    assert CopyOp.from_call(off).disable_tma and not CopyOp.from_call(off).is_async
    assert CopyOp.from_call(copy_call(A, S, 1, disable_tma=True)).is_async
    store = CopyOp.from_call(copy_call(S, A, disable_tma=True))
    assert not store.tma_store_ok(tilex.env.resolve_target("sm_90a"))
    assert CopyOp.from_call(copy_call(S, A)).tma_store_ok(tilex.env.resolve_target("sm_90a"))


def _compile_src(func, arch="sm_90a"):
    return tilex.compile(func, out_idx=[2], target=arch).get_kernel_source()


def test_disable_tma_keeps_copies_off_tma():
    prog = matmul(512, 512, 512, bm=128, bn=128, bk=32, num_stages=3, threads=256, stage_c=True)
    src = _compile_src(prog)
    assert "tilex::tma_load_2d" in src and "tilex::tma_store_2d" in src
    # a global -> shared copy with disable_tma: no TMA load, the loop stays on the cp.async pipeline
    loads_off = _compile_src(_with_disable_tma(prog, lambda op: op.src.buffer.scope() == "global"))
    assert "tilex::tma_load_2d" not in loads_off and "tilex::cp_async<16>" in loads_off
    assert "tilex::reg_alloc" not in loads_off and "tilex::wgmma_m64n" in loads_off
    assert "tilex::tma_store_2d" in loads_off
    # the epilogue's shared -> global copy with disable_tma: no TMA store, the TMA loads stay
    store_off = _compile_src(_with_disable_tma(prog, lambda op: op.dst.buffer.scope() == "global"))
    assert "tilex::tma_store_2d" not in store_off and "tilex::tma_load_2d" in store_off
