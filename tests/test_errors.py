"""Errors in a tile program reach the user as one exception naming the file and line of the program (issue 12).

Scripts run in a subprocess, uncaught, as a user runs them: stderr must show the message and the place, without
TVM's frames (TVM's excepthook used to print only "run with TVM_BACKTRACE=1") and without tilex's pass frames.
"""
import os
import re
import subprocess
import sys
import textwrap

import pytest
import tvm

import tilex.language as T
from tilex.engine import lower_to_tir
from tilex.ir.source import TileScriptError
from tilex.op.base import TileOpError

SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})

HEADER = "import tilex\nimport tilex.language as T\n\n"


def _run(tmp_path, body, backtrace=False):
    """Run a script (HEADER + body) uncaught; returns (path, stderr)."""
    path = tmp_path / "user_program.py"
    path.write_text(HEADER + textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "TVM_BACKTRACE", "TILEX_BACKTRACE")}
    env["TILEX_DISABLE_CACHE"] = "1"
    if backtrace:
        env["TILEX_BACKTRACE"] = "1"
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0, proc.stdout
    return str(path), proc.stderr


def _line_of(path, text):
    lines = open(path).read().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)


def _assert_no_tvm_frames(stderr):
    assert "site-packages/tvm" not in stderr and "TVM_BACKTRACE" not in stderr, stderr
    assert stderr.count("Traceback (most recent call last)") == 1, stderr


def test_undefined_name_shows_file_line_and_caret(tmp_path):
    path, err = _run(tmp_path, """
        @T.prim_func
        def main(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for i in T.Parallel(128):
                    A[i] = undefined_name + 1.0
        """)
    line = _line_of(path, "undefined_name + 1.0")
    assert "tilex.ir.source.TileScriptError: Undefined variable: undefined_name" in err, err
    assert f"--> {path}:{line}:" in err and "A[i] = undefined_name + 1.0" in err and "^^^" in err, err
    _assert_no_tvm_frames(err)


def test_exception_raised_in_body_keeps_its_type(tmp_path):
    path, err = _run(tmp_path, """
        @T.prim_func
        def main(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=2048) as bx:
                for i in T.Parallel(128):
                    A[i] = 1.0
        """)
    line = _line_of(path, "threads=2048")
    assert re.search(r"^ValueError: T\.Kernel: .*2048.*$", err, re.M), err
    assert f"--> {path}:{line}:" in err and "with T.Kernel(1, threads=2048) as bx:" in err, err
    _assert_no_tvm_frames(err)


def test_backtrace_env_shows_the_frames(tmp_path):
    _, err = _run(tmp_path, """
        @T.prim_func
        def main(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=2048) as bx:
                A[0] = 1.0
        """, backtrace=True)
    assert "tvm/script/parser" in err and "ValueError: T.Kernel" in err, err


def test_compile_error_names_the_operator_line_under_a_short_traceback(tmp_path):
    path, err = _run(tmp_path, """
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float32"), B: T.Tensor((32, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float32")
                B_s = T.alloc_shared((32, 64), "float32")
                C_l = T.alloc_fragment((64, 64), "float16")
                T.copy(A[0, 0], A_s)
                T.copy(B[0, 0], B_s)
                T.gemm(A_s, B_s, C_l)

        tilex.compile(main, target="sm_80")
        """)
    line = _line_of(path, "T.gemm(A_s, B_s, C_l)")
    assert "tilex.op.base.TileOpError: T.gemm: unsupported dtypes" in err, err
    assert f"--> {path}:{line}:" in err, err
    _assert_no_tvm_frames(err)
    assert "tilex/transform/" not in err and "tilex/op/" not in err, err  # the passes' frames are dropped
    assert err.count('  File "') <= 8, err


# ---- in process: the exceptions themselves ----------------------------------------------------------------------

def _here(text):
    return rf"{re.escape(__file__)}:{_line_of(__file__, text)}"


def test_parse_error_type_and_message():
    with pytest.raises(ValueError, match=_here("# too " + "many threads") + ":") as ei:
        @T.prim_func
        def f(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=4096) as bx:  # too many threads
                A[0] = 1.0
    assert ei.type is ValueError and len(ei.traceback) == 3  # this test, prim_func and its decorator: no TVM frame

    with pytest.raises(TileScriptError, match="Undefined variable: not_defined_anywhere"):
        @T.prim_func
        def g(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A[0] = not_defined_anywhere  # noqa: F821


def test_lowering_error_of_a_parallel_loop_names_its_line():
    @T.prim_func
    def f(X: T.Tensor((64, 128), "float32"), Z: T.Tensor((32, 128), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 128), "float32")
            y = T.alloc_fragment((32, 128), "float32")
            T.copy(X[0, 0], x)
            for i, j in T.Parallel(64, 128):  # the folding loop: two iterations write one element
                y[i // 2, j] = x[i, j]
            T.copy(y, Z[0, 0])

    with pytest.raises(TileOpError, match=r"accesses fragment 'y'(.|\n)*--> " + _here("# the folding loop")):
        lower_to_tir(f, SM80)


def test_macro_error_names_the_macro_line_and_the_call():
    @T.macro
    def mm(A_s, B_s, C_l):
        T.gemm(A_s, B_s, C_l)  # inside the macro

    @T.prim_func
    def f(A: T.Tensor((64, 32), "float32"), B: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float32")
            B_s = T.alloc_shared((32, 64), "float32")
            C_l = T.alloc_fragment((64, 64), "float16")
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            mm(A_s, B_s, C_l)  # the macro call

    with pytest.raises(TileOpError, match=r"unsupported dtypes(.|\n)*--> " + _here("# inside the macro")
                       + r"(.|\n)*--> " + _here("# the macro call")):
        lower_to_tir(f, SM80)
