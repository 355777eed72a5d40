"""The compile phase's parallel work: building and compiling configurations in worker processes or threads.

With ``parallel="auto"`` (or ``"process"``) each configuration is compiled in a worker process
(``ProcessPoolExecutor``, *spawn* context; :func:`compile_in_processes`), a pool kept between compile phases
so that tuning many problems pays the workers' start-up (importing TVM) once. The task sent to a worker names the
factory by reference (:class:`FactoryRef`: its module and qualified name) and holds the factory arguments, so a
worker imports the factory, builds the PrimFunc (:func:`call_factory`), checks the shared memory it needs and
compiles it with ``tilex.compile`` (:func:`build_kernel`), which runs nvcc (with or without a GPU) and writes the
on-disk kernel cache on a GPU machine. :func:`worker_compile` is that worker function; the pool finds it by its
module path (``tilex.autotuner.workers.worker_compile``). The parent then re-creates each kernel with
``tilex.compile``, which loads it from that cache (:func:`load_kernels`).

In thread mode (:func:`compile_in_threads`) the PrimFuncs are built one after the other in the parent and
compiled in threads, which overlap where TVM and nvcc release the GIL.

Either way a configuration that takes longer than ``timeout`` is recorded as ``"timeout"``; a configuration that
kills its worker process is found by retrying the unfinished ones one at a time. Progress bars use tqdm when it
is installed (:func:`progress_bar`).
"""
from __future__ import annotations

import atexit
import concurrent.futures as cf
import importlib
import logging
import os
import sys
import threading
import time
from typing import Any, Callable

import tvm

from tilex import env
from tilex.ir.visit import dtype_of
from tilex.jit import compile as compile_kernel
from tilex.op.base import LayoutConflictError, TileOpError

from .results import BUILD_ERROR, COMPILED, SMEM, TIMEOUT, error_text, reason_of
from .smem import shared_memory_bytes

__all__ = ["unwrap_factory", "FactoryRef", "call_factory", "kernel_out_idx", "build_kernel", "worker_ping",
           "worker_compile", "make_task", "collect", "compile_in_processes", "release_pool", "compile_in_threads",
           "load_kernels", "terminate_pool", "progress_bar", "NoBar"]

logger = logging.getLogger("tilex.autotuner")


# --------------------------------------------------------------------------------------------------
# factories: unwrapping and references for worker processes
# --------------------------------------------------------------------------------------------------
def unwrap_factory(obj):
    """The plain function under ``@autotune`` / ``@jit`` wrappers."""
    seen = 0
    while hasattr(obj, "__tilex_factory__") and seen < 16:
        obj = obj.__tilex_factory__
        seen += 1
    return obj


def _main_is_script() -> bool:
    """Whether ``__main__`` is a script file: spawned worker processes run it again as their own ``__main__``
    (everything but its ``if __name__ == "__main__":`` block), so its factories resolve there by name."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return bool(path) and path.endswith(".py") and os.path.isfile(path)


class FactoryRef:
    """A factory named by module and qualified name, which a spawned worker process can import."""

    def __init__(self, module: str, qualname: str):
        self.module = module
        self.qualname = qualname

    def as_tuple(self):
        return (self.module, self.qualname)

    @staticmethod
    def resolve_tuple(ref) -> Callable:
        module, qualname = ref
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return unwrap_factory(obj)

    @classmethod
    def of(cls, factory) -> tuple["FactoryRef | None", str]:
        """``(ref, "")`` when ``factory`` can be imported by reference, else ``(None, why not)``."""
        module = getattr(factory, "__module__", None)
        qualname = getattr(factory, "__qualname__", None)
        if not module or not qualname:
            return None, f"{type(factory).__name__} object has no module/qualified name"
        if module == "__main__" and not _main_is_script():
            return None, f"'{qualname}' is defined in a __main__ that is no script file (spawned workers cannot run it)"
        if "<locals>" in qualname or "<lambda>" in qualname:
            return None, f"'{qualname}' is a local function (closure or lambda)"
        try:
            found = cls.resolve_tuple((module, qualname))
        except Exception as e:  # noqa: BLE001
            return None, f"'{module}.{qualname}' cannot be imported ({type(e).__name__}: {e})"
        if found is not factory:
            return None, f"'{module}.{qualname}' names a different object"
        return cls(module, qualname), ""


# --------------------------------------------------------------------------------------------------
# building one configuration (used by worker processes and by the thread mode)
# --------------------------------------------------------------------------------------------------
def call_factory(factory, args, kwargs, call_cfg):
    """``factory(*args, **kwargs, **call_cfg)``, checked to be a ``T.prim_func`` (else ``TypeError``)."""
    func = factory(*args, **kwargs, **call_cfg)
    if not isinstance(func, tvm.tirx.PrimFunc):
        raise TypeError(f"the kernel factory returned {type(func).__name__}, not a T.prim_func (PrimFunc)")
    return func


def kernel_out_idx(factory, func, out_idx):
    """The ``out_idx`` to compile `func` (built by `factory`) with: the tuner's, or for an eager ``@tilex.jit``
    function (:class:`tilex.jit.eager.EagerFactory`) the positions of the ``T.empty`` outputs it returns."""
    out_idx_of = getattr(factory, "out_idx_of", None)
    return out_idx_of(func) if out_idx_of is not None else out_idx


def build_kernel(func, out_idx, target, pass_configs, smem_limit) -> tuple[dict, Any]:
    """Shared-memory check (``smem_limit``: (bytes or None, where the limit comes from)), then
    ``tilex.compile``. Returns ``(info, kernel or None)``; ``info`` holds ``status``, ``reason``, ``error``,
    ``smem`` and ``compile_time``."""
    t0 = time.perf_counter()
    info: dict = {"status": COMPILED, "reason": "", "error": "", "smem": None}
    try:
        try:
            info["smem"] = shared_memory_bytes(func, target, pass_configs)
        except Exception as e:  # noqa: BLE001 - the build below reports real errors with their own type
            if isinstance(e, (TileOpError, LayoutConflictError)):
                raise
            logger.debug("shared memory estimate failed: %s", e)
        if smem_limit[0] is not None and info["smem"] is not None and info["smem"] > smem_limit[0]:
            limit, source = smem_limit
            info.update(status=SMEM, reason=f"needs {info['smem']} bytes of shared memory per block; the device "
                                            f"allows {limit} ({source})")
            return _timed(info, t0), None
        kernel = compile_kernel(func, out_idx=out_idx, target=target, pass_configs=pass_configs)
        return _timed(info, t0), kernel
    except Exception as e:  # noqa: BLE001 - recorded, not raised
        info.update(status=BUILD_ERROR, reason=reason_of(e), error=error_text(e))
        return _timed(info, t0), None


def _timed(info, t0):
    info["compile_time"] = time.perf_counter() - t0
    return info


def exit_with_parent(parent: int) -> None:
    """A worker process's initializer: end the worker when the process that started it is gone (killed, or left
    through ``os._exit`` with the pool still kept), instead of waiting for work forever as an orphan (a pool
    worker holds both ends of its task queue, so it never sees the parent's end close)."""

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="tilex-exit-with-parent", daemon=True).start()


def _process_pool(size: int, ctx):
    return cf.ProcessPoolExecutor(max_workers=size, mp_context=ctx, initializer=exit_with_parent,
                                  initargs=(os.getpid(),))


def worker_ping() -> int:
    """Runs in a worker process as soon as it starts (so that start-up is not counted in ``timeout``)."""
    return os.getpid()


def worker_compile(task: dict) -> dict:
    """Runs in a worker process: import the factory, build and compile one configuration (filling the
    on-disk kernel cache), return a small picklable summary (:func:`build_kernel`'s ``info``)."""
    t0 = time.perf_counter()
    try:
        factory = FactoryRef.resolve_tuple(task["ref"])
        func = call_factory(factory, unpickled(task["args"]), unpickled(task["kwargs"]), task["call_cfg"])
    except Exception as e:  # noqa: BLE001
        return {"status": BUILD_ERROR, "reason": reason_of(e), "error": error_text(e), "smem": None,
                "compile_time": time.perf_counter() - t0}
    target = env.resolve_target(task["target"])
    info, _kernel = build_kernel(func, kernel_out_idx(factory, func, task["out_idx"]), target, task["pass_configs"],
                                 task["smem_limit"])
    info["compile_time"] = time.perf_counter() - t0
    return info


class SizeVar:
    """A symbolic size (a ``T.dynamic`` variable) on its way to a worker process: TVM 0.27 crashes pickling a
    ``tirx.Var`` itself (a segfault in its JSON serializer), so the name and dtype travel and the worker makes an
    equal variable (the program text, and so the kernel cache key, comes out the same)."""

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype

    def __eq__(self, other):
        return isinstance(other, SizeVar) and (self.name, self.dtype) == (other.name, other.dtype)

    def __hash__(self):
        return hash((self.name, self.dtype))


def picklable(value):
    """`value` (factory arguments) with every ``tirx.Var`` replaced by a :class:`SizeVar`."""
    if isinstance(value, tvm.tirx.Var):
        return SizeVar(value.name, dtype_of(value))
    if isinstance(value, (list, tuple)):
        return type(value)(picklable(v) for v in value)
    if isinstance(value, dict):
        return {k: picklable(v) for k, v in value.items()}
    return value


def unpickled(value):
    """The inverse of :func:`picklable`, in the worker."""
    if isinstance(value, SizeVar):
        return tvm.tirx.Var(value.name, value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(unpickled(v) for v in value)
    if isinstance(value, dict):
        return {k: unpickled(v) for k, v in value.items()}
    return value


def make_task(job, ref: FactoryRef, i: int, smem_limit) -> dict:
    """The picklable task for :func:`worker_compile`: configuration ``i`` of ``job`` (the tuner's bound
    problem; its compile options merged with the configuration's own ``pass_configs``), its factory named by
    ``ref``."""
    return {"ref": ref.as_tuple(), "args": picklable(job.args), "kwargs": picklable(job.kwargs),
            "call_cfg": job.call_cfgs[i],
            "out_idx": job.out_idx, "target": job.target_spec, "pass_configs": job.pass_configs_of(i),
            "smem_limit": smem_limit}


# --------------------------------------------------------------------------------------------------
# progress bars (tqdm when installed)
# --------------------------------------------------------------------------------------------------
class NoBar:
    """A progress bar that shows nothing (tqdm's methods that the tuner uses, doing nothing)."""

    def __init__(self, *a, **k):
        pass

    def update(self, n=1):
        pass

    def set_postfix_str(self, s, refresh=True):
        pass

    def close(self):
        pass


def progress_bar(enabled: bool, total: int, desc: str):
    """A tqdm bar counting configurations, or a :class:`NoBar` when disabled or tqdm is not installed."""
    if not enabled:
        return NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return NoBar()
    # disable=None: no bar when stderr is not a terminal (logs, CI)
    return tqdm(total=total, desc=desc, unit="cfg", leave=False, disable=None)


# --------------------------------------------------------------------------------------------------
# running the compile phase
# --------------------------------------------------------------------------------------------------
def collect(futures: dict, results, bar, on_result, timeout) -> list:
    """Wait for ``futures`` (future -> index), calling ``on_result(index, value)`` for each and honouring
    ``timeout`` (seconds a running task may take; ``None``: no limit); returns the indices whose worker broke
    (BrokenProcessPool)."""
    started: dict = {}
    broken = []
    pending = set(futures)
    while pending:
        done, pending = cf.wait(pending, timeout=0.25, return_when=cf.FIRST_COMPLETED)
        for fut in done:
            i = futures[fut]
            try:
                on_result(i, fut.result())
            except cf.process.BrokenProcessPool:
                broken.append(i)
                continue
            except Exception as e:  # noqa: BLE001 - e.g. the task could not be pickled
                r = results[i]
                r.status, r.reason, r.error = BUILD_ERROR, reason_of(e), error_text(e)
            bar.update(1)
        if timeout is not None:
            now = time.monotonic()
            for fut in list(pending):
                if fut.running():
                    t0 = started.setdefault(fut, now)
                    if now - t0 > timeout:
                        i = futures[fut]
                        r = results[i]
                        r.status, r.compile_time = TIMEOUT, now - t0
                        r.reason = f"compilation did not finish within {timeout} s"
                        pending.discard(fut)
                        fut.cancel()
                        bar.update(1)
    return broken


_kept: dict = {}  # the worker pool kept between compile phases: "ex", "size", "key", "timer"
#: seconds an idle kept pool lives on (its workers hold TVM in memory, a few hundred MB each)
KEEP_IDLE_SECONDS = float(os.environ.get("TILEX_WORKER_KEEP_S", "60"))
_kept_lock = threading.RLock()  # the idle timer releases from its own thread


def _environment_key() -> tuple:
    """What a spawned worker took from this process when it started and a later compile phase may have changed:
    the module search path and the TILEX_ / TVM_ / CUDA_ environment variables (cache directory, target, ...)."""
    env_vars = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("TILEX", "TVM", "CUDA"))))
    return tuple(sys.path), env_vars


def _kept_pool(size: int, exact: bool, ctx):
    """``(pool, fresh)``: the kept pool when it serves this phase (the same environment, and ``size`` workers --
    or at least ``size`` when not ``exact``), else a new pool of ``size`` spawned workers that replaces it.
    Workers pay TVM's import (seconds) once per process, so tuning many problems in one process pays it once."""
    with _kept_lock:
        timer = _kept.pop("timer", None)
        if timer is not None:
            timer.cancel()
        ex = _kept.get("ex")
        key = _environment_key()
        if (ex is not None and not getattr(ex, "_broken", False) and _kept["key"] == key
                and (_kept["size"] == size or (not exact and _kept["size"] >= size))):
            return ex, False
        release_pool()
        ex = _process_pool(size, ctx)
        _kept.update(ex=ex, size=size, key=key)
        return ex, True


def _release_when_idle() -> None:
    """Shut the kept pool down after KEEP_IDLE_SECONDS unless a compile phase takes it up before."""
    with _kept_lock:
        ex = _kept.get("ex")
        if ex is None or KEEP_IDLE_SECONDS <= 0:
            release_pool()
            return

        def expire():
            with _kept_lock:
                if _kept.get("ex") is ex:
                    release_pool()

        timer = threading.Timer(KEEP_IDLE_SECONDS, expire)
        timer.daemon = True
        _kept["timer"] = timer
        timer.start()


def release_pool() -> None:
    """Shut down the worker pool kept between compile phases (also done when idle, and at exit)."""
    with _kept_lock:
        timer = _kept.pop("timer", None)
        if timer is not None:
            timer.cancel()
        ex = _kept.pop("ex", None)
        _kept.clear()
    if ex is not None:
        if getattr(ex, "_broken", False):
            terminate_pool(ex)
        else:
            ex.shutdown(wait=True, cancel_futures=True)


atexit.register(release_pool)


def compile_in_processes(job, ref: FactoryRef, results, workers: int, smem_limit, timeout=None,
                         progress=True, exact_workers=True) -> bool:
    """Compile every configuration of ``job`` in worker processes, filling ``results`` (one
    :class:`ConfigResult` per configuration); returns False when the workers cannot start (the caller falls
    back to threads). The pool of ``workers`` processes is kept for later phases (:func:`_kept_pool`; a larger
    kept pool serves too unless ``exact_workers``); a phase whose worker crashed or timed out discards it."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    todo = list(range(len(job.configs)))
    bar = progress_bar(progress, len(todo), "tilex autotune: compile")

    def on_result(i, info):
        r = results[i]
        r.status, r.reason, r.error = info["status"], info["reason"], info["error"]
        r.smem, r.compile_time = info["smem"], info["compile_time"]

    try:
        pool_size = workers
        kept = True
        while todo:
            if kept:
                ex, fresh = _kept_pool(pool_size, exact_workers, ctx)
            else:
                ex, fresh = _process_pool(pool_size, ctx), True
            broken: list = []
            failed = True
            try:
                if fresh:
                    # start every worker first (so that `timeout` does not count their start-up); a worker that
                    # cannot start at all (e.g. an unguarded __main__) breaks the pool here
                    try:
                        for f in [ex.submit(worker_ping) for _ in range(pool_size)]:
                            f.result()
                    except cf.process.BrokenProcessPool:
                        return False
                futures = {ex.submit(worker_compile, make_task(job, ref, i, smem_limit)): i for i in todo}
                broken = sorted(collect(futures, results, bar, on_result, timeout))
                failed = bool(broken) or any(results[i].status == TIMEOUT for i in todo)
            finally:
                if failed:
                    if kept:
                        with _kept_lock:
                            _kept.clear()
                    terminate_pool(ex)
                elif not kept:
                    ex.shutdown(wait=True)
            if not broken:
                break
            # a configuration crashed its worker: retry the unfinished ones one at a time in a pool of their own,
            # so that the crash is pinned on the configuration that causes it (the first unfinished one)
            if pool_size == 1 and not kept:
                r = results[broken[0]]
                r.status = BUILD_ERROR
                r.reason = "the worker process died while compiling this configuration (crash or out of memory)"
                bar.update(1)
                broken = broken[1:]
            pool_size, kept = 1, False
            todo = broken
    finally:
        bar.close()
        _release_when_idle()
    return True


def load_kernels(job, results) -> None:
    """Re-create the kernels compiled by the workers in this process (``tilex.compile`` finds them in the
    on-disk kernel cache; without a GPU it rebuilds them with TVM and reads ptxas's report back instead of
    running nvcc again)."""
    for r in results:
        if r.status != COMPILED:
            continue
        try:
            func = job.build_func(r.index)
            r.kernel = compile_kernel(func, out_idx=job.out_idx_for(func), target=job.target,
                                      pass_configs=job.pass_configs_of(r.index))
            r.from_kernel_cache = r.kernel.from_cache
        except Exception as e:  # noqa: BLE001
            r.status, r.reason, r.error = BUILD_ERROR, reason_of(e), error_text(e)


def compile_in_threads(job, results, workers: int, smem_limit, timeout=None, progress=True) -> None:
    """Build every configuration's PrimFunc in this thread, then compile them in ``workers`` threads,
    filling ``results`` (kernels included)."""
    funcs = {}
    for r in results:
        t0 = time.perf_counter()
        try:
            funcs[r.index] = job.build_func(r.index)
        except Exception as e:  # noqa: BLE001
            r.status, r.reason, r.error = BUILD_ERROR, reason_of(e), error_text(e)
            r.compile_time = time.perf_counter() - t0
    bar = progress_bar(progress, len(results), "tilex autotune: compile")
    bar.update(len(results) - len(funcs))

    def on_result(i, out):
        info, kernel = out
        r = results[i]
        r.status, r.reason, r.error = info["status"], info["reason"], info["error"]
        r.smem, r.compile_time, r.kernel = info["smem"], info["compile_time"], kernel

    ex = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tilex-autotune")
    try:
        futures = {ex.submit(build_kernel, f, job.out_idx_for(f), job.target, job.pass_configs_of(i), smem_limit): i
                   for i, f in funcs.items()}
        collect(futures, results, bar, on_result, timeout)
    finally:
        # threads that timed out cannot be stopped; leave them behind
        ex.shutdown(wait=not any(r.status == TIMEOUT for r in results), cancel_futures=True)
        bar.close()


def terminate_pool(ex) -> None:
    """Stop a process pool without waiting for running tasks (timeouts, crashes)."""
    procs = list(getattr(ex, "_processes", {}).values()) if getattr(ex, "_processes", None) else []
    try:
        ex.shutdown(wait=False, cancel_futures=True)
    except Exception:  # noqa: BLE001
        pass
    for p in procs:
        try:
            if p.is_alive():
                p.terminate()
        except Exception:  # noqa: BLE001
            pass
    for p in procs:
        try:
            p.join(timeout=5)
        except Exception:  # noqa: BLE001
            pass
