import os
import stat

import pytest
import torch
import tvm

from tilex import env


@pytest.fixture(autouse=True)
def _fresh_nvcc_cache():
    env.find_nvcc.cache_clear()
    yield
    env.find_nvcc.cache_clear()


def _fake_nvcc(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho fake\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _isolate(monkeypatch, tmp_path):
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(env, "_site_dirs", lambda: [str(tmp_path / "site")])
    monkeypatch.setattr(env, "DEFAULT_NVCC_PATHS", [str(tmp_path / "nowhere" / "nvcc")])


def test_find_nvcc_real():
    path = env.find_nvcc()
    assert os.path.isfile(path) and os.access(path, os.X_OK)


def test_find_nvcc_path_first(monkeypatch, tmp_path):
    _isolate(monkeypatch, tmp_path)
    on_path = _fake_nvcc(str(tmp_path / "p" / "nvcc"))
    _fake_nvcc(str(tmp_path / "cuda" / "bin" / "nvcc"))
    monkeypatch.setenv("PATH", str(tmp_path / "p"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert env.find_nvcc() == on_path


def test_find_nvcc_cuda_home(monkeypatch, tmp_path):
    _isolate(monkeypatch, tmp_path)
    want = _fake_nvcc(str(tmp_path / "cuda" / "bin" / "nvcc"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert env.find_nvcc() == want


def test_find_nvcc_pip_wheel(monkeypatch, tmp_path):
    _isolate(monkeypatch, tmp_path)
    want = _fake_nvcc(str(tmp_path / "site" / "nvidia" / "cuda_nvcc" / "bin" / "nvcc"))
    assert env.find_nvcc() == want


def test_find_nvcc_missing_lists_places(monkeypatch, tmp_path):
    _isolate(monkeypatch, tmp_path)
    with pytest.raises(env.NvccNotFoundError) as ei:
        env.find_nvcc()
    msg = str(ei.value)
    assert "PATH" in msg and "$CUDA_HOME" in msg and "cuda_nvcc" in msg and "nowhere" in msg


def test_include_dir_checkout():
    d = env.include_dir()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(env.__file__)))
    assert d in (os.path.join(repo, "src"), os.path.join(repo, "tilex", "_src")), d


def test_include_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEX_INCLUDE_DIR", str(tmp_path))
    assert env.include_dir() == str(tmp_path)


@pytest.mark.parametrize("cap,arch", [((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 6), "sm_86"),
                                      ((8, 9), "sm_89"), ((10, 0), "sm_100a"), ((10, 3), "sm_103a"),
                                      ((12, 0), "sm_120a"), ((7, 5), "sm_75")])
def test_detect_arch(monkeypatch, cap, arch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: cap)
    assert env.detect_arch() == arch
    assert env.resolve_target("auto").attrs["arch"] == arch


def test_detect_arch_no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError):
        env.detect_arch()
    # codegen-only default
    assert env.resolve_target("auto").attrs["arch"] == env.DEFAULT_ARCH == "sm_90a"
    assert env.resolve_target("cuda").attrs["arch"] == "sm_90a"
    assert env.resolve_target(None).attrs["arch"] == "sm_90a"


def test_resolve_target_forms(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for spec, arch in [("sm_80", "sm_80"), ("sm_90a", "sm_90a"), ("90a", "sm_90a"), ("compute_100a", "sm_100a"),
                       ({"kind": "cuda", "arch": "sm_89"}, "sm_89"), ({"kind": "cuda"}, "sm_90a")]:
        t = env.resolve_target(spec)
        assert t.kind.name == "cuda" and t.attrs["arch"] == arch, spec
    t = tvm.target.Target({"kind": "cuda", "arch": "sm_86"})
    assert env.resolve_target(t) is t
    assert env.resolve_target("nvidia/nvidia-h100").attrs["arch"] == "sm_90a"
    with pytest.raises(TypeError):
        env.resolve_target(3.5)
    assert env.resolve_target("cuda -arch=sm_90a").attrs["arch"] == "sm_90a"
    assert env.resolve_target("cuda  -arch=sm_80").attrs["arch"] == "sm_80"
    with pytest.raises(ValueError, match="cannot read target 'cuda -mcpu'"):
        env.resolve_target("cuda -mcpu")
    with pytest.raises(ValueError, match="cannot read target 'llvm -mcpu=x'"):
        env.resolve_target("llvm -mcpu=x")


def test_normalize_arch_rejects_garbage():
    with pytest.raises(ValueError):
        env.normalize_arch("hopper")
