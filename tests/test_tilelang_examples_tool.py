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
