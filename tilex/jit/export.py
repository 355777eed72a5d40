"""Ahead-of-time export of a compiled kernel, and loading it back without compiling.

``JITKernel.export(path)`` writes a directory: ``kernel.so`` (TVM's host code with the CUDA module, whose cubin
is inside when the kernel was built on a GPU machine or loaded from the kernel cache), ``kernel.cu`` (the CUDA
source, for reading) and ``kernel.json`` (what a call needs to be checked: each parameter's name, dtype, shape
with its symbolic sizes, strides, which parameters are outputs; the target, ptxas's resource report and the
versions it was built with). ``tilex.load`` (:func:`tilex.jit.kernel.load`, over :func:`read`) turns such a
directory into a JITKernel whose calls are checked exactly as the original's, in a process with no nvcc and an
empty kernel cache.

The parameters travel as JSON, not as TVM IR: a stand-in PrimFunc with the same parameters and an empty body
is rebuilt from them (the program itself is not needed to call the library).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

__all__ = ["export", "read", "params_json", "stand_in_func", "write_directory", "is_tilex_export", "ExportError",
           "FORMAT"]

FORMAT = 1
LIB_NAME = "kernel.so"
SRC_NAME = "kernel.cu"
META_NAME = "kernel.json"


class ExportError(RuntimeError):
    """A kernel cannot be exported, or an exported directory cannot be loaded."""


def _dims_json(checker, dims):
    if dims is None:
        return None
    out = []
    for d in dims:
        if d is None:
            out.append(None)
        elif isinstance(d, tuple):
            out.append({"sym": d[1]})
        else:
            out.append(int(d))
    return out


def params_json(checker) -> dict:
    """The parameters of `checker` (an :class:`~tilex.jit.args.ArgChecker`) as JSON: symbolic sizes by slot
    (name and dtype), then each parameter."""
    slots = [{"name": v.name, "dtype": str(v.ty.dtype)} for v in checker._slots]
    params = []
    for s in checker.params:
        entry = {"name": s.name, "kind": s.kind, "dtype": s.dtype}
        if s.kind == "buffer":
            entry["shape"] = _dims_json(checker, s.shape)
            entry["strides"] = _dims_json(checker, s.strides)
        else:
            entry["slot"] = s.shape[0][1]
        params.append(entry)
    return {"slots": slots, "params": params, "out_idx": list(checker.out_idx), "symbol": checker.func_name}


def stand_in_func(meta: dict):
    """A PrimFunc with the parameters `meta` (:func:`params_json`) describes and an empty body."""
    from tvm import tirx

    slots = [tirx.Var(s["name"], s["dtype"]) for s in meta["slots"]]
    fresh = 0

    def dims(ds):
        nonlocal fresh
        out = []
        for d in ds:
            if d is None:  # an expression of the original program: unchecked here, as there
                fresh += 1
                out.append(tirx.Var(f"_expr{fresh}", "int64"))
            elif isinstance(d, dict):
                out.append(slots[d["sym"]])
            else:
                out.append(int(d))
        return out

    params = []
    for p in meta["params"]:
        if p["kind"] == "buffer":
            strides = dims(p["strides"]) if p.get("strides") else None
            params.append(tirx.decl_buffer(dims(p["shape"]), p["dtype"], p["name"], strides=strides))
        else:
            params.append(slots[p["slot"]])
    return tirx.PrimFunc(params, tirx.Evaluate(0)).with_attr("global_symbol", meta["symbol"])


def export(kernel, path) -> str:
    """Write `kernel` (a JITKernel) to the directory `path` (new, empty, or an earlier export it replaces:
    :func:`write_directory`); returns the path."""
    import tvm

    _refuse_foreign(os.path.abspath(os.fspath(path)))
    if not kernel.has_binary:
        raise ExportError(
            "kernel.export: this kernel has no compiled binary to export. It was built on a machine without a "
            "GPU, where TVM's CUDA module holds only the CUDA source; compile it on a GPU machine (or load it "
            "from a kernel cache written there) and export it there")

    def fill(tmp):
        kernel.export_library(os.path.join(tmp, LIB_NAME))
        with open(os.path.join(tmp, SRC_NAME), "w") as f:
            f.write(kernel.get_kernel_source() or "")
        meta = dict(params_json(kernel._checker), format=FORMAT, target=str(kernel.target),
                    tilex=sys.modules["tilex"].__version__, tvm=tvm.__version__,
                    resources=kernel.resources.to_json() if kernel.resources is not None else None)
        with open(os.path.join(tmp, META_NAME), "w") as f:
            json.dump(meta, f, indent=1)

    return write_directory(path, fill)


MANIFEST_NAME = ".tilex-export.json"


def _walk_entries(root):
    """Every file, directory and link under `root` (links not followed), as sorted paths relative to it;
    directories end in "/"."""
    out = []
    for dirpath, dirnames, files in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in list(dirnames):
            if os.path.islink(os.path.join(dirpath, name)):
                files.append(name)  # a link to a directory is an entry, never a directory to walk
                dirnames.remove(name)
        out += [os.path.relpath(os.path.join(dirpath, n), root) + "/" for n in dirnames]
        out += [os.path.relpath(os.path.join(dirpath, n), root) for n in files]
    return sorted(out)


def _write_manifest(tmp):
    entries = [e for e in _walk_entries(tmp) if e != MANIFEST_NAME]
    with open(os.path.join(tmp, MANIFEST_NAME), "w") as f:
        json.dump({"tilex_export": FORMAT, "entries": entries}, f, indent=1)


def is_tilex_export(path) -> bool:
    """Whether the directory `path` is one :func:`write_directory` wrote and nobody has added to since: its
    manifest names every file and directory under it (an entry tilex did not write there means the directory is
    not ours to replace)."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    try:
        with open(os.path.join(path, MANIFEST_NAME)) as f:
            manifest = json.load(f)
        listed = set(manifest["entries"]) | {MANIFEST_NAME}
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(isinstance(n, str) for n in listed) and set(_walk_entries(path)) <= listed


def _refuse_foreign(path, what="kernel.export"):
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        raise ExportError(f"{what}: {path} exists and is not a directory; an export goes to a new or empty "
                          "directory, or replaces one tilex exported")
    if os.path.isdir(path) and os.listdir(path) and not is_tilex_export(path):
        raise ExportError(f"{what}: {path} is not empty and is not a directory tilex exported (or files were "
                          "added to it since); refusing to replace it. Export to a new or empty directory, or "
                          "remove this one yourself")


def write_directory(path, fill) -> str:
    """Write the directory `path` with what ``fill(tmp)`` writes into a temporary sibling directory, renamed
    into place only when it returns (a failed export leaves no half-written directory); returns the absolute
    path. `path` may be new, an empty directory, or a directory an earlier export wrote and nobody added to
    (:func:`is_tilex_export`); anything else is refused with an :class:`ExportError` before anything is written,
    so an export never deletes what tilex did not write."""
    path = os.path.abspath(os.fspath(path))
    _refuse_foreign(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tilex-export-", dir=parent)
    try:
        fill(tmp)
        _write_manifest(tmp)
        _refuse_foreign(path)  # again: the directory may have changed while fill ran
        old = None
        if os.path.isdir(path):
            if os.listdir(path):
                old = tempfile.mkdtemp(prefix=".tilex-replaced-", dir=parent)
                os.rename(path, os.path.join(old, "x"))
                if not is_tilex_export(os.path.join(old, "x")):  # changed between the check and the move
                    os.rename(os.path.join(old, "x"), path)
                    os.rmdir(old)
                    _refuse_foreign(path)
                    raise ExportError(f"kernel.export: {path} changed while it was being replaced; nothing "
                                      "was written")
            else:
                os.rmdir(path)
        os.rename(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)  # the earlier export, checked to hold only what tilex wrote
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read(path) -> dict:
    """The metadata of the exported directory `path` (checked: an export of this format, built with this TVM), with
    ``"lib"`` and ``"source"`` added (the library's path, the CUDA source)."""
    import tvm

    path = os.path.abspath(os.fspath(path))
    meta_path = os.path.join(path, META_NAME)
    if not os.path.isfile(meta_path):
        raise ExportError(f"tilex.load: {path} is not an exported kernel (no {META_NAME}; write one with "
                          "kernel.export(path))")
    with open(meta_path) as f:
        meta = json.load(f)
    if meta.get("format") != FORMAT:
        raise ExportError(f"tilex.load: {path} has export format {meta.get('format')!r}; this tilex reads "
                          f"format {FORMAT}")
    if meta.get("tvm") != tvm.__version__:
        raise ExportError(f"tilex.load: {path} was built with TVM {meta.get('tvm')}, this process has TVM "
                          f"{tvm.__version__}; export it again with this version")
    src_path = os.path.join(path, SRC_NAME)
    meta["source"] = open(src_path).read() if os.path.isfile(src_path) else ""
    meta["lib"] = os.path.join(path, LIB_NAME)
    return meta
