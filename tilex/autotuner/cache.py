"""On-disk cache of autotuning results: the best configuration per tuning problem.

One JSON file per problem under ``$TILEX_CACHE_DIR/autotune/`` (default ``~/.cache/tilex/autotune/``), named by
the key: the sha256 of the factory's module and qualname, the hash of the factory's source code, the factory
arguments, the program text (``PrimFunc.script()``) the factory builds for the first configuration, the
configuration list, the compile arguments (out_idx, target, pass configs), the device name, and the tilex
and TVM versions. The entry stores the best configuration's *index* in the configuration list (the list is
part of the key), so a hit returns the caller's own config object, tuples and all.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import time
from typing import Any

__all__ = ["autotune_cache_dir", "clear_cache", "stable_repr", "make_key", "load", "save", "UnstableKeyError"]

logger = logging.getLogger("tilex.autotuner")

FORMAT_VERSION = 1
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class UnstableKeyError(ValueError):
    """A factory argument or configuration value has no representation that is stable across processes."""


def autotune_cache_dir() -> str:
    base = os.environ.get("TILEX_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tilex")
    return os.path.join(base, "autotune")


def clear_cache() -> None:
    """Remove every cached autotuning result (the compiled-kernel cache is left alone)."""
    d = autotune_cache_dir()
    if not os.path.isdir(d):
        return
    for name in os.listdir(d):
        if name.endswith(".json"):
            try:
                os.remove(os.path.join(d, name))
            except OSError:
                pass


def stable_repr(obj: Any) -> Any:
    """A JSON-able value that is equal across processes exactly when ``obj`` is (tuples and lists kept apart).
    Raises :class:`UnstableKeyError` for objects whose only representation is their address."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return {"float": repr(obj)}
    if isinstance(obj, (list, tuple)):
        return {type(obj).__name__: [stable_repr(v) for v in obj]}
    if isinstance(obj, dict):
        return {"dict": [[stable_repr(k), stable_repr(v)] for k, v in
                         sorted(obj.items(), key=lambda kv: json.dumps(stable_repr(kv[0]), sort_keys=True))]}
    if isinstance(obj, (set, frozenset)):
        return {"set": sorted((stable_repr(v) for v in obj), key=lambda v: json.dumps(v, sort_keys=True))}
    mod = getattr(type(obj), "__module__", "")
    if mod.startswith("torch") and type(obj).__name__ in ("dtype", "device"):
        return {"torch": str(obj)}
    if callable(obj) and hasattr(obj, "__qualname__") and hasattr(obj, "__module__"):
        return {"callable": f"{obj.__module__}.{obj.__qualname__}"}
    text = repr(obj)
    if _ADDRESS.search(text):
        raise UnstableKeyError(f"{type(obj).__name__} value {text} has no stable representation")
    return {type(obj).__qualname__: text}


def make_key(payload: dict) -> str:
    blob = json.dumps(stable_repr(payload), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _path(key: str) -> str:
    return os.path.join(autotune_cache_dir(), f"{key}.json")


def load(key: str) -> dict | None:
    """The stored entry for ``key`` or ``None`` (missing or unreadable)."""
    path = _path(key)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            entry = json.load(f)
    except (OSError, ValueError) as e:
        logger.warning("tilex autotune cache: cannot read %s (%s); tuning again", path, e)
        return None
    if entry.get("format") != FORMAT_VERSION or entry.get("key") != key:
        return None
    entry["path"] = path
    return entry


def save(key: str, entry: dict) -> str | None:
    """Write ``entry`` atomically (temporary file + rename); returns the path, ``None`` on failure."""
    d = autotune_cache_dir()
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{key[:8]}-", suffix=".json", dir=d)
        with os.fdopen(fd, "w") as f:
            json.dump(dict(entry, key=key, format=FORMAT_VERSION, created=time.time()), f, indent=1, default=str)
        os.replace(tmp, _path(key))
    except OSError as e:
        logger.warning("tilex autotune cache: cannot write %s (%s)", _path(key), e)
        return None
    return _path(key)
