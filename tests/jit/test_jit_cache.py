import os

import numpy as np
import pytest
import torch
import tvm
from tvm.script import tirx as T

import tilex
from tilex.jit import cache

import jit_kernels

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


@pytest.fixture
def cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEX_DISABLE_CACHE", raising=False)
    cache.reset()
    yield tmp_path / "cache"
    cache.reset()


def test_key_stable():
    k1 = cache.make_key(jit_kernels.vec_add(1024), [2], SM90, {"a": 1, "b": 2})
    k2 = cache.make_key(jit_kernels.vec_add(1024), [2], SM90, {"b": 2, "a": 1})
    assert k1 == k2 and len(k1) == 64


def test_key_changes():
    f = jit_kernels.vec_add(1024)
    base = cache.make_key(f, [2], SM90, None)
    assert cache.make_key(f, [0], SM90, None) != base
    assert cache.make_key(f, [2], SM90, {"tirx.disable_vectorize": True}) != base
    assert cache.make_key(f, [2], tvm.target.Target({"kind": "cuda", "arch": "sm_80"}), None) != base
    assert cache.make_key(jit_kernels.vec_add(2048), [2], SM90, None) != base
    assert cache.make_key(jit_kernels.vec_add(1024, "float16"), [2], SM90, None) != base


def test_key_depends_on_headers(monkeypatch, tmp_path):
    inc = tmp_path / "inc"
    (inc / "tilex").mkdir(parents=True)
    h = inc / "tilex" / "common.h"
    h.write_text("// v1\n")
    monkeypatch.setenv("TILEX_INCLUDE_DIR", str(inc))
    f = jit_kernels.vec_add(1024)
    k1 = cache.make_key(f, [2], SM90, None)
    h.write_text("// v2\n")
    assert cache.make_key(f, [2], SM90, None) != k1


def test_enable_disable(monkeypatch, cache_dir):
    assert cache.enabled()
    monkeypatch.setenv("TILEX_DISABLE_CACHE", "1")
    assert not cache.enabled()
    cache.enable()
    assert cache.enabled()
    cache.disable()
    assert not cache.enabled()
    cache.reset()
    monkeypatch.setenv("TILEX_DISABLE_CACHE", "0")
    assert cache.enabled()


@T.prim_func
def _cpu_add_one(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    T.func_attr({"global_symbol": "cpu_add_one"})
    for i in range(8):
        B[i] = A[i] + T.float32(1)


def test_save_load_roundtrip(cache_dir):
    """Store/load mechanics with a host (llvm) executable: export_library, atomic rename, load_module."""
    ex = tvm.compile(tvm.IRModule({"main": _cpu_add_one}), target="llvm")
    key = "ab" + "0" * 62
    before = dict(cache.stats)
    path = cache.save(key, ex, "// source", {"symbol": "cpu_add_one"})
    assert path is not None and os.path.isdir(path)
    assert sorted(os.listdir(path)) == sorted([cache.LIB_NAME, cache.SRC_NAME, cache.META_NAME])
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".tmp")]
    assert cache.stats["writes"] == before["writes"] + 1
    entry = cache.load(key)
    assert entry is not None and entry.source == "// source" and entry.meta["symbol"] == "cpu_add_one"
    assert cache.stats["hits"] == before["hits"] + 1
    a = torch.arange(8, dtype=torch.float32)
    b = torch.zeros(8)
    entry.module["cpu_add_one"](a, b)
    np.testing.assert_allclose(b.numpy(), a.numpy() + 1)
    # saving again is a no-op; a miss returns None
    assert cache.save(key, ex, "// other") == path
    assert cache.load("cd" + "1" * 62) is None


def test_disabled_cache_does_nothing(cache_dir):
    ex = tvm.compile(tvm.IRModule({"main": _cpu_add_one}), target="llvm")
    cache.disable()
    assert cache.save("ef" + "2" * 62, ex, "") is None
    assert cache.load("ef" + "2" * 62) is None
    assert not cache_dir.exists()


def test_corrupt_entry_is_a_miss(cache_dir):
    key = "aa" + "3" * 62
    d = cache_dir / key[:2] / key
    d.mkdir(parents=True)
    (d / cache.META_NAME).write_text("{}")
    (d / cache.LIB_NAME).write_text("not a library")
    assert cache.load(key) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_cpu_machine_writes_no_cuda_entry(cache_dir):
    before = cache.stats["skipped"]
    k = tilex.compile(jit_kernels.vec_add(256), out_idx=-1, target="sm_90a")
    assert not k.from_cache and k.cache_path is None
    assert cache.stats["skipped"] == before + 1
    assert not cache_dir.exists() or not any(cache_dir.rglob(cache.META_NAME))


def test_clear_removes_cache_entries_and_nothing_else(cache_dir):
    """TILEX_CACHE_DIR may name a directory that holds more than tilex's cache: clear() removes kernel entries,
    their temporaries and ptxas reports, and leaves every other file and directory where it was."""
    root = cache.cache_dir()
    key = "ab" + "0" * 62
    entry = os.path.join(root, key[:2], key)
    os.makedirs(entry)
    open(os.path.join(entry, cache.META_NAME), "w").close()
    os.makedirs(os.path.join(root, "ab", ".tmp-abcdef-x"))
    cache.save_ptxas_report(key, [])
    assert os.path.isfile(os.path.join(root, cache.PTXAS_DIR, "ab", key + ".json"))
    keep = [os.path.join(root, "notes.txt"), os.path.join(root, "src", "main.py"),
            os.path.join(root, "cd", "mine.txt"), os.path.join(root, cache.PTXAS_DIR, "readme")]
    for path in keep:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("user data")
    cache.clear()
    assert not os.path.exists(os.path.join(root, "ab"))
    assert not os.path.exists(os.path.join(root, cache.PTXAS_DIR, "ab"))
    assert all(open(p).read() == "user data" for p in keep)
