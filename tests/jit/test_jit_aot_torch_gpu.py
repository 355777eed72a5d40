"""On the GPU: an exported kernel loaded in a fresh process with nvcc hidden and an empty cache; kernels as
PyTorch operators under torch.compile(fullgraph=True), CUDA-graph capture and torch.library.opcheck."""
import itertools
import os

import pytest
import torch

import tilex
import tilex.language as T
from tilex.kernels.gemm import matmul

import op_programs
from isolated import run_without_nvcc

pytestmark = pytest.mark.gpu

_names = itertools.count()


def _gemm(n=256, k=256):
    return tilex.compile(matmul(T.dynamic("m"), n, k), out_idx=-1)


def _scale():
    return tilex.compile(op_programs.scale_rows(cols=256), out_idx=-1)


def test_export_then_load_in_a_process_without_nvcc(tmp_path):
    gemm, scale = _gemm(), _scale()
    assert gemm.has_binary and scale.has_binary
    gemm.export(tmp_path / "gemm")
    scale.export(tmp_path / "scale")
    assert sorted(os.listdir(tmp_path / "gemm")) == [".tilex-export.json", "kernel.cu", "kernel.json", "kernel.so"]
    script = f"""
        import torch
        gemm = tilex.load({str(tmp_path / "gemm")!r})
        scale = tilex.load({str(tmp_path / "scale")!r})
        b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
        for m in (1, 7, 129, 300):
            a = torch.randn(m, 256, device="cuda", dtype=torch.float16)
            c = scale(gemm(a, b), 0.5)
            torch.testing.assert_close(c, (a.float() @ b.float() * 0.5).half(), rtol=2e-2, atol=2e-2)
        try:
            gemm(a.float(), b)
        except TypeError as e:
            assert "argument 'A'" in str(e) and "float16" in str(e), e
        else:
            raise AssertionError("a float32 A was accepted")
        try:
            gemm(a, b[:128])
        except ValueError as e:
            assert "argument 'B'" in str(e), e
        else:
            raise AssertionError("a B of the wrong shape was accepted")
        assert not os.listdir(os.environ["TILEX_CACHE_DIR"])
        print("LOADED OK")
    """
    r = run_without_nvcc(script, tmp_path)
    assert r.returncode == 0 and "LOADED OK" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


def test_torch_compile_full_graph_of_two_ops():
    gemm = _gemm().to_torch_op(f"gpu_gemm_{next(_names)}")
    scale = _scale().to_torch_op(f"gpu_scale_{next(_names)}")

    def f(a, b):
        return scale(gemm(a, b), 0.5) + 1

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    for m in (1, 37, 300):
        a = torch.randn(m, 256, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(compiled(a, b), f(a, b))
        torch.testing.assert_close(f(a, b), (a.float() @ b.float() * 0.5 + 1).half(), rtol=2e-2, atol=2e-2)


def test_cuda_graph_replay():
    gemm, scale = _gemm(), _scale()
    a = torch.randn(200, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up (first calls load the module) off the capture
        scale(gemm(a, b), 2.0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = scale(gemm(a, b), 2.0)
    for _ in range(3):
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, (a.float() @ b.float() * 2).half(), rtol=2e-2, atol=4e-2)


def test_opcheck():
    op = _scale().to_torch_op(f"gpu_opcheck_{next(_names)}")
    a = torch.randn(37, 256, device="cuda", dtype=torch.float16)
    torch.library.opcheck(op, (a, 0.5))
    add = tilex.compile(op_programs.add_into()).to_torch_op(f"gpu_add_{next(_names)}", mutates_args=["Y"])
    x, y = torch.randn(33, 64, device="cuda"), torch.randn(33, 64, device="cuda")
    want = x + y
    add(x, y)
    torch.testing.assert_close(y, want)
    torch.library.opcheck(add, (x, y.clone()))
