"""Ahead-of-time export of a DynamicKernel: the directory format, written and read.

``DynamicKernel.export(path)`` (:func:`write`) makes a directory: one subdirectory per configuration the kernel
holds (``config<i>``, each a :func:`tilex.jit.export.export` of that JITKernel) and ``dynamic.json``: the dynamic
size's name and where each call reads it, the configurations, the dispatch table (``DispatchTable.to_json``) and
the launch shapes its wave models evaluate past the tabulated range (:meth:`LaunchShape.to_json`). :func:`read`
gives those parts back, loaded, for ``tilex.load`` (``tilex.autotuner.dispatch.load``) to assemble into a
DynamicKernel that picks the same configuration for every size, with no nvcc, kernel cache or tile program.
"""
from __future__ import annotations

import json
import os

from tilex.autotuner.launch_shape import LaunchShape
from tilex.jit import export as _export
from tilex.jit.kernel import load as load_kernel

__all__ = ["write", "read", "META_NAME"]

FORMAT = 1
META_NAME = "dynamic.json"


def _subdir(i):
    return f"config{i}"


def write(kernel, path) -> str:
    """Write `kernel` (a DynamicKernel) to the directory `path` (new, empty, or an earlier export it replaces:
    :func:`tilex.jit.export.write_directory`); returns the path."""

    def fill(tmp):
        for i, k in enumerate(kernel.kernels):
            if k is not None:
                _export.export(k, os.path.join(tmp, _subdir(i)))
        meta = {"format": FORMAT, "dim": kernel.dim, "source": list(kernel.source),
                "configs": [c if c is None else json.loads(json.dumps(c, default=repr)) for c in kernel.configs],
                "kernels": [k is not None for k in kernel.kernels], "table": kernel.table.to_json(),
                "shapes": [s.to_json() if s is not None else None for s in kernel.table.shapes]}
        with open(os.path.join(tmp, META_NAME), "w") as f:
            json.dump(meta, f, indent=1)

    return _export.write_directory(path, fill)


def read(path):
    """The parts of the DynamicKernel exported to the directory `path`, loaded: a dict with ``kernels`` (JITKernel
    or None per configuration), ``configs``, ``table`` (its JSON), ``shapes`` (LaunchShape or None) and
    ``source`` ((input position, axis) of the dynamic size); None when `path` holds no DynamicKernel export."""
    path = os.path.abspath(os.fspath(path))
    meta_path = os.path.join(path, META_NAME)
    if not os.path.isfile(meta_path):
        return None
    with open(meta_path) as f:
        meta = json.load(f)
    if meta.get("format") != FORMAT:
        raise _export.ExportError(f"tilex.load: {path} has dynamic export format {meta.get('format')!r}; this "
                                  f"tilex reads format {FORMAT}")
    return {"kernels": [load_kernel(os.path.join(path, _subdir(i))) if present else None
                        for i, present in enumerate(meta["kernels"])],
            "configs": meta["configs"], "table": meta["table"],
            "shapes": [LaunchShape.from_json(s) if s is not None else None for s in meta["shapes"]],
            "source": tuple(meta["source"])}
