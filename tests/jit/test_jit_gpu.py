"""End-to-end JITKernel tests on a real GPU (skipped without one)."""
import json
import os
import subprocess
import sys

import pytest
import torch

import tilex
from tilex.jit import cache

import jit_kernels

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def test_vec_add_end_to_end():
    k = tilex.compile(jit_kernels.vec_add(4096), out_idx=-1)
    a = torch.randn(4096, device="cuda")
    b = torch.randn(4096, device="cuda")
    c = k(a, b)
    assert isinstance(c, torch.Tensor) and c.shape == (4096,) and c.dtype == torch.float32 and c.device == a.device
    torch.testing.assert_close(c, a + b)
    # explicit output instead of an allocated one
    k2 = tilex.compile(jit_kernels.vec_add(4096))
    out = torch.zeros_like(a)
    assert k2(a, b, out) is None
    torch.testing.assert_close(out, a + b)


def test_symbolic_shape_and_scalar():
    k = tilex.compile(jit_kernels.scale_sym(), out_idx=1)
    for m in (1, 37, 256):
        a = torch.randn(m, 8, device="cuda")
        b = k(a, 2.5)
        assert b.shape == (m, 8)
        torch.testing.assert_close(b, a * 2.5)


def test_multiple_outputs_tuple():
    k = tilex.compile(jit_kernels.vec_add(1024), out_idx=[2, 0])
    b = torch.randn(1024, device="cuda")
    c, a = k(b)
    assert c.shape == a.shape == (1024,)


def test_errors_on_gpu_tensors():
    k = tilex.compile(jit_kernels.vec_add(1024), out_idx=-1)
    a = torch.randn(1024, device="cuda")
    with pytest.raises(TypeError, match="argument 'B' .* expected dtype float32"):
        k(a, a.half())
    with pytest.raises(ValueError, match="argument 'B' .* expected a CUDA tensor"):
        k(a, a.cpu())


def test_fast_path_errors_name_the_argument():
    """Calls skip the Python checks when the arguments are right; wrong ones still get the checker's message
    (TVM's host code refuses them first, or the fast path's alignment check does)."""
    k = tilex.compile(jit_kernels.vec_add(1024), out_idx=-1)
    a = torch.randn(1024, device="cuda")
    base = torch.randn(1025, device="cuda")
    with pytest.raises(ValueError, match="argument 'A' .* not 16-byte aligned"):
        k(base[1:], a)
    with pytest.raises(ValueError, match="argument 'B' .* expected a contiguous tensor"):
        k(a, torch.randn(2048, device="cuda")[::2])
    with pytest.raises(TypeError, match="takes 2 argument"):
        k(a)
    ks = tilex.compile(jit_kernels.scale_sym(), out_idx=1)
    assert ks(torch.randn(0, 8, device="cuda"), 1.0).shape == (0, 8)  # an empty M launches nothing
    with pytest.raises(TypeError, match="argument 'alpha' .* expected a Python float"):
        ks(torch.randn(4, 8, device="cuda"), "2")


def _produce_late(x, s):
    """On stream s: sleep ~0.1 s of GPU time, then compute x * 3 (so it is written late)."""
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)
        return x * 3.0


def test_current_stream():
    """The kernel must run on torch's current stream. Its input is produced on a side stream after a long
    GPU sleep; a launch on any other stream would read it before it is written. (torch's pool streams are
    non-blocking, so not even the legacy default stream waits for them.)"""
    n = 1 << 20
    k = tilex.compile(jit_kernels.vec_add(n), out_idx=-1)
    b = torch.randn(n, device="cuda")
    k(b, b)  # warm up: the first call loads the CUDA module, which synchronizes the device
    torch.cuda.synchronize()
    for _ in range(3):
        x = torch.randn(n, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        a = _produce_late(x, s)
        with torch.cuda.stream(s):
            c = k(a, b)
        s.synchronize()  # only the side stream
        torch.testing.assert_close(c, x * 3.0 + b)
    torch.cuda.synchronize()


_SCRIPT = r"""
import json, sys
import tilex
from tilex.jit import cache
from tilex.engine import nvcc
import jit_kernels
import torch
k = tilex.compile(jit_kernels.vec_add(2048), out_idx=-1)
a = torch.ones(2048, device="cuda"); b = torch.full((2048,), 2.0, device="cuda")
ok = bool((k(a, b) == 3).all().item())
print(json.dumps({"from_cache": k.from_cache, "stats": cache.stats, "nvcc_runs": nvcc.compile_count(),
                  "ok": ok, "path": k.cache_path}))
"""


def test_cache_hit_in_new_process(tmp_path):
    env = dict(os.environ)
    env["TILEX_CACHE_DIR"] = str(tmp_path / "cache")
    env.pop("TILEX_DISABLE_CACHE", None)
    env["PYTHONPATH"] = os.pathsep.join([HERE, REPO, env.get("PYTHONPATH", "")])

    def run():
        out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-4000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    assert first["ok"] and not first["from_cache"] and first["stats"]["writes"] == 1 and first["nvcc_runs"] >= 1
    second = run()
    assert second["ok"] and second["from_cache"] and second["stats"]["hits"] == 1
    assert second["nvcc_runs"] == 0
    assert second["path"] == first["path"]


def test_cache_disabled_recompiles(monkeypatch):
    cache.disable()
    try:
        k = tilex.compile(jit_kernels.vec_add(1024), out_idx=-1)
        assert not k.from_cache and k.cache_path is None
    finally:
        cache.reset()
