"""A script run in a fresh Python process that cannot reach nvcc (none on PATH, TVM's and tilex's compile hooks
raising) and starts from an empty kernel cache: how the AOT tests prove a loaded kernel needs no compiler."""
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PREAMBLE = """
import os, shutil
import tvm, tvm_ffi
def no_nvcc(*a, **k):
    raise RuntimeError("nvcc was called")
tvm_ffi.register_global_func("tvm_callback_cuda_compile", no_nvcc, override=True)
import tilex
import tilex.env
tilex.env.find_nvcc = no_nvcc
assert shutil.which("nvcc") is None
"""


def run_without_nvcc(script, tmp_path):
    """Run `script` (after :data:`PREAMBLE`) in such a process; the empty cache is ``tmp_path / "empty-cache"``.
    Returns the CompletedProcess."""
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and not os.path.exists(os.path.join(p, "nvcc")))
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env["TILEX_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")])
    code = PREAMBLE + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
