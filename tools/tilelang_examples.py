"""Run TileLang's own example programs under tilex, with only their imports changed.

    python tools/tilelang_examples.py <TileLang checkout> [--jobs N] [--timeout S] [--only SUBSTR] [--cpu|--gpu]
        [--json FILE]
    python tools/tilelang_examples.py --report FILE    # the timing lines each passing example printed

`<TileLang checkout>` is a directory holding TileLang's ``examples/`` (fetch github tile-ai/tilelang when you
measure; its examples are never copied into this repository). Every Hopper-applicable example program is run in
a process of its own in which ``import tilelang`` (and every ``tilelang.<sub>``) gives ``tilex`` (and
``tilex.<sub>``) through an import hook: nothing in the example is edited.

What "an example" is and how it runs:
- a ``.py`` file under ``examples/`` that defines ``main`` or runs as a script (``if __name__ == "__main__"``),
  that imports tilelang, outside the folders and files written for other hardware (AMD, sm100 / sm120,
  Trainium), visualization tools and model-level scripts (``SKIP_DIRS`` / ``SKIP_MARKS``); helper modules (no
  ``main``, no script guard) and programs of other systems (Triton's, not importing tilelang) are not examples;
- its check is what TileLang's own test file in the same folder runs (the first ``<module>.main(...)`` call with
  literal arguments found in a ``test_*.py``); without one, the file runs as ``__main__`` with no arguments.

On a GPU machine (``--gpu``, the default when torch sees a GPU) the example runs for real: OK when it returns,
FAIL when its check raises AssertionError (a wrong answer), ERROR otherwise. On a machine without a GPU
(``--cpu``) torch's CUDA tensors are made on the CPU, torch.cuda's streams and devices do nothing, tilex's and
Triton's timers call their function once and answer 1 ms, Triton kernels (a reference's) launch nothing, torch's
and tilex's comparison helpers check nothing, and every tilex kernel call returns stand-in outputs (floating-point
ones, integer zeros) without launching, so the example goes on and compiles every kernel it builds; the line says COMPILED when it ran to its end or to its check (whose
AssertionError on stand-ins is expected), ERROR when anything before that failed.
REFUSED marks an example stopped by something tilex says it does not do (NotImplementedError) and MISSING one
that needs a Python package the machine lacks. The last lines are the counts.

Side by side (``--jobs`` > 1): on the GPU, the examples' timers take turns (a lock in a private temporary folder:
one example times while the others compile and check), so the times they print are not taken on a GPU another
example is loading; ``--json`` keeps those lines per example ("timings"). An example that ran out of memory, was
killed or ran out of time beside the others is run again alone after them (its line then says "alone:").
"""
from __future__ import annotations

import argparse
import ast
import concurrent.futures as cf
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

#: folders under examples/ written for other hardware or that are not kernel programs
SKIP_DIRS = {"amd", "aws", "deepseek_v32/inference", "flash_attention_sm100", "blockscaled_gemm_sm100", "gemm_sm120", "gemm_tcgen05",
             "plot_layout", "visual_layout_inference", "analyze", "autodd", "iket", "bitnet-1.58b"}
#: single files written for other hardware
SKIP_MARKS = ("sm100", "sm120", "_amd", "amd_", "tcgen5", "cdna")

ALIAS, TARGET = "tilelang", "tilex"
#: lines of an example's output that report a time or a rate (kept in --json's "timings")
TIMING_WORDS = re.compile(r"(latency|\bms\b|tflops|gb/s|speed ?up|_time|time:|elapsed)", re.IGNORECASE)


# --------------------------------------------------------------------------------------------------------------
# discovery


def _has_main_or_guard(tree):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            return True
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
    return False


def _imports_tilelang(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == ALIAS for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == ALIAS:
            return True
    return False


def _test_calls(folder):
    """{module name: (args, kwargs)} of the first ``<module>.main(...)`` call with literal arguments in the
    folder's test files."""
    calls = {}
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        try:
            tree = ast.parse(open(os.path.join(folder, name)).read())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "main"
                    and isinstance(node.func.value, ast.Name)):
                continue
            try:
                args = [ast.literal_eval(a) for a in node.args]
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
            except ValueError:
                continue
            calls.setdefault(node.func.value.id, (args, kwargs))
    return calls


def discover(root):
    """The example programs under ``<root>/examples`` as dicts: path, module, folder, args, kwargs, how."""
    base = os.path.join(root, "examples")
    if not os.path.isdir(base):
        raise SystemExit(f"{root} has no examples/ folder (give the path of a TileLang checkout)")
    found = []
    for dirpath, dirnames, files in os.walk(base):
        rel = os.path.relpath(dirpath, base)
        top = rel.split(os.sep)[0]
        parts = [] if rel == "." else rel.split(os.sep)
        if top in SKIP_DIRS or rel in SKIP_DIRS or any(part.startswith(".") or part == "__pycache__" for part in parts):
            dirnames[:] = []
            continue
        dirnames.sort()
        calls = _test_calls(dirpath)
        for name in sorted(files):
            if not name.endswith(".py") or name.startswith(("test_", "regression_")) or name == "conftest.py":
                continue
            if any(m in name for m in SKIP_MARKS):
                continue
            path = os.path.join(dirpath, name)
            try:
                tree = ast.parse(open(path).read())
            except (SyntaxError, UnicodeDecodeError):
                continue
            if not _has_main_or_guard(tree) or not _imports_tilelang(tree):
                continue
            module = name[:-3]
            args, kwargs = calls.get(module, ([], {}))
            has_main = any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
            how = "main" if module in calls and has_main else "script"
            found.append({"path": path, "name": os.path.relpath(path, base), "module": module, "folder": dirpath,
                          "args": args, "kwargs": kwargs, "how": how})
    return found


# --------------------------------------------------------------------------------------------------------------
# the import alias


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass


class TilelangAlias(importlib.abc.MetaPathFinder):
    """``tilelang`` and ``tilelang.<sub>`` resolve to ``tilex`` and ``tilex.<sub>`` (the same module objects)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        real = TARGET + fullname[len(ALIAS):]
        if importlib.util.find_spec(real) is None:
            return None  # ModuleNotFoundError names tilelang.<sub>: tilex has no such module
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real), is_package=True)


def install_alias():
    if not any(isinstance(f, TilelangAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, TilelangAlias())


#: a folder holding a ``tilelang`` package that installs the alias: on PYTHONPATH of every example process, so that
#: the processes an example starts (the autotuner's compile workers run its script again) import tilex as well
ALIAS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tilelang_alias")


# --------------------------------------------------------------------------------------------------------------
# running without a GPU


class _CompiledOnly:
    """State of a CPU run: kernels compiled, kernel calls answered with zeros."""
    kernels = 0
    calls = 0


def _cpu_torch():
    """torch's CUDA tensors made on the CPU, and the torch.cuda calls examples make answered as a GPU would."""
    import torch
    from torch.overrides import TorchFunctionMode

    def fix(dev):
        if isinstance(dev, torch.device) and dev.type == "cuda":
            return torch.device("cpu")
        if isinstance(dev, str) and dev.startswith("cuda"):
            return "cpu"
        if isinstance(dev, int) and not isinstance(dev, bool):
            return "cpu"
        return dev

    class CudaOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = fix(kwargs["device"])
            name = getattr(func, "__name__", "")
            if name == "cuda":
                return args[0]
            if name == "to":
                args = tuple(fix(a) if isinstance(a, (str, torch.device)) else a for a in args)
            if name == "pin_memory":
                return args[0]
            return func(*args, **kwargs)

    CudaOnCpu().__enter__()

    class _Event:
        def __init__(self, *a, **k):
            self.t = 0.0

        def record(self, *a, **k):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    cuda = torch.cuda
    cuda.synchronize = lambda *a, **k: None
    cuda.Event = _Event
    cuda.manual_seed = lambda *a, **k: None
    cuda.manual_seed_all = lambda *a, **k: None
    cuda.get_device_capability = lambda *a, **k: (9, 0)
    cuda.current_device = lambda: 0
    cuda.device_count = lambda: 1
    cuda.get_device_name = lambda *a, **k: "NVIDIA H100 (compile only, no GPU)"

    class _Properties:  # an H100's, for programs that size their grids by the device
        name = "NVIDIA H100 (compile only, no GPU)"
        major, minor = 9, 0
        multi_processor_count = 132
        total_memory = 80 * 2**30
        shared_memory_per_block_optin = 232448
        max_threads_per_multi_processor = 2048
        L2_cache_size = 50 * 2**20
        warp_size = 32

    cuda.get_device_properties = lambda *a, **k: _Properties()

    class _Stream:  # torch.cuda.Stream(), torch.cuda.stream(s), torch.cuda.device(i): everything on the one CPU
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            pass

        def wait_stream(self, *a, **k):
            pass

        def record_event(self, *a, **k):
            return _Event()

    cuda.Stream = _Stream
    cuda.stream = _Stream
    cuda.device = _Stream
    if not hasattr(torch.cpu, "device"):  # FLA, falling back to the CPU, opens torch.<its device>.device(i)
        torch.cpu.device = _Stream
    cuda.current_stream = lambda *a, **k: _Stream()
    cuda.default_stream = lambda *a, **k: _Stream()
    cuda.empty_cache = lambda: None
    cuda.set_device = lambda *a, **k: None
    cuda.is_available = lambda: True  # examples that refuse to run without CUDA go on to compile
    torch.Tensor.cuda = lambda self, *a, **k: self
    real_generator = torch.Generator

    class _Generator:  # torch.Generator(device="cuda") gives a CPU generator
        def __new__(cls, device="cpu"):
            return real_generator(device=fix(device))

    torch.Generator = _Generator


def _cpu_kernels():
    """tilex kernel calls return outputs filled with ones (integers: zeros) instead of launching (the kernel has compiled
    by then). A floating-point tensor argument that is all zeros is taken for an output the caller allocated (the
    kernel would write it) and filled with ones too: checks that divide by its norm go on to their comparison."""
    import torch
    from tilex.jit import kernel as kernel_mod

    def call(self, *args, **kwargs):
        _CompiledOnly.calls += 1
        outs = []
        checker = self._checker
        given = list(args)
        sizes = {}
        # bind symbolic sizes from the given tensors (by parameter position, outputs excluded)
        inputs = [s for s in checker.params if not s.is_output]
        for value in given:
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() \
                    and not bool(value.any()):
                value.fill_(1)
        for spec, value in zip(inputs, given):
            if spec.kind == "buffer" and isinstance(value, torch.Tensor) and spec.shape:
                for d, n in zip(spec.shape, value.shape):
                    if isinstance(d, tuple):
                        sizes[d[1]] = int(n)
        for spec in checker.params:
            if not spec.is_output:
                continue
            shape = []
            for d in spec.shape or ():
                shape.append(sizes.get(d[1], 1) if isinstance(d, tuple) else (1 if d is None else int(d)))
            dtype = spec.torch_dtype or torch.float32
            # ones, not zeros: checks that divide by an output's norm go on to their comparison
            outs.append(torch.ones(shape, dtype=dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype))
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    kernel_mod.JITKernel.__call__ = call


#: Triton's timers (``triton.testing``)
TRITON_TIMERS = ("do_bench", "do_bench_cudagraph")


def _tilex_timer_modules():
    """The modules whose ``do_bench`` tilex's timers call, the timing core first: tilex.jit.bench (which
    ``tilelang.profiler.do_bench`` calls), the kernel profiler, the autotuner's bench and the autotuner."""
    from tilex import autotuner
    from tilex.autotuner import bench as abench
    from tilex.jit import bench as jbench
    from tilex.jit import profiler as jprofiler

    return jbench, jprofiler, abench, autotuner


def _one_call(fn, *args, quantiles=None, **kwargs):
    """A timer without a GPU: calls `fn` once and answers 1 ms (one per quantile asked)."""
    fn()
    return [1.0] * len(quantiles) if quantiles else 1.0


def _cpu_timing():
    """tilex's timers (``do_bench`` and the kernel profiler's) call the function once and answer a 1 ms stand-in:
    without a GPU nothing can be timed, and timing an example's torch reference on the CPU again and again only
    costs minutes."""
    for module in _tilex_timer_modules():
        if hasattr(module, "do_bench"):
            module.do_bench = _one_call


#: the environment variable naming the lock file that makes examples run side by side time one at a time
GPU_LOCK_ENV = "TILEX_EXAMPLES_TIMING_LOCK"


def _serialized_timing(lock_path):
    """Timers hold an exclusive lock on `lock_path` while they time (tilex's core ``do_bench``, which
    ``tilelang.profiler.do_bench``, the kernel profiler and the autotuner use, and Triton's ``do_bench`` /
    ``do_bench_cudagraph``): examples run side by side compile and check in parallel, but only one times at a
    time, so their own ratios (and their autotuners' choices) are not measured on a GPU another example is
    loading. A nested timer keeps the lock it holds; the lock goes with the process that holds it."""
    import fcntl
    import functools
    import threading

    modules = _tilex_timer_modules()
    fd = os.open(lock_path, os.O_RDWR)
    state = threading.local()
    guard = threading.Lock()  # one thread of this process at a time takes the file lock

    def locked(timer):
        @functools.wraps(timer)
        def timed(*args, **kwargs):
            depth = getattr(state, "depth", 0)
            if depth == 0:
                guard.acquire()
                fcntl.flock(fd, fcntl.LOCK_EX)
            state.depth = depth + 1
            try:
                return timer(*args, **kwargs)
            finally:
                state.depth = depth
                if depth == 0:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    guard.release()
        return timed

    core = modules[0].do_bench
    timed_core = locked(core)
    for module in modules:
        if getattr(module, "do_bench", None) is core:
            module.do_bench = timed_core
    try:
        import triton.testing as triton_testing
    except ImportError:
        return
    for name in TRITON_TIMERS:
        if hasattr(triton_testing, name):
            setattr(triton_testing, name, locked(getattr(triton_testing, name)))


def _cpu_triton():
    """Triton kernels (an example's reference: FLA's, its own) launch nothing and Triton's timers call their function
    once and answer 1 ms: without a GPU they cannot run, and the tilex kernels the example builds after them would
    go uncompiled. Without Triton installed, nothing to do."""
    try:
        import triton.runtime.jit as triton_jit
        import triton.testing as triton_testing
    except ImportError:
        return

    def no_launch(self, grid):
        return lambda *args, **kwargs: None

    triton_jit.KernelInterface.__getitem__ = no_launch
    for name in TRITON_TIMERS:
        if hasattr(triton_testing, name):
            setattr(triton_testing, name, _one_call)


def _cpu_checks():
    """torch's and tilex's comparison helpers (torch.testing.assert_close, tilex.testing.torch_assert_close, the
    kernel profiler's assert_allclose / manual_assert_close) check nothing: stand-in outputs cannot match, and
    stopping at an example's first check would leave the kernels it builds after it uncompiled (a bare ``assert``
    still stops it: the line then says COMPILED "ran to its check")."""
    import torch.testing

    from tilex import testing
    from tilex.jit import profiler
    from tilex.utils import tensor

    def skip(*args, **kwargs):
        return None

    torch.testing.assert_close = skip
    testing.torch_assert_close = skip
    tensor.torch_assert_close = skip
    profiler.Profiler.assert_allclose = skip
    profiler.Profiler.manual_assert_close = skip


def _cpu_autotune():
    """The autotuner's benchmark phase picks the first configuration that compiled (nothing can be timed), after
    the compile phase compiled them all; the autotune cache is not written."""
    from tilex.autotuner import cache as acache
    from tilex.autotuner import results as R
    from tilex.autotuner import tuner

    def benchmark(self, report):
        ok = [r for r in report.results if r.status == R.COMPILED]
        if not ok:
            raise tuner.AutotuneError("tilex autotune: no configuration compiled:\n"
                                      + R.format_table(report.results), report.results)
        best = ok[0]
        best.latency = 1.0  # a stand-in (nothing was timed): examples that divide by it print a made-up rate
        best.status = getattr(R, "OK", best.status)
        return R.TuneResult(best, report.results)

    tuner.AutoTuner.benchmark = benchmark
    acache.save = lambda *a, **k: None  # an untimed choice must not become a tuned result


# --------------------------------------------------------------------------------------------------------------
# one example, in its own process


def _classify(exc, cpu):
    """(status, reason) of an exception an example raised."""
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    head = " | ".join(line.strip() for line in text[:3])[:400]
    if isinstance(exc, ModuleNotFoundError):
        name = (exc.name or "").split(".")[0]
        if name not in (ALIAS, TARGET, ""):
            return "MISSING", f"needs the package {exc.name}"
    if isinstance(exc, NotImplementedError):
        return "REFUSED", head
    if isinstance(exc, AssertionError):
        if cpu:
            return "COMPILED", "ran to its check (outputs are stand-ins without a GPU)"
        return "FAIL", head
    return "ERROR", head


def run_one(example, cpu):
    """Run one example here; returns {status, reason, seconds, kernels}."""
    import runpy

    t0 = time.time()
    install_alias()
    if cpu:
        _cpu_torch()
        _cpu_kernels()
        _cpu_autotune()
        _cpu_timing()
        _cpu_triton()
        _cpu_checks()
    elif os.environ.get(GPU_LOCK_ENV):
        _serialized_timing(os.environ[GPU_LOCK_ENV])
    os.chdir(example["folder"])
    sys.path.insert(0, example["folder"])
    sys.argv = [example["path"]]
    try:
        if example["how"] == "main":
            mod = importlib.import_module(example["module"])
            mod.main(*example["args"], **example["kwargs"])
        else:
            runpy.run_path(example["path"], run_name="__main__")
        status, reason = ("COMPILED", "ran to its end") if cpu else ("OK", "its check passed")
    except SystemExit as e:
        status, reason = (("COMPILED" if cpu else "OK"), "exited 0") if not e.code else ("ERROR", f"exit {e.code}")
    except BaseException as e:  # noqa: BLE001 - every outcome is reported
        status, reason = _classify(e, cpu)
        if status in ("ERROR", "FAIL") and os.environ.get("TILEX_EXAMPLES_TRACE"):
            traceback.print_exc()
    return {"status": status, "reason": reason, "seconds": round(time.time() - t0, 1),
            "kernel_calls": _CompiledOnly.calls}


def _cuda_home():
    """The CUDA toolkit root of the nvcc tilex uses (its headers beside it), or /usr/local/cuda; None if neither."""
    roots = []
    try:
        from tilex import env as tilex_env

        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(tilex_env.find_nvcc()))))
    except Exception:  # noqa: BLE001 - no nvcc: the example says what it misses
        pass
    roots.append("/usr/local/cuda")
    for root in roots:
        if os.path.isfile(os.path.join(root, "include", "cuda_runtime.h")):
            return root
    return None


def _spawn(example, cpu, timeout, workers, extra_env=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--run-one", json.dumps(example)] + (["--cpu"] if cpu else [])
    env = dict(os.environ, **(extra_env or {}))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([repo, ALIAS_PATH, env.get("PYTHONPATH", "")])
    # examples run side by side: each autotuner compiles with its share of the CPUs unless the caller said otherwise
    env.setdefault("TILELANG_AUTO_TUNING_MAX_CPU_COUNT", str(workers))
    env.setdefault("MPLBACKEND", "Agg")
    if not env.get("CUDA_HOME"):  # examples that build CUDA extensions look for it; tilex finds nvcc without it
        home = _cuda_home()
        if home:
            env["CUDA_HOME"] = home
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "ERROR", "reason": f"timed out after {timeout} s", "seconds": timeout}
    lines = proc.stdout.splitlines()
    for line in reversed(lines):
        if line.startswith("@@RESULT "):
            result = json.loads(line[len("@@RESULT "):])
            # what the example printed about its speed (its own timings against its reference), for --json
            result["timings"] = [ln.strip()[:200] for ln in lines if TIMING_WORDS.search(ln)][-20:]
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"status": "ERROR", "reason": f"process died (exit {proc.returncode}): " + " | ".join(tail)[:400],
            "seconds": round(time.time() - t0, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", nargs="?")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--only", action="append", default=[], help="run the examples whose path contains this")
    ap.add_argument("--list", action="store_true", help="list the examples and how each runs; run nothing")
    ap.add_argument("--json", help="write every result to this file, rewritten after each example (with the lines each "
                    "example printed about its speed: \"timings\")")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true", help="compile only (no GPU): kernel calls return zeros")
    mode.add_argument("--gpu", action="store_true")
    ap.add_argument("--report", metavar="JSON", help="print the timing lines each example printed, from a --json "
                    "file of an earlier run; run nothing")
    ap.add_argument("--run-one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.report:
        return report_timings(args.report)

    if args.run_one:
        result = run_one(json.loads(args.run_one), args.cpu)
        sys.stdout.flush()
        print("@@RESULT " + json.dumps(result), flush=True)
        os._exit(0)  # no interpreter teardown: a stuck CUDA context must not hang the report

    if not args.checkout:
        ap.error("give the path of a TileLang checkout")
    cpu = args.cpu
    if not args.cpu and not args.gpu:
        try:
            import torch

            cpu = not torch.cuda.is_available()
        except ImportError:
            cpu = True
    examples = discover(os.path.abspath(args.checkout))
    if args.only:
        examples = [e for e in examples if any(s in e["name"] for s in args.only)]
    if args.list:
        for e in examples:
            print(f"{e['name']:70s} {e['how']} {e['args']} {e['kwargs']}")
        print(f"{len(examples)} examples")
        return 0
    examples = _longest_first(examples, args.json)
    print(f"# {len(examples)} TileLang examples, {'compile only (no GPU)' if cpu else 'on the GPU'}, "
          f"{args.jobs} at a time", flush=True)
    results = {}

    def report(e, r):
        results[e["name"]] = r
        print(f"{r['status']:9s} {e['name']:64s} {r['seconds']:7.1f}s  {r['reason']}", flush=True)
        if args.json:  # after every example: a run cut short keeps what it measured
            _write_json(args.json, results)

    with tempfile.TemporaryDirectory(prefix="tilex-examples-") as private:  # mode 0700: this user's alone
        extra_env = {}
        if not cpu and args.jobs > 1:
            lock = os.path.join(private, "timing.lock")
            open(lock, "w").close()
            extra_env[GPU_LOCK_ENV] = lock
        with cf.ThreadPoolExecutor(args.jobs) as pool:
            workers = max(4, 2 * (os.cpu_count() or 2) // args.jobs)
            futures = {pool.submit(_spawn, e, cpu, args.timeout, workers, extra_env): e for e in examples}
            for fut in cf.as_completed(futures):
                report(futures[fut], fut.result())
        again = [e for e in examples if args.jobs > 1 and _crowded_out(results[e["name"]])]
        if again:
            print(f"# {len(again)} examples that ran out of memory or time beside others, again one at a time",
                  flush=True)
        for e in again:
            r = _spawn(e, cpu, args.timeout, max(4, os.cpu_count() or 2))
            r["reason"] = f"alone: {r['reason']}"
            report(e, r)
    counts = {}
    for r in results.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    good = counts.get("COMPILED", 0) + counts.get("OK", 0)
    print("# " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f"; {good} of {len(results)} "
          f"{'compiled' if cpu else 'passed'}")
    return 0


def report_timings(path):
    """Print, for each example of the --json file `path` whose check passed, the lines it printed about its speed."""
    with open(path) as f:
        results = json.load(f)
    shown = 0
    for name in sorted(results):
        r = results[name]
        if r.get("status") not in ("OK", "COMPILED") or not r.get("timings"):
            continue
        shown += 1
        print(name)
        for line in r["timings"]:
            print(f"    {line}")
    print(f"# {shown} examples printed timings")
    return 0


def _crowded_out(result):
    """Whether an example's failure may come from the examples beside it: out of GPU memory, killed (SIGKILL: the
    system out of memory), or its time ran out."""
    reason = result.get("reason", "")
    return result.get("status") == "ERROR" and ("out of memory" in reason or reason.startswith("timed out")
                                                or "(exit -9)" in reason)


def _longest_first(examples, previous):
    """`examples` with those that took longest in the run `previous` (a --json file, if it exists) first, so that a
    long one does not start last and hold the run up alone; the others keep their order."""
    try:
        with open(previous) as f:
            seconds = {name: float(r.get("seconds", 0)) for name, r in json.load(f).items()}
    except (TypeError, OSError, ValueError, AttributeError):
        return examples
    return sorted(examples, key=lambda e: -seconds.get(e["name"], 0.0))


def _write_json(path, results):
    """Write `results` to `path` whole or not at all (a temporary file beside it, then renamed over it)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
