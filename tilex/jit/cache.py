"""On-disk kernel cache.

Layout: ``<cache dir>/<key[:2]>/<key>/{kernel.so, kernel.cu, meta.json}`` where the cache dir is
``$TILEX_CACHE_DIR`` or ``~/.cache/tilex``. An entry is written into a temporary directory and then
renamed into place, so readers never see half-written entries.

The key is the sha256 of the program text (``func.script()``), out_idx, the target, the pass configs,
the tilex / TVM / nvcc versions (``nvcc --version``'s release line: ptxas bugs are version-specific), the nvcc
flags and the contents of every header in :func:`tilex.env.include_dir`. ``meta.json`` holds ptxas's resource
report (``"resources"``, see :mod:`tilex.jit.resources`), so kernels loaded from the cache have it too.

Only modules that hold a **compiled binary** are cached. On a GPU machine TVM compiles CUDA eagerly at
build time through ``tvm_callback_cuda_compile``, so the exported library contains the cubin. On a
CPU-only machine the CUDA module only holds source (compilation would happen when it is loaded on a
GPU), so no kernel entry is written there; ``tilex.compile`` still runs nvcc on the source to check it, and
keeps ptxas's report in ``<cache dir>/ptxas/<key[:2]>/<key>.json`` (:func:`save_ptxas_report`), so compiling
the same kernel again on that machine skips nvcc.

Disable with ``TILEX_DISABLE_CACHE=1`` or :func:`disable`; it is also off while a CUDA post-processor is registered
(:mod:`tilex.engine.callback`).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from typing import Any

from tilex import config, env
from tilex.engine import callback, nvcc
from tilex.ir.hardware import num_sms

__all__ = ["cache_dir", "enabled", "enable", "disable", "make_key", "save", "load", "clear", "stats",
           "CacheEntry", "load_ptxas_report", "save_ptxas_report"]

logger = logging.getLogger("tilex.jit.cache")

#: Counters for this process (``hits``, ``misses``, ``writes``, ``skipped``, ``errors``).
stats: dict[str, int] = {"hits": 0, "misses": 0, "writes": 0, "skipped": 0, "errors": 0}

_enabled_override: bool | None = None

LIB_NAME = "kernel.so"
SRC_NAME = "kernel.cu"
META_NAME = "meta.json"
FORMAT_VERSION = 2  # 2: meta.json holds "resources"; the key holds the nvcc version
PTXAS_DIR = "ptxas"


def cache_dir() -> str:
    d = os.environ.get("TILEX_CACHE_DIR")
    if not d:
        d = os.path.join(os.path.expanduser("~"), ".cache", "tilex")
    return d


def enabled() -> bool:
    """Whether kernels are cached: off while a CUDA post-processor is registered (its edits are not in the key),
    else as :func:`enable` / :func:`disable` / ``TILEX_DISABLE_CACHE`` say."""
    if callback.cuda_postproc() is not None:
        return False
    if _enabled_override is not None:
        return _enabled_override
    return os.environ.get("TILEX_DISABLE_CACHE", "").strip().lower() not in ("1", "true", "yes", "on")


def enable() -> None:
    """Enable the cache for this process (overrides ``TILEX_DISABLE_CACHE``)."""
    global _enabled_override
    _enabled_override = True


def disable() -> None:
    """Disable the cache for this process."""
    global _enabled_override
    _enabled_override = False


def reset() -> None:
    """Forget :func:`enable`/:func:`disable`; go back to the environment variable."""
    global _enabled_override
    _enabled_override = None


def _files_digest(root: str, rels) -> str:
    """sha256 over (relative path, content digest) of each file, in the given order."""
    h = hashlib.sha256()
    for rel in rels:
        h.update(rel.encode() + b"\0")
        with open(os.path.join(root, rel), "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _headers_digest() -> str:
    return _files_digest(env.include_dir(), env.header_files())


@functools.lru_cache(maxsize=None)
def _package_digest() -> str:
    """Digest of tilex's own Python sources: a changed pass must not be answered with an old kernel."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rels = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        rels += [os.path.relpath(os.path.join(dirpath, n), root) for n in sorted(files) if n.endswith(".py")]
    return _files_digest(root, rels)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    return str(obj)


def _script(func) -> str:
    try:
        return func.script()
    except Exception:  # printing can fail on exotic IR; structural hash is a stable fallback
        import tvm_ffi

        return "structural_hash:" + str(tvm_ffi.structural_hash(func))


def _num_sms(target):
    try:
        return num_sms(env.target_arch(target))
    except Exception:  # noqa: BLE001 - a target without an arch
        return None


def make_key(func, out_idx, target, pass_configs) -> str:
    """Cache key (hex sha256) of a compilation request. ``pass_configs`` count with their keys as strings (a
    ``tilex.PassConfigKey`` member and its string are one key); a kernel's ``compile_flags`` are in them
    (``tilex.device_compile_flags``, see ``tilex.config.with_compile_flags``)."""
    import tvm

    payload = {
        "format": FORMAT_VERSION,
        "program": _script(func),
        "out_idx": _jsonable(out_idx),
        "target": str(target),
        "pass_configs": _jsonable(config.plain(pass_configs)),
        "tilex": sys.modules["tilex"].__version__,  # the loaded package's (the package face sits above jit)
        "tvm": tvm.__version__,
        "nvcc": nvcc.nvcc_version(),  # cached per process; "" without nvcc
        "nvcc_flags": list(nvcc.BASE_FLAGS) + [os.environ.get("TILEX_NVCC_FLAGS", "")],
        "headers": _headers_digest(),
        "sources": _package_digest(),
        "num_sms": _num_sms(target),  # persistent grids are sized for the device
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _entry_dir(key: str) -> str:
    return os.path.join(cache_dir(), key[:2], key)


class CacheEntry:
    """A loaded cache entry: ``module`` (tvm runtime module), ``source`` (CUDA), ``meta`` (dict)."""

    def __init__(self, module, source: str, meta: dict, path: str):
        self.module = module
        self.source = source
        self.meta = meta
        self.path = path


def load(key: str) -> CacheEntry | None:
    """Load an entry; ``None`` on a miss, when disabled, or when the entry is unreadable."""
    if not enabled():
        return None
    path = _entry_dir(key)
    meta_path = os.path.join(path, META_NAME)
    if not os.path.isfile(meta_path):
        stats["misses"] += 1
        return None
    try:
        import tvm

        with open(meta_path) as f:
            meta = json.load(f)
        src_path = os.path.join(path, SRC_NAME)
        source = open(src_path).read() if os.path.isfile(src_path) else ""
        module = tvm.runtime.load_module(os.path.join(path, LIB_NAME))
    except Exception as e:  # corrupt / incompatible entry: treat as a miss
        logger.warning("tilex cache: could not load %s (%s); recompiling", path, e)
        stats["errors"] += 1
        stats["misses"] += 1
        return None
    stats["hits"] += 1
    logger.debug("tilex cache: hit %s", path)
    return CacheEntry(module, source, meta, path)


def save(key: str, executable, source: str, meta: dict | None = None) -> str | None:
    """Export ``executable`` (``tvm.runtime.Executable`` or a runtime module with ``export_library``)
    into the cache. Returns the entry path, or ``None`` when disabled or on failure (a warning is logged;
    caching is never fatal)."""
    if not enabled():
        return None
    final = _entry_dir(key)
    if os.path.isfile(os.path.join(final, META_NAME)):
        return final
    parent = os.path.dirname(final)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".tmp-{key[:8]}-", dir=parent)
    except OSError as e:
        logger.warning("tilex cache: cannot create %s (%s)", parent, e)
        stats["errors"] += 1
        return None
    try:
        executable.export_library(os.path.join(tmp, LIB_NAME))
        with open(os.path.join(tmp, SRC_NAME), "w") as f:
            f.write(source or "")
        with open(os.path.join(tmp, META_NAME), "w") as f:
            json.dump(_jsonable(dict(meta or {}, key=key, format=FORMAT_VERSION)), f, indent=1)
        try:
            os.rename(tmp, final)
        except OSError:
            # somebody else won the race (final exists and is non-empty): keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.isfile(os.path.join(final, META_NAME)):
                raise
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)
        logger.warning("tilex cache: could not write entry %s (%s)", final, e)
        stats["errors"] += 1
        return None
    stats["writes"] += 1
    return final


def _ptxas_path(key: str) -> str:
    return os.path.join(cache_dir(), PTXAS_DIR, key[:2], f"{key}.json")


def load_ptxas_report(key: str):
    """ptxas's report (``KernelResources.to_json()``) stored for the kernel ``key`` by a machine without a GPU,
    or ``None`` (miss, disabled, unreadable)."""
    if not enabled():
        return None
    try:
        with open(_ptxas_path(key)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("resources"), list):
        return None
    return data["resources"]


def save_ptxas_report(key: str, resources: list) -> None:
    """Store ptxas's report for the kernel ``key`` (written to a temporary file, then renamed; never fatal)."""
    if not enabled():
        return
    path = _ptxas_path(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "format": FORMAT_VERSION, "resources": _jsonable(resources)}, f)
        os.replace(tmp, path)
    except OSError as e:
        logger.warning("tilex cache: could not write %s (%s)", path, e)
        stats["errors"] += 1


_HEX = frozenset("0123456789abcdef")


def _is_key(name: str, length: int) -> bool:
    return len(name) == length and set(name) <= _HEX


def clear() -> None:
    """Remove every entry of the cache directory, and nothing else: kernel entries (``<2 hex>/<64 hex>/``),
    their half-written temporaries (``<2 hex>/.tmp-*``) and ptxas reports (``ptxas/<2 hex>/<64 hex>.json``),
    then the fan-out directories they leave empty. Whatever else the directory holds (``TILEX_CACHE_DIR`` may
    name a directory that is not only tilex's) stays."""
    d = cache_dir()
    if os.path.islink(d) or not os.path.isdir(d):
        return
    for fan in os.listdir(d):
        fan_path = os.path.join(d, fan)
        if os.path.islink(fan_path) or not os.path.isdir(fan_path):
            continue
        if _is_key(fan, 2):
            for name in os.listdir(fan_path):
                entry = os.path.join(fan_path, name)
                if os.path.islink(entry) or not os.path.isdir(entry):
                    continue
                if (_is_key(name, 64) and name.startswith(fan)) or name.startswith(".tmp-"):
                    shutil.rmtree(entry, ignore_errors=True)
        elif fan == PTXAS_DIR:
            for sub in os.listdir(fan_path):
                sub_path = os.path.join(fan_path, sub)
                if not _is_key(sub, 2) or os.path.islink(sub_path) or not os.path.isdir(sub_path):
                    continue
                for name in os.listdir(sub_path):
                    stem, _, ext = name.partition(".")
                    report = os.path.join(sub_path, name)
                    if os.path.islink(report) or not os.path.isfile(report):
                        continue
                    if (_is_key(stem, 64) and ext == "json") or name.startswith(".tmp-"):
                        os.remove(report)
                _remove_if_empty(sub_path)
        else:
            continue
        _remove_if_empty(fan_path)


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
