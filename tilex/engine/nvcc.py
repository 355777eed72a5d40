"""nvcc driver and the TVM CUDA hooks.

On import this module registers (once, overriding TVM's defaults):

* ``tvm_callback_cuda_compile(code)`` -- TVM calls it to turn generated CUDA C++ into a binary, at build
  time when the CUDA runtime is loaded (GPU machine) or when a source-only module is loaded later.
  We compile with nvcc to a cubin for the arch of ``tvm.target.Target.current()`` (else the detected GPU,
  else :data:`tilex.env.DEFAULT_ARCH`), with ``-I <tilex include dir>`` and the extra flags of the tilex options in
  effect (:func:`option_flags`: ``compile_flags=``, TileLang's ``tl.device_compile_flags`` / ``tl.enable_fast_math``
  / ``tl.ptxas_register_usage_level``).
* ``tvm_callback_cuda_postproc(code, target)`` -- runs at codegen time; prepends
  ``#include "tilex/common.h"`` when that header exists and the code does not include it yet, applies the
  launch markers of warp-specialized kernels to ``__launch_bounds__`` / ``__cluster_dims__`` and aligns dynamic
  shared memory to 1024 bytes, and writes the CUDA text of the program's ``T.import_source`` calls before the
  first kernel. Each edit of TVM's text raises TilexCompileError when the text it edits is not
  there in the form TVM 0.27 writes it (rather than silently leaving the kernel without it). Then the user's
  post-processor, if one is registered (:mod:`tilex.engine.callback`), edits the result.

Every cubin / fatbin compilation passes ``--resource-usage`` so that ptxas reports each kernel's registers,
spills, stack frame and shared memory. :func:`capture` collects what :func:`compile_cuda` ran in this thread
(one :class:`NvccRun` per nvcc invocation, with its output), which is how ``tilex.compile`` gets ptxas's
report from the compile hook that TVM calls in the middle of ``tvm.compile``. :func:`nvcc_version` is the
release line of ``nvcc --version`` (part of the kernel cache key).
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import tvm  # noqa: F401 - TVM's own CUDA callbacks are registered first, then overridden here
import tvm_ffi

from tilex import config, env
from tilex.engine import callback
from tilex.ir import intrin

__all__ = ["TilexCompileError", "compile_cuda", "nvcc_command", "register_hooks", "compile_count",
           "COMMON_HEADER", "NvccRun", "capture", "nvcc_version", "nvcc_available", "RESOURCE_FLAGS", "option_flags"]

COMMON_HEADER = "tilex/common.h"

#: Flags always passed to nvcc (no --use_fast_math: correctness first; add it via ``options`` (a kernel's
#: ``compile_flags``, ``tl.enable_fast_math``) or ``$TILEX_NVCC_FLAGS`` if wanted).
BASE_FLAGS = (
    "-O3",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "-lineinfo",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
)

#: Flags added to cubin / fatbin compilations (not to ptx, where ptxas does not run): ptxas's per-kernel report
#: of registers, spills, stack frame and shared memory (it does not change the binary).
RESOURCE_FLAGS = ("--resource-usage",)

_MAX_ERROR_LINES = 60
_lock = threading.Lock()
_compile_count = 0


class TilexCompileError(RuntimeError):
    """nvcc failed. ``.command``, ``.stderr`` and ``.source_path`` (the kept .cu file) are attached."""

    def __init__(self, message: str, command: Sequence[str] = (), stderr: str = "", source_path: str = ""):
        super().__init__(message)
        self.command = list(command)
        self.stderr = stderr
        self.source_path = source_path


def first_error_line(text: str) -> str:
    """nvcc's or ptxas's first error line in `text` (``error``/``fatal``, without the temporary file's path in
    front), or "" when there is none: warnings about unused helpers often come first."""
    for ln in text.splitlines():
        low = ln.lower()
        if "error" in low or "fatal" in low:
            ln = ln.strip()
            return "error" + ln.split(": error", 1)[1] if ": error" in ln else ln
    return ""


def compile_count() -> int:
    """How many times nvcc was run through :func:`compile_cuda` in this process."""
    return _compile_count


@dataclass(frozen=True)
class NvccRun:
    """One successful :func:`compile_cuda` call: ``arch``, ``fmt``, ``output`` (nvcc's stdout and stderr,
    ptxas's ``--resource-usage`` report included), ``binary`` (the cubin / ptx / fatbin bytes), ``command`` (the
    nvcc command line, temporary paths included)."""

    arch: str
    fmt: str
    output: str
    binary: bytes
    command: tuple = ()


_capture_state = threading.local()


@contextmanager
def capture() -> Iterator[list]:
    """Collect the :class:`NvccRun` of every :func:`compile_cuda` call made in this thread inside the block
    (nested captures each get them)::

        with nvcc.capture() as runs:
            tvm.compile(...)            # TVM calls tvm_callback_cuda_compile -> compile_cuda
        runs[0].output                  # ptxas's resource report
    """
    runs: list = []
    stack = getattr(_capture_state, "stack", None)
    if stack is None:
        stack = _capture_state.stack = []
    stack.append(runs)
    try:
        yield runs
    finally:  # by identity: list.remove would take the first *equal* list, another block's
        del stack[next(i for i, r in enumerate(stack) if r is runs)]


def _record(run: NvccRun) -> None:
    for runs in getattr(_capture_state, "stack", ()):
        runs.append(run)


_version_lock = threading.Lock()
_version: dict = {}


def nvcc_version() -> str:
    """The release line of ``nvcc --version`` (e.g. ``"Cuda compilation tools, release 13.0, V13.0.88"``),
    run once per process and nvcc path; ``""`` when nvcc cannot be found or run."""
    try:
        path = env.find_nvcc()
    except env.NvccNotFoundError:
        return ""
    with _version_lock:
        if path not in _version:
            try:
                out = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, timeout=60).stdout
            except (OSError, subprocess.SubprocessError):
                out = ""
            lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
            release = [ln for ln in lines if "release" in ln]
            _version[path] = release[0] if release else (lines[-1] if lines else "")
        return _version[path]


def nvcc_available() -> bool:
    """Whether :func:`tilex.env.find_nvcc` finds nvcc."""
    try:
        env.find_nvcc()
    except env.NvccNotFoundError:
        return False
    return True


def _gencode(arch: str) -> list[str]:
    sm = env.normalize_arch(arch)  # sm_90a
    num = sm[3:]
    return ["-gencode", f"arch=compute_{num},code=sm_{num}"]


def nvcc_command(src: str, out: str, arch: str, options: Sequence[str] | None = None,
                 fmt: str = "cubin") -> list[str]:
    """The nvcc command line used for ``src`` -> ``out``."""
    cmd = [env.find_nvcc(), f"--{fmt}", *_gencode(arch), *BASE_FLAGS, f"-I{env.include_dir()}"]
    extra = os.environ.get("TILEX_NVCC_FLAGS")
    if extra:
        cmd += shlex.split(extra)
    if fmt != "ptx":
        cmd += list(RESOURCE_FLAGS)
    if options:
        cmd += list(options)
    cmd += ["-o", out, src]
    return cmd


def compile_cuda(source: str, arch: str, options: Sequence[str] | None = None, fmt: str = "cubin",
                 dump_dir: str | None = None) -> bytes:
    """Compile CUDA C++ ``source`` with nvcc for ``arch`` (``"sm_90a"``, ``"sm_80"``, ...).

    Returns the cubin (or ptx/fatbin for ``fmt``) bytes. On failure raises :class:`TilexCompileError`
    with the command, the first 60 lines of nvcc's output, and the path of the kept ``.cu`` file. ``options`` are
    extra nvcc flags (after tilex's own). ``$TILEX_DUMP_DIR``, if set, receives a copy of every compiled source, and
    ``dump_dir`` (a kernel's ``tilex.kernels_output_dir``) a copy of this one. Each success is handed, with nvcc's
    output (ptxas's resource report), to the :func:`capture` blocks open in this thread.
    """
    global _compile_count
    if fmt not in ("cubin", "ptx", "fatbin"):
        raise ValueError(f"compile_cuda: unsupported fmt {fmt!r}")
    tmp = tempfile.mkdtemp(prefix="tilex_nvcc_")
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    src = os.path.join(tmp, f"kernel_{digest}.cu")
    out = os.path.join(tmp, f"kernel_{digest}.{fmt}")
    with open(src, "w") as f:
        f.write(source)
    for dump in dict.fromkeys(d for d in (os.environ.get("TILEX_DUMP_DIR"), dump_dir) if d):
        os.makedirs(dump, exist_ok=True)
        shutil.copy(src, os.path.join(dump, os.path.basename(src)))
    cmd = nvcc_command(src, out, arch, options, fmt)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        raise TilexCompileError(f"tilex: could not run nvcc: {e}\ncommand: {shlex.join(cmd)}\n"
                                f"source kept at: {src}", cmd, str(e), src) from None
    with _lock:
        _compile_count += 1
    if proc.returncode != 0 or not os.path.exists(out):
        lines = proc.stdout.splitlines()
        shown = "\n".join(lines[:_MAX_ERROR_LINES])
        more = f"\n... ({len(lines) - _MAX_ERROR_LINES} more lines)" if len(lines) > _MAX_ERROR_LINES else ""
        first = first_error_line(proc.stdout)
        raise TilexCompileError(
            f"tilex: nvcc failed (exit code {proc.returncode}) for {arch}{': ' + first if first else ''}\n"
            f"command: {shlex.join(cmd)}\n"
            f"source kept at: {src}\n"
            f"--- nvcc output ---\n{shown}{more}",
            cmd, proc.stdout, src,
        )
    with open(out, "rb") as f:
        data = f.read()
    shutil.rmtree(tmp, ignore_errors=True)
    _record(NvccRun(env.normalize_arch(arch), fmt, proc.stdout, data, tuple(cmd)))
    return data


def option_flags(options: dict | None = None) -> list[str]:
    """The extra nvcc flags that tilex options ask for (``device_compile_flags``, already checked by
    ``tilex.config.split``); `options` defaults to the options in effect (``tilex.config.current()``)."""
    opts = config.current() if options is None else options
    return list(opts.get(config.DEVICE_COMPILE_FLAGS) or ())


def _current_arch() -> str:
    tgt = tvm.target.Target.current(allow_none=True)
    if tgt is not None and str(tgt.kind.name) == "cuda":
        return env.target_arch(tgt)
    return env.target_arch(None)


_hook_state = threading.local()


def _cuda_compile_hook(code, *_unused):
    # TVM's C++ side calls this with one argument today; accept extra ones for forward compatibility.
    _hook_state.error = None
    try:
        return compile_cuda(str(code), _current_arch(), option_flags(), dump_dir=config.get("kernels_output_dir"))
    except TilexCompileError as e:
        # tvm_ffi turns an exception raised in a callback into a plain RuntimeError: keep the original for
        # `take_hook_error`, so that the engine can give the user the TilexCompileError itself
        _hook_state.error = e
        raise


def take_hook_error() -> TilexCompileError | None:
    """The TilexCompileError the CUDA compile callback raised last in this thread (once), if any."""
    err = getattr(_hook_state, "error", None)
    _hook_state.error = None
    return err


def add_common_include(code: str) -> str:
    """Prepend ``#include "tilex/common.h"`` when the header exists and ``code`` lacks it."""
    if COMMON_HEADER in code:
        return code
    if not os.path.isfile(os.path.join(env.include_dir(), COMMON_HEADER)):
        return code
    return f'#include "{COMMON_HEADER}"\n' + code


def cap_registers_for_setmaxnreg(code: str) -> str:
    """Warp-specialized kernels rebalance registers with setmaxnreg, which ptxas honours only when the kernel has
    a register cap at entry: give their launch bounds the blocks-per-multiprocessor minimum WarpSpecialize
    planned its register split for (its ``min_blocks_per_sm`` launch marker; 1 without one), and the cluster
    shape of a kernel with a ``cluster_dims`` marker."""
    if intrin.REG_ALLOC not in code:
        return code
    blocks = intrin.read_launch_marker(code, intrin.MIN_BLOCKS_PER_SM) or 1
    cluster = intrin.read_launch_marker(code, intrin.CLUSTER_DIMS)
    prefix = f"__cluster_dims__({cluster}, 1, 1) " if cluster else ""
    out, at, found = [], 0, 0
    while True:
        start = code.find(_LAUNCH_BOUNDS, at)
        if start < 0:
            break
        end = code.find(")", start)
        threads = code[start + len(_LAUNCH_BOUNDS):end]
        if threads.isdigit():
            out += [code[at:start], f"{prefix}{_LAUNCH_BOUNDS}{threads}, {blocks})"]
            found += 1
        else:
            out.append(code[at:end + 1])
        at = end + 1
    if not found:
        raise TilexCompileError("tilex: TVM's CUDA code has no `__launch_bounds__(N)` for the warp-specialized "
                                "kernel; the register plan of its setmaxnreg split cannot be applied")
    return "".join(out) + code[at:]


def apply_launch_annotations(code: str) -> str:
    """What the program asked of its kernel's signature: a ``min_blocks_hint`` marker
    (T.annotate_min_blocks_per_sm) becomes the minimum of ``__launch_bounds__`` -- unless the kernel is
    warp-specialized, where the register plan's minimum (:func:`cap_registers_for_setmaxnreg`) stands -- and the
    parameters a ``may_alias`` marker names (T.annotate_restrict_buffers) lose ``__restrict__``."""
    blocks = intrin.read_launch_marker(code, intrin.MIN_BLOCKS_HINT)
    if blocks is not None and intrin.REG_ALLOC not in code:
        bounds = re.compile(re.escape(_LAUNCH_BOUNDS) + r"(\d+)\)")
        code, found = bounds.subn(lambda m: f"{_LAUNCH_BOUNDS}{m.group(1)}, {blocks})", code)
        if not found:
            raise TilexCompileError("tilex: TVM's CUDA code has no `__launch_bounds__(N)` to give the minimum of "
                                    "T.annotate_min_blocks_per_sm")
    names = intrin.read_may_alias(code)
    if names:
        lines = code.split("\n")
        for name in dict.fromkeys(names):
            restrict = re.compile(r"__restrict__\s+" + re.escape(name) + r"\b")
            hits = 0
            for i, line in enumerate(lines):
                if "__global__" in line:
                    lines[i], n = restrict.subn(name, line)
                    hits += n
            if not hits:
                raise TilexCompileError(f"tilex: T.annotate_restrict_buffers names `{name}`, which is not a "
                                        f"`__restrict__` parameter of the kernel in TVM's CUDA code")
        code = "\n".join(lines)
    return code


_LAUNCH_BOUNDS = "__launch_bounds__("
_DYNAMIC_SHARED_AS_TVM_WRITES = "extern __shared__ __align__(64) uchar buf_dyn_shmem_ptr[];"
_DYNAMIC_SHARED_ALIGNED = "extern __shared__ __align__(1024) uchar buf_dyn_shmem_ptr[];"
_SINGLE_DYNAMIC_TILE = re.compile(r"extern __shared__ __align__\(64\) (\w+ \w+_ptr)\[\];")


def align_dynamic_shared(code: str) -> str:
    """Start dynamic shared memory on a 1024-byte boundary. The hardware swizzles of TMA and wgmma are functions of
    the absolute shared address (the pattern repeats every 1024 bytes), while threads that write a swizzled tile
    (cp.async, st.shared before a TMA store) compute it from the buffer start: the two agree only when the
    buffer starts on such a boundary, which static shared memory (mbarriers) placed first would break."""
    if "buf_dyn_shmem_ptr[]" in code and _DYNAMIC_SHARED_AS_TVM_WRITES not in code:
        raise TilexCompileError("tilex: TVM declared dynamic shared memory in an unexpected form (not `"
                                f"{_DYNAMIC_SHARED_AS_TVM_WRITES}`); it cannot be aligned to 1024 bytes")
    # a kernel with a single dynamic tile gets it declared by its own name and type (`half S_ptr[]`)
    code = _SINGLE_DYNAMIC_TILE.sub(r"extern __shared__ __align__(1024) \1[];", code)
    return code.replace(_DYNAMIC_SHARED_AS_TVM_WRITES, _DYNAMIC_SHARED_ALIGNED)


_FIRST_KERNEL = re.compile(r'^extern "C" __global__ ', re.M)


def insert_imported_sources(code: str) -> str:
    """The CUDA texts of the program's ``T.import_source`` / ``T.Kernel(prelude=)`` (their :func:`intrin.import_source`
    markers, taken out of the kernel bodies) written once each, in program order, just before the first kernel:
    after the includes and the type helpers TVM writes, so the device functions they define can use those and
    the kernels can call them."""
    try:
        code, sources = intrin.read_imported_sources(code)
    except ValueError as e:
        raise TilexCompileError(f"tilex: T.import_source: {e} in TVM's CUDA code") from None
    if not sources:
        return code
    first = _FIRST_KERNEL.search(code)
    if first is None:
        raise TilexCompileError("tilex: T.import_source: TVM's CUDA code has no `extern \"C\" __global__` kernel "
                                "to write the imported source before")
    imported = "".join(f"// T.import_source\n{src}{'' if src.endswith(chr(10)) else chr(10)}" for src in sources)
    return code[:first.start()] + imported + code[first.start():]


def _cuda_postproc_hook(code, target=None, *_unused):
    code = align_dynamic_shared(apply_launch_annotations(cap_registers_for_setmaxnreg(add_common_include(str(code)))))
    code = insert_imported_sources(code)
    return callback.apply_cuda_postproc(code, target)  # the user's edits (register_cuda_postproc), last


_registered = False


def register_hooks(force: bool = False) -> None:
    """Register the TVM CUDA callbacks (idempotent; ``force`` re-registers, e.g. after someone else
    overrode them)."""
    global _registered
    if _registered and not force:
        return
    tvm_ffi.register_global_func("tvm_callback_cuda_compile", _cuda_compile_hook, override=True)
    tvm_ffi.register_global_func("tvm_callback_cuda_postproc", _cuda_postproc_hook, override=True)
    _registered = True


register_hooks()
