"""tilex.autotuner.rpc: timing exported libraries through TVM's RPC tracker and servers on this host.

The CPU tests build a small library with TVM's LLVM backend and time it through a real local tracker and two
real servers (``python -m tvm.exec.rpc_tracker`` / ``rpc_server``), started once for the module. The GPU test
times a tilex kernel the same way on the CUDA device.
"""
import math
import os
import socket
import time

import pytest

pytest.importorskip("tornado")  # TVM's tracker (pip install tilex[tune])
pytest.importorskip("cloudpickle")  # TVM's server

from tilex.autotuner.rpc import RemoteRunner, local_tracker, map_measure, tracker_summary  # noqa: E402

KEY = "tilex-test-cpu"
N = 1024
VEC = ((N,), "float32")


def _sessions_of(pattern: str) -> set:
    """Session ids of the processes whose command line contains ``pattern`` (local_tracker starts each tracker
    and server as the leader of its own session)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern in cmdline:
            found.add(int(pid))
    return found


def _live_members(session_ids: set) -> list:
    """Live (not zombie) processes in any of ``session_ids``."""
    live = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, sid = fields[0], int(fields[4])
        if sid in session_ids and state != "Z":
            live.append(int(pid))
    return live


@pytest.fixture(scope="module")
def tracker():
    # CPU sessions fork (fast); the GPU test below uses the default, a spawned process per session
    with local_tracker(KEY, num_servers=2, startup_timeout=120, fork=True) as (host, port):
        started = _sessions_of(f"--port {port} ") | _sessions_of(f"{host}:{port} ")
        yield host, port
    if os.path.isdir("/proc"):
        assert started, "found no tracker/server process to check"
        deadline = time.monotonic() + 5
        while _live_members(started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _live_members(started), "tracker/server processes outlived local_tracker"


@pytest.fixture(scope="module")
def cpu_lib(tmp_path_factory):
    """A shared library with add(A, B, C): C = A + B and scale(A, B, alpha): B = A * alpha, 1024 float32."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def add(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32"), C: T.Buffer((N,), "float32")):
        T.func_attr({"global_symbol": "add"})
        for i in range(N):
            C[i] = A[i] + B[i]

    @T.prim_func
    def scale(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32"), alpha: T.float32):
        T.func_attr({"global_symbol": "scale"})
        for i in range(N):
            B[i] = A[i] * alpha

    path = str(tmp_path_factory.mktemp("rpc") / "vec.so")
    tvm.compile(tvm.IRModule({"add": add, "scale": scale}), target="llvm").export_library(path)
    return path


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def _check_times(times, repeat):
    assert len(times) == repeat
    assert all(math.isfinite(t) and t > 0 for t in times), times


# ---------------------------------------------------------------------------------------------- tracker
def test_local_tracker_registers_servers(tracker):
    summary = tracker_summary(*tracker)
    keys = [s["key"] for s in summary["server_info"]]
    assert keys.count("server:" + KEY) == 2, summary
    assert "server:" + KEY in tracker_summary(*tracker, as_text=True)


def test_local_tracker_reports_a_server_that_fails_to_start():
    with pytest.raises(RuntimeError, match="rpc server 0 exited") as info:
        with local_tracker("tilex-test-bad", server_args=["--no-such-flag"], startup_timeout=60) as _:
            pytest.fail("local_tracker yielded although its server cannot start")
    assert "--no-such-flag" in str(info.value)  # the server's log (argparse's complaint) is quoted


# ---------------------------------------------------------------------------------------------- measuring
def test_measure_cpu_through_tracker(tracker, cpu_lib):
    runner = RemoteRunner(*tracker, KEY, device="cpu", session_timeout=60)
    _check_times(runner.measure(cpu_lib, "add", [VEC, VEC, VEC], number=5, repeat=3), 3)
    # a scalar argument, zero-filled tensors, and a minimum repeat time
    times = runner.measure(cpu_lib, "scale", [VEC, VEC, 2.5], number=1, repeat=2, min_repeat_ms=2, fill="zeros")
    _check_times(times, 2)
    assert min(times) < 2  # per-run time: `number` grew until a repeat lasted 2 ms


def test_failed_measurements_free_their_server(tracker, cpu_lib):
    # Two servers: were a failed session kept alive by its exception (whose frames reference the remote
    # tensors), the third request would wait in vain.
    runner = RemoteRunner(*tracker, KEY, device="cpu", request_timeout=10)
    errors = []
    for specs in ([VEC, VEC], [VEC], [VEC, VEC]):  # too few arguments: TVM raises inside the remote call
        with pytest.raises(Exception, match="arguments") as info:
            runner.measure(cpu_lib, "add", specs)
        errors.append(info.value)  # kept alive on purpose
    with pytest.raises(LookupError, match="no function 'nope'"):
        runner.measure(cpu_lib, "nope", [VEC, VEC, VEC])
    _check_times(runner.measure(cpu_lib, "add", [VEC, VEC, VEC], repeat=1), 1)


def test_map_measure_keeps_job_order(tracker, cpu_lib):
    runners = [RemoteRunner(*tracker, KEY, device="cpu")] * 2
    jobs = [dict(lib_path=cpu_lib, func_name="add", arg_specs=[VEC, VEC, VEC], number=2, repeat=r)
            for r in (1, 2, 3, 4)]
    jobs.insert(2, dict(lib_path=cpu_lib, func_name="nope", arg_specs=[VEC]))
    results = map_measure(runners, jobs, return_exceptions=True)
    assert isinstance(results[2], LookupError)
    for res, repeat in zip(results[:2] + results[3:], (1, 2, 3, 4)):
        _check_times(res, repeat)
    with pytest.raises(LookupError, match="nope"):
        map_measure(runners, jobs)


def _wait_for_free_servers(host, port, count, timeout=60.0):
    """Block until the tracker lists ``count`` free servers of KEY (a server re-registers a moment after its
    last session ends)."""
    deadline = time.monotonic() + timeout
    while True:
        free = tracker_summary(host, port).get("queue_info", {}).get(KEY, {}).get("free", 0)
        if free >= count:
            return
        assert time.monotonic() < deadline, f"only {free} of {count} servers free after {timeout} s"
        time.sleep(0.1)


class _IntervalRunner(RemoteRunner):
    """Records when each measurement in a session started and ended."""

    def __init__(self, *args, intervals, **kwargs):
        super().__init__(*args, **kwargs)
        self.intervals = intervals

    def _measure_in_session(self, session, **job):
        start = time.monotonic()
        try:
            return super()._measure_in_session(session, **job)
        finally:
            self.intervals.append((start, time.monotonic()))


def test_map_measure_runs_sessions_in_parallel(tracker, cpu_lib):
    # Checked by overlap, not by wall time: on a loaded 2-core CI machine two CPU-bound sessions need not
    # finish sooner than one, but they must run at the same time.
    job = dict(lib_path=cpu_lib, func_name="add", arg_specs=[VEC, VEC, VEC], number=1, repeat=3, min_repeat_ms=300)
    serial, parallel = [], []
    _wait_for_free_servers(*tracker, 2)
    map_measure([_IntervalRunner(*tracker, KEY, device="cpu", intervals=serial)], [job, job])
    (s0, e0), (s1, e1) = sorted(serial)
    assert s1 >= e0  # one session: one job after the other
    _wait_for_free_servers(*tracker, 2)
    runner = _IntervalRunner(*tracker, KEY, device="cpu", intervals=parallel)
    map_measure([runner, runner], [job, job])  # two threads, two sessions on the two servers
    (s0, e0), (s1, e1) = sorted(parallel)
    overlap = min(e0, e1) - s1
    assert overlap > 0.5 * min(e0 - s0, e1 - s1), (parallel, overlap)


# ---------------------------------------------------------------------------------------------- bad input
def test_missing_library_is_reported_before_any_connection(tmp_path):
    missing = str(tmp_path / "nothing.so")
    runner = RemoteRunner("127.0.0.1", _unused_port(), KEY, device="cpu")
    with pytest.raises(FileNotFoundError, match="nothing.so"):
        runner.measure(missing, "add", [VEC])


def test_unreachable_tracker_fails_fast(cpu_lib):
    port = _unused_port()
    runner = RemoteRunner("127.0.0.1", port, KEY, device="cpu", connect_timeout=1)
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        runner.measure(cpu_lib, "add", [VEC, VEC, VEC])
    with pytest.raises(ConnectionError, match="rpc_tracker"):
        tracker_summary("127.0.0.1", port, timeout=1)
    assert time.monotonic() - start < 5


def test_unknown_key_times_out_with_a_clear_error(tracker, cpu_lib):
    runner = RemoteRunner(*tracker, "no-such-key", device="cpu", request_timeout=1)
    start = time.monotonic()
    with pytest.raises(LookupError, match=f"no-such-key.*{KEY}"):
        runner.measure(cpu_lib, "add", [VEC, VEC, VEC])
    assert time.monotonic() - start < 10


def test_cuda_device_on_a_cpu_server_is_named(tracker, cpu_lib):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("the local server has a CUDA device")
    runner = RemoteRunner(*tracker, KEY, device="cuda")
    with pytest.raises(RuntimeError, match="no cuda device"):
        runner.measure(cpu_lib, "add", [VEC, VEC, VEC])


@pytest.mark.parametrize("specs", [[(N, "float32")], [((N,), 32)], [((-1,), "float32")], "float32", [None]])
def test_bad_arg_specs(cpu_lib, specs):
    with pytest.raises(ValueError, match="arg_specs"):
        RemoteRunner("127.0.0.1", _unused_port(), KEY, device="cpu").measure(cpu_lib, "add", specs)


def test_bad_options(cpu_lib):
    with pytest.raises(ValueError, match="device"):
        RemoteRunner("127.0.0.1", 1, KEY, device="tpu")
    runner = RemoteRunner("127.0.0.1", _unused_port(), KEY, device="cpu")
    with pytest.raises(ValueError, match="repeat"):
        runner.measure(cpu_lib, "add", [VEC], repeat=0)
    with pytest.raises(ValueError, match="fill"):
        runner.measure(cpu_lib, "add", [VEC], fill="ones")
    with pytest.raises(ValueError, match="jobs\\[0\\]"):
        map_measure([runner], [dict(lib_path=cpu_lib, func="add", arg_specs=[VEC])])


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_measure_tilex_kernel_on_gpu(tmp_path):
    import tilex
    import tilex.language as T

    n, block = 1 << 20, 256

    @T.prim_func
    def double(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2.0

    kernel = tilex.compile(double)
    lib = kernel.export_library(str(tmp_path / "double.so"))
    with local_tracker("tilex-test-gpu") as (host, port):
        runner = RemoteRunner(host, port, "tilex-test-gpu", device="cuda")
        times = runner.measure(lib, kernel.symbol, [((n,), "float32")] * 2, number=20, repeat=3)
    _check_times(times, 3)
    assert max(times) < 5  # 8 MiB moved: microseconds, not milliseconds


@pytest.mark.gpu
def test_measure_stream_k_kernel_on_gpu(tmp_path):
    """A stream-K GEMM's host code asks tilex.streamk_workspace for its workspace; the servers local_tracker starts
    load tilex's native library, which registers it, so a library exported from tilex runs there."""
    import tilex
    from tilex.kernels.gemm import matmul

    kernel = tilex.compile(matmul(4096, 4096, 4096, 128, 256, 64, 3, 256), pass_configs={"tilex.stream_k": 1})
    assert "streamk_fixup" in kernel.get_kernel_source()
    lib = kernel.export_library(str(tmp_path / "gemm.so"))
    with local_tracker("tilex-test-sk") as (host, port):
        runner = RemoteRunner(host, port, "tilex-test-sk", device="cuda")
        times = runner.measure(lib, kernel.symbol, [((4096, 4096), "float16")] * 3, number=5, repeat=2)
    _check_times(times, 2)
