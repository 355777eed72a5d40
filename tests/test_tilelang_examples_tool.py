"""tools/tilelang_examples.py's machinery (the measurements themselves need a TileLang checkout): the stand-in
``tilelang`` package that every example process and the processes it starts import, and the CPU mode's answers to
torch.cuda's streams and devices. Each runs in a subprocess of its own (the import hook and the CPU fakes change
the interpreter they run in)."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(REPO, "tools")


def _run(code, extra_path=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, *extra_path, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    return out.stdout


def test_stand_in_package_gives_tilex_in_a_fresh_process():
    out = _run("import tilelang, tilelang.language as T, tilex, tilex.language\n"
               "print(tilelang is tilex, T is tilex.language, tilelang.PassConfigKey is tilex.PassConfigKey)",
               extra_path=[os.path.join(TOOLS, "tilelang_alias")])
    assert out.split() == ["True", "True", "True"]


def test_cpu_mode_streams_and_devices_run_on_the_cpu():
    out = _run("import sys; sys.path.insert(0, %r)\n"
               "import tilelang_examples as te, torch\n"
               "te._cpu_torch()\n"
               "s = torch.cuda.Stream()\n"
               "with torch.cuda.stream(s), torch.cuda.device(0):\n"
               "    x = torch.ones(4, device='cuda') * 2\n"
               "torch.cuda.current_stream().synchronize()\n"
               "print(x.device.type, float(x.sum()))" % TOOLS)
    assert out.split() == ["cpu", "8.0"]


def test_cuda_home_is_a_toolkit_root_or_none():
    out = _run("import sys; sys.path.insert(0, %r)\n"
               "import tilelang_examples as te\n"
               "print(te._cuda_home())" % TOOLS).strip()
    assert out == "None" or os.path.isfile(os.path.join(out, "include", "cuda_runtime.h"))


def test_cpu_mode_timers_call_once_and_answer_a_stand_in():
    out = _run("import sys; sys.path.insert(0, %r)\n"
               "import tilelang_examples as te\n"
               "te._cpu_torch(); te._cpu_timing()\n"
               "from tilex.profiler import do_bench\n"
               "calls = []\n"
               "print(do_bench(lambda: calls.append(1)), do_bench(lambda: calls.append(1), quantiles=[0.5, 0.2]),"
               " len(calls))" % TOOLS)
    assert out.split() == ["1.0", "[1.0,", "1.0]", "2"]


def test_cpu_mode_comparisons_check_nothing():
    out = _run("import sys; sys.path.insert(0, %r)\n"
               "import tilelang_examples as te, torch\n"
               "te._cpu_torch(); te._cpu_checks()\n"
               "import tilex.testing\n"
               "torch.testing.assert_close(torch.ones(2), torch.zeros(2))\n"
               "tilex.testing.torch_assert_close(torch.ones(2), torch.zeros(2))\n"
               "print('went on')" % TOOLS)
    assert out.split() == ["went", "on"]


def test_cpu_mode_kernel_fills_outputs_and_zeroed_arguments_with_ones(tmp_path):
    script = tmp_path / "program.py"  # TVMScript reads the program's source from its file
    script.write_text("import sys; sys.path.insert(0, %r)\n"
               "import tilelang_examples as te, torch, tilex\n"
               "import tilex.language as T\n"
               "te._cpu_torch(); te._cpu_kernels()\n"
               "@T.prim_func\n"
               "def copy(A: T.Tensor((64,), 'float32'), B: T.Tensor((64,), 'float32'),"
               " C: T.Tensor((64,), 'float32')):\n"
               "    with T.Kernel(1, threads=64) as bx:\n"
               "        for i in T.Parallel(64):\n"
               "            B[i] = A[i]\n"
               "            C[i] = A[i]\n"
               "k = tilex.compile(copy, out_idx=[2], target='sm_90a')\n"
               "a = torch.full((64,), 3.0); b = torch.zeros(64)\n"
               "c = k(a, b)\n"
               "print(float(a.sum()), float(b.sum()), float(c.sum()))\n" % TOOLS)
    out = _run(f"import runpy; runpy.run_path({str(script)!r})")
    # the input keeps its values; the zeroed argument the kernel would write and the returned output are ones
    assert out.split() == ["192.0", "64.0", "64.0"]


def test_json_results_are_rewritten_whole_and_order_the_next_run(tmp_path):
    sys.path.insert(0, TOOLS)
    try:
        import tilelang_examples as te
    finally:
        sys.path.remove(TOOLS)
    path = str(tmp_path / "run.json")
    te._write_json(path, {"a.py": {"status": "OK", "seconds": 2.0}, "b.py": {"status": "OK", "seconds": 90.0}})
    assert os.listdir(tmp_path) == ["run.json"]  # no temporary file left beside it
    examples = [{"name": n} for n in ("a.py", "c.py", "b.py")]
    assert [e["name"] for e in te._longest_first(examples, path)] == ["b.py", "a.py", "c.py"]
    assert te._longest_first(examples, str(tmp_path / "absent.json")) == examples
    (tmp_path / "bad.json").write_text("[1, 2")
    assert te._longest_first(examples, str(tmp_path / "bad.json")) == examples


def test_timers_of_examples_side_by_side_hold_the_timing_lock(tmp_path):
    lock = tmp_path / "timing.lock"
    lock.write_text("")
    out = _run("import sys, os, fcntl; sys.path.insert(0, %r)\n"
               "import tilelang_examples as te\n"
               "from tilex.jit import bench\n"
               "other = os.open(%r, os.O_RDWR)\n"
               "def held():\n"
               "    try:\n"
               "        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
               "    except BlockingIOError:\n"
               "        return True\n"
               "    fcntl.flock(other, fcntl.LOCK_UN)\n"
               "    return False\n"
               "seen = []\n"
               "def core(fn, *a, **k):\n"
               "    seen.append(held())\n"
               "    return bench_inner(fn) if fn else 1.0\n"
               "def bench_inner(fn):\n"
               "    return fn()\n"
               "bench.do_bench = core\n"
               "te._serialized_timing(%r)\n"
               "from tilex.profiler import do_bench\n"
               "nested = lambda: bench.do_bench(None)\n"  # a timer inside a timer keeps the lock it holds
               "print(do_bench(nested), seen, held())" % (TOOLS, str(lock), str(lock)))
    assert out.split() == ["1.0", "[True,", "True]", "False"]


def test_failures_that_others_may_cause_are_run_again_alone():
    sys.path.insert(0, TOOLS)
    try:
        import tilelang_examples as te
    finally:
        sys.path.remove(TOOLS)
    assert te._crowded_out({"status": "ERROR", "reason": "OutOfMemoryError: CUDA out of memory. Tried to allocate"})
    assert te._crowded_out({"status": "ERROR", "reason": "timed out after 300 s"})
    assert te._crowded_out({"status": "ERROR", "reason": "process died (exit -9): ..."})
    assert not te._crowded_out({"status": "ERROR", "reason": "TypeError: do_bench() got an unexpected keyword"})
    assert not te._crowded_out({"status": "FAIL", "reason": "out of memory"})


def test_report_prints_the_timing_lines_of_passing_examples(tmp_path, capsys):
    sys.path.insert(0, TOOLS)
    try:
        import tilelang_examples as te
    finally:
        sys.path.remove(TOOLS)
    path = str(tmp_path / "run.json")
    te._write_json(path, {"a.py": {"status": "OK", "timings": ["Ref: 0.5 ms", "Tile-lang: 0.25 ms"]},
                          "b.py": {"status": "ERROR", "timings": ["latency: 3 ms"]},
                          "c.py": {"status": "OK", "timings": []}})
    assert te.main(["--report", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["a.py", "    Ref: 0.5 ms", "    Tile-lang: 0.25 ms", "# 1 examples printed timings"]
