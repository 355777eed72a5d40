"""Timing compiled kernels on remote machines through TVM's RPC tracker.

Consumes: a shared library written by ``JITKernel.export_library(path)`` (or any ``export_library`` of a TVM
module), the name of the function in it, and a description of its arguments (``(shape, dtype)`` per tensor, a
Python number per scalar). Produces: the run times in milliseconds, one per repeat, measured on a machine that
serves ``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`` behind ``python -m tvm.exec.rpc_tracker``.

The engine is TVM's own RPC (``tvm.rpc``): the tracker hands a free server of the key to each session request,
the library is uploaded and loaded there, the arguments are allocated on the remote device and the remote
``time_evaluator`` times the function (warm-up call discarded; each repeat is the mean of ``number`` runs,
raised until a repeat lasts ``min_repeat_ms``). No L2 flush between repeats, unlike :func:`tilex.autotuner.do_bench`.

    runner = RemoteRunner("10.0.0.5", 9190, key="h100")
    times_ms = runner.measure("gemm.so", "gemm", [((4096, 4096), "float16")] * 3, repeat=5)

:func:`map_measure` spreads jobs over several sessions at once (one thread each), :func:`tracker_summary` shows
the tracker's servers and queues, and :func:`local_tracker` starts a tracker and servers on this host (tests,
single-machine use). Starting a tracker needs the ``tornado`` package and a server needs ``cloudpickle``.

A kernel exported on a machine without a GPU holds CUDA source, not a cubin (see ``JITKernel.export_library``);
export on a GPU machine, or from tilex's kernel cache, for a library that any CUDA server of TVM can load. A
stream-K kernel's host code calls ``tilex.streamk_workspace``: a server needs ``--load-library`` of
``tilex.jit.launcher.native_library()`` (which registers it) to run one; :func:`local_tracker` passes it.
"""
from __future__ import annotations

import contextlib
import importlib.util
import math
import numbers
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from tilex.jit import launcher

__all__ = ["RemoteRunner", "map_measure", "tracker_summary", "local_tracker"]

DEVICES = ("cuda", "cpu")
FILLS = ("random", "zeros", "empty")


# --------------------------------------------------------------------------------------------------
# tracker connections
# --------------------------------------------------------------------------------------------------
def _probe_tracker(host: str, port: int, timeout: float) -> None:
    """Check that a TVM RPC tracker answers at host:port, within ``timeout`` seconds.

    ``tvm.rpc.connect_tracker`` retries an unreachable address for 60 s (5 s apart) and then waits for the
    tracker's handshake without a time limit; this probe fails fast instead, with the address in the message."""
    from tvm.rpc import base

    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            reply = base.recvall(sock, 4)
    except OSError as err:
        raise ConnectionError(f"cannot reach the TVM RPC tracker at {host}:{port} within {timeout:g} s ({err}); "
                              "is `python -m tvm.exec.rpc_tracker` running there?") from err
    if struct.unpack("<i", reply)[0] != base.RPC_TRACKER_MAGIC:
        raise ConnectionError(f"{host}:{port} answered, but not as a TVM RPC tracker")


def _connect_tracker(host: str, port: int, timeout: float):
    """A ``tvm.rpc.TrackerSession`` whose socket gives up after ``timeout`` seconds of silence."""
    from tvm import rpc

    _probe_tracker(host, port, timeout)
    tracker = rpc.connect_tracker(host, port)
    # TrackerSession has no timeout of its own: its summary() and request() block on the socket forever.
    tracker._sock.settimeout(timeout)  # noqa: SLF001
    return tracker


def tracker_summary(host: str, port: int, *, as_text: bool = False, timeout: float = 5.0):
    """The tracker's view for diagnostics: ``{"server_info": [{"key": "server:KEY", "addr": [host, port]}, ...],
    "queue_info": {KEY: {"free": n, "pending": n}}}``, or with ``as_text=True`` TVM's printed table."""
    tracker = _connect_tracker(host, port, timeout)
    try:
        return tracker.text_summary() if as_text else tracker.summary()
    finally:
        tracker.close()


def _servers_under(summary: Mapping, key: str) -> list:
    return [s for s in summary.get("server_info", []) if s.get("key") == "server:" + key]


# --------------------------------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------------------------------
def _check_arg_specs(arg_specs: Sequence) -> list:
    """Validate ``arg_specs`` locally (before any network traffic); returns it as a list."""
    if isinstance(arg_specs, (str, bytes)) or not isinstance(arg_specs, Sequence):
        raise ValueError(f"arg_specs must be a list of (shape, dtype) pairs or numbers, got {arg_specs!r}")
    for i, spec in enumerate(arg_specs):
        if isinstance(spec, numbers.Number):
            continue
        ok = (isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[1], str)
              and isinstance(spec[0], (tuple, list))
              and all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in spec[0]))
        if not ok:
            raise ValueError(f"arg_specs[{i}] = {spec!r}: expected (shape tuple of non-negative ints, dtype string) "
                             "for a tensor, or a Python number for a scalar")
    return list(arg_specs)


def _numpy_dtype(dtype: str):
    """The NumPy dtype for a TVM dtype string (bfloat16 and float8/float4 through ml_dtypes), or None."""
    try:
        return np.dtype(dtype)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        return None
    found = getattr(ml_dtypes, dtype, None)
    return np.dtype(found) if found is not None else None


def _host_array(shape: tuple, dtype: str, fill: str, rng: np.random.Generator) -> np.ndarray:
    np_dtype = _numpy_dtype(dtype)
    if np_dtype is None:
        raise ValueError(f"cannot fill a {dtype} tensor from NumPy; use fill='empty' for it")
    if fill == "zeros":
        return np.zeros(shape, np.float32).astype(np_dtype)
    if np_dtype.kind == "b":
        return rng.random(shape) < 0.5
    if np_dtype.kind in "iu":
        # small values: integer kernels (indices, quantized data) stay in range and do not overflow
        low = 0 if np_dtype.kind == "u" else -4
        return rng.integers(low, 5, size=shape).astype(np_dtype)
    return rng.standard_normal(shape, dtype=np.float32).astype(np_dtype)


def _remote_args(arg_specs: list, device, fill: str, seed: int) -> list:
    """Arguments on the remote ``device``: tensors for (shape, dtype) specs, numbers as they are."""
    import tvm

    rng = np.random.default_rng(seed)
    args = []
    for spec in arg_specs:
        if isinstance(spec, numbers.Number):
            args.append(spec)
            continue
        shape, dtype = tuple(int(d) for d in spec[0]), spec[1]
        remote = tvm.runtime.empty(shape, dtype, device)
        if fill != "empty":
            # the data is made here and copied over the RPC connection: the remote side runs only TVM's runtime
            remote.copyfrom(_host_array(shape, dtype, fill, rng))
        args.append(remote)
    return args


# --------------------------------------------------------------------------------------------------
# the runner
# --------------------------------------------------------------------------------------------------
class RemoteRunner:
    """Times exported kernel libraries on servers registered under ``key`` at a TVM RPC tracker.

    ``session_timeout`` (s): the server ends a session that lasts longer (0: never).
    ``request_timeout`` (s): how long to wait for the tracker to hand out a free server of the key.
    ``connect_timeout`` (s): how long to wait for the tracker itself to answer.
    ``device``: ``"cuda"`` (GPU ``device_index`` of the server) or ``"cpu"``.

    A runner holds no connection; each :meth:`measure` opens one session and closes it. It is safe to share
    between threads (``map_measure([runner] * 4, jobs)`` uses four sessions of the same key)."""

    def __init__(self, tracker_host: str, tracker_port: int, key: str, session_timeout: float = 120.0, *,
                 device: str = "cuda", device_index: int = 0, request_timeout: float = 60.0,
                 connect_timeout: float = 5.0, priority: int = 1):
        if device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
        if not key or not isinstance(key, str):
            raise ValueError(f"key must be a non-empty string, got {key!r}")
        self.tracker_host = tracker_host
        self.tracker_port = int(tracker_port)
        self.key = key
        self.session_timeout = float(session_timeout)
        self.device = device
        self.device_index = int(device_index)
        self.request_timeout = float(request_timeout)
        self.connect_timeout = float(connect_timeout)
        self.priority = int(priority)

    def __repr__(self):
        return (f"RemoteRunner({self.tracker_host}:{self.tracker_port}, key={self.key!r}, "
                f"device={self.device}:{self.device_index})")

    # -- sessions
    def open_session(self):
        """A ``tvm.rpc.RPCSession`` on a free server of the key. The session ends when the last reference to it
        and to its remote objects (modules, tensors) is gone, which frees the server for the next request."""
        where = f"{self.tracker_host}:{self.tracker_port}"
        tracker = _connect_tracker(self.tracker_host, self.tracker_port, self.connect_timeout)
        # the tracker answers a request only once a server of the key is free: bound that wait
        tracker._sock.settimeout(self.request_timeout)  # noqa: SLF001
        start = time.monotonic()
        try:
            return tracker.request(self.key, priority=self.priority, session_timeout=self.session_timeout,
                                   max_retry=1)  # a retry would reconnect without our socket timeout
        except RuntimeError as err:
            waited = time.monotonic() - start
            failure = err
        finally:
            tracker.close()
        # Say why: no server of that key at all, all of them busy, or the server itself failed.
        try:
            summary = tracker_summary(self.tracker_host, self.tracker_port, timeout=self.connect_timeout)
        except (OSError, RuntimeError) as err:
            raise ConnectionError(f"lost the TVM RPC tracker at {where} while requesting key {self.key!r}: "
                                  f"{err}") from failure
        servers = _servers_under(summary, self.key)
        if not servers:
            known = sorted({s.get("key", "?").split(":", 1)[-1] for s in summary.get("server_info", [])})
            raise LookupError(f"no RPC server is registered under key {self.key!r} at the tracker {where} "
                              f"(waited {waited:.1f} s); keys registered there: {known or 'none'}") from failure
        if waited >= 0.9 * self.request_timeout:
            queue = summary.get("queue_info", {}).get(self.key, {})
            raise TimeoutError(f"no free RPC server under key {self.key!r} at {where} within "
                               f"{self.request_timeout:g} s ({len(servers)} registered, queue {queue})") from failure
        raise RuntimeError(f"could not open a session on key {self.key!r} via {where}: {failure}") from failure

    def remote_device(self, session):
        """The runner's device on ``session``; a clear error when the server lacks it."""
        dev = session.cuda(self.device_index) if self.device == "cuda" else session.cpu(self.device_index)
        if not dev.exist:
            raise RuntimeError(f"the RPC server under key {self.key!r} has no {self.device} device "
                               f"{self.device_index} (is it a GPU server with TVM's CUDA runtime?)")
        return dev

    # -- measuring
    def measure(self, lib_path: str, func_name: str, arg_specs: Sequence, number: int = 10, repeat: int = 3,
                min_repeat_ms: float = 0, *, fill: str = "random", seed: int = 0) -> list[float]:
        """Milliseconds per run of ``func_name`` from the library at ``lib_path``, one value per repeat.

        ``arg_specs``: ``(shape, dtype)`` for each tensor argument (allocated on the remote device; ``fill``
        ``"random"``, ``"zeros"`` or ``"empty"``), a Python number for each scalar argument."""
        job = _check_job(lib_path, func_name, arg_specs, number, repeat, min_repeat_ms, fill)
        session = self.open_session()
        try:
            return self._measure_in_session(session, seed=seed, **job)
        except Exception as err:
            _release_frames(err)
            raise
        finally:
            session = None  # noqa: F841 -- see _release_frames

    def _measure_in_session(self, session, lib_path, func_name, arg_specs, number, repeat, min_repeat_ms, fill,
                            seed=0) -> list[float]:
        dev = self.remote_device(session)
        # A unique remote name: the server process dlopen()s by path, and a second library uploaded under a name
        # already loaded in this session would silently resolve to the first one.
        remote_name = f"{uuid.uuid4().hex[:12]}_{os.path.basename(lib_path)}"
        session.upload(lib_path, remote_name)
        module = session.load_module(remote_name)
        if not module.implements_function(func_name, True):
            # otherwise time_evaluator falls back to the server's global registry and names that instead
            raise LookupError(f"{lib_path} has no function {func_name!r}")
        args = _remote_args(arg_specs, dev, fill, seed)
        timer = module.time_evaluator(func_name, dev, number=number, repeat=repeat,
                                      min_repeat_ms=int(math.ceil(min_repeat_ms)))
        times_ms = [s * 1e3 for s in timer(*args).results]
        if not all(math.isfinite(t) and t >= 0 for t in times_ms):
            raise RuntimeError(f"remote timing of {func_name!r} returned {times_ms}")
        return times_ms


def _release_frames(err: BaseException) -> None:
    """Drop the tracebacks of ``err`` (and of the exceptions chained to it), keeping them as text in a note.

    A remote session lasts as long as anything references it or one of its remote objects, and a server serves
    one session at a time. The frames of a traceback reference such objects, and not only through their local
    variables (``traceback.clear_frames`` is not enough: the frame of TVM's ``time_evaluator`` wrapper holds its
    function, whose closure holds the remote timer); an exception kept alive by a caller, pytest or a results
    list would otherwise keep the server busy."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if err.__traceback__ is not None:
            if hasattr(err, "add_note"):  # Python >= 3.11
                err.add_note("traceback (kept as text so that it holds no remote session):\n"
                             + "".join(traceback.format_tb(err.__traceback__)).rstrip())
            err.__traceback__ = None
        err = err.__cause__ or err.__context__


def _check_job(lib_path, func_name, arg_specs, number=10, repeat=3, min_repeat_ms=0, fill="random") -> dict:
    """Validate a measurement locally; the keyword arguments of ``_measure_in_session``."""
    lib_path = os.fspath(lib_path)
    if not os.path.isfile(lib_path):
        raise FileNotFoundError(f"kernel library not found: {lib_path}")
    if not isinstance(func_name, str) or not func_name:
        raise ValueError(f"func_name must be a non-empty string, got {func_name!r}")
    if int(number) < 1 or int(repeat) < 1 or min_repeat_ms < 0:
        raise ValueError(f"need number >= 1, repeat >= 1, min_repeat_ms >= 0; got {number}, {repeat}, "
                         f"{min_repeat_ms}")
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
    return dict(lib_path=lib_path, func_name=func_name, arg_specs=_check_arg_specs(arg_specs), number=int(number),
                repeat=int(repeat), min_repeat_ms=min_repeat_ms, fill=fill)


def map_measure(runners: Sequence[RemoteRunner], jobs: Sequence[Mapping[str, Any]], *,
                return_exceptions: bool = False) -> list:
    """Run measurement ``jobs`` (each a dict of :meth:`RemoteRunner.measure` keyword arguments) on the sessions of
    ``runners`` in parallel, one thread and one session per runner, each taking the next job when free.

    Returns one entry per job, in job order: its times in ms, or with ``return_exceptions=True`` the exception
    it raised; without it the first failed job's exception (in job order) is raised once all jobs are done."""
    runners = list(runners)
    if not runners:
        raise ValueError("map_measure needs at least one RemoteRunner")
    checked = []
    for i, job in enumerate(jobs):
        job = dict(job)
        seed = job.pop("seed", 0)
        try:
            checked.append((_check_job(**job), seed))
        except TypeError as err:
            raise ValueError(f"jobs[{i}]: {err}") from err
    results: list = [None] * len(checked)
    next_job = iter(range(len(checked)))
    lock = threading.Lock()

    def work(runner: RemoteRunner):
        session = None
        while True:
            with lock:
                i = next(next_job, None)
            if i is None:
                break
            job, seed = checked[i]
            try:
                if session is None:
                    session = runner.open_session()
                results[i] = runner._measure_in_session(session, seed=seed, **job)
            except Exception as err:  # noqa: BLE001 -- recorded per job, raised or returned below
                # a failed launch can leave the remote device unusable (CUDA errors are sticky): next job, new session
                session = None
                _release_frames(err)
                results[i] = err
        session = None

    threads = [threading.Thread(target=work, args=(r,), name=f"map_measure-{n}", daemon=True)
               for n, r in enumerate(runners[:max(1, len(checked))])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if not return_exceptions:
        for res in results:
            if isinstance(res, BaseException):
                raise res
    return results


# --------------------------------------------------------------------------------------------------
# a local tracker and servers
# --------------------------------------------------------------------------------------------------
def _free_port(host: str) -> int:
    """A port of ``host`` that nothing listens on now (the OS picks it; there is a short race until it is used)."""
    family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _log_tail(path: str, chars: int = 2000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return "(no log)"


def _stop_process_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """End a process started in its own session and everything it started.

    The group matters: rpc_tracker and rpc_server run their loops in a `tvm.exec.popen_worker` child, and the
    server forks one process per session; SIGTERM to the top process alone leaves those running."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    # SIGKILL the group even when the top process ended: a popen_worker child may outlive it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)


@contextlib.contextmanager
def local_tracker(key: str = "local", *, host: str = "127.0.0.1", num_servers: int = 1,
                  startup_timeout: float = 60.0, server_args: Sequence[str] = (),
                  log_dir: str | None = None, fork: bool = False) -> Iterator[tuple[str, int]]:
    """Start ``python -m tvm.exec.rpc_tracker`` and ``num_servers`` ``python -m tvm.exec.rpc_server --key KEY``
    on free ports of ``host``; yield ``(host, tracker_port)`` once every server is registered; stop them all on
    exit, also on an exception. Their output goes to ``log_dir`` (a temporary folder, removed afterwards, when
    None) and is quoted in the error when one fails to start within ``startup_timeout`` seconds. A server serves
    each session in a spawned process (``--no-fork``) unless ``fork``: a forked session cannot initialize CUDA
    (``cudaErrorInitializationError``, measured on the H100 machine)."""
    missing = [m for m in ("tornado", "cloudpickle") if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(f"TVM's RPC tracker/server need the Python package(s) {', '.join(missing)}: "
                           f"pip install {' '.join(missing)}")
    if num_servers < 1:
        raise ValueError(f"num_servers must be >= 1, got {num_servers}")
    own_logs = log_dir is None
    log_dir = tempfile.mkdtemp(prefix="tilex-rpc-") if own_logs else log_dir
    os.makedirs(log_dir, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # logs are complete when quoted in an error
    deadline = time.monotonic() + startup_timeout
    procs: list[tuple[str, subprocess.Popen, str]] = []  # (what, process, log path)

    def spawn(what: str, module: str, *args) -> subprocess.Popen:
        log_path = os.path.join(log_dir, f"{what.replace(' ', '_')}.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", module, *map(str, args)], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)  # its own process group, to stop it whole
        procs.append((what, proc, log_path))
        return proc

    def fail_if_exited():
        for what, proc, log_path in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with code {proc.returncode} during startup; its log:\n"
                                   f"{_log_tail(log_path)}")

    try:
        port = _free_port(host)
        spawn("rpc tracker", "tvm.exec.rpc_tracker", "--host", host, "--port", port, "--port-end", port + 1)
        # Servers are started only once the tracker answers: a server that finds no tracker waits 5 s to retry.
        while True:
            fail_if_exited()
            try:
                _probe_tracker(host, port, timeout=1.0)
                break
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the RPC tracker on {host}:{port} did not answer within {startup_timeout:g} s;"
                                       f" its log:\n{_log_tail(procs[0][2])}") from None
                time.sleep(0.1)
        native = launcher.native_library()  # tilex.streamk_workspace, for stream-K kernels
        if native is not None and "--load-library" not in server_args:
            server_args = ("--load-library", native, *server_args)
        for n in range(num_servers):
            server_port = _free_port(host)
            spawn(f"rpc server {n}", "tvm.exec.rpc_server", "--host", host, "--port", server_port,
                  "--port-end", server_port + 1, "--tracker", f"{host}:{port}", "--key", key,
                  *(() if fork else ("--no-fork",)), *server_args)
        while True:
            fail_if_exited()
            registered = len(_servers_under(tracker_summary(host, port, timeout=5.0), key))
            if registered >= num_servers:
                break
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {what}:\n{_log_tail(p)}" for what, _, p in procs[1:])
                raise TimeoutError(f"{registered} of {num_servers} RPC server(s) under key {key!r} registered with "
                                   f"the tracker {host}:{port} within {startup_timeout:g} s; logs:\n{logs}")
            time.sleep(0.1)
        yield host, port
    finally:
        for _, proc, _ in reversed(procs):  # servers first, so that none reconnects to a stopped tracker
            _stop_process_group(proc)
        if own_logs:
            import shutil

            shutil.rmtree(log_dir, ignore_errors=True)
