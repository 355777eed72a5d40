"""T.print: what each kind of operand lowers to, the generated CUDA, and that nvcc accepts it (CPU only)."""
import re
import shutil

import pytest
import tvm
from tvm import tirx

import tilex.language as T
from tilex.engine import build, lower_to_tir
from tilex.op.base import TileOpError
from tilex.language.canonicalize import canonicalize
from tilex.transform.layout_inference import LAYOUT_MAP_ATTR, layout_inference

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _kernel(print_what, msg=""):
    """A small gemm block with prints at the points the tests look at."""

    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), B: T.Tensor((64, 256), "float16"),
             C: T.Tensor((256, 256), "float16")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            n = T.alloc_local((1,), "int32")
            n[0] = bx * 10 + by
            T.clear(C_l)
            for k in T.serial(2):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                if print_what == "shared":
                    T.print(A_s, msg=msg)
                T.gemm(A_s, B_s, C_l)
            if print_what == "fragment":
                T.print(C_l, msg=msg)
            if print_what == "scalar":
                T.print(bx * 10 + by, msg=msg)
            if print_what == "local":
                T.print(n, msg=msg)
            if print_what == "global":
                T.print(A[0:2, 3:5], msg=msg)
            T.copy(C_l, C[by * 128, bx * 128])

    return main


def _small(msg=""):
    """Copy a tile into shared memory, print it and a scalar (no gemm: row-major shared layout)."""

    @T.prim_func
    def main(A: T.Tensor((16, 32), "float16"), O: T.Tensor((16, 32), "float16")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((16, 32), "float16")
            T.copy(A, A_s)
            T.print(A_s)
            T.print(bx * 10 + by, msg=msg)
            T.copy(A_s, O)

    return main


def _cuda(func):
    src = build(func, SM90).mod.imports[0].inspect_source()
    if shutil.which("nvcc") is not None:
        from tilex.engine.nvcc import compile_cuda

        assert len(compile_cuda(src, "sm_90a")) > 1000
    return src


def test_scalar_print_is_per_thread_with_escaped_message():
    script = lower_to_tir(_kernel("scalar", msg='say "hi" 100%\n'), SM90)["main"].script()
    assert "tilex::debug_print<int>" in script
    src = _cuda(_small(msg='say "hi" 100%\n'))
    line = next(ln for ln in src.splitlines() if "debug_print<int>" in ln)
    # the message is a valid C literal: quotes and newline escaped, '%' doubled for printf
    expected = "\"msg='say \\\"hi\\\" 100%%\\n' block=(%d, %d, %d) thread=(%d, %d, %d) value=%d (int32)\\n\""
    assert expected in line
    before = src[:src.index(line)]
    assert not before.rstrip().endswith("if (((int)threadIdx.x) == 0) {")  # every thread prints


def test_shared_buffer_print_runs_on_thread_zero_through_the_layout():
    func = lower_to_tir(_kernel("shared", msg="A tile"), SM90)["main"]
    script = func.script()
    assert "if v == 0:" in script
    assert "for pr0, pr1 in T.grid(128, 32):" in script
    line = next(ln for ln in script.splitlines() if "debug_print<float>" in ln)
    assert "A_s[%d, %d]=%f (float16)" in line and "msg='A tile'" in line
    assert "^" in line  # read through the gemm swizzle, not row-major


def test_shared_print_gets_a_barrier_before_it():
    src = _cuda(_small())
    body = src[re.search(r"main_kernel\([^;{]*\) \{", src).start():]
    guard = body.rindex("if (((int)threadIdx.x) == 0)", 0, body.index("debug_print"))  # the print's own guard
    assert "__syncthreads();" in body[:guard]  # the copy's writes are visible to the printing thread
    assert "__syncthreads();" not in body[guard:body.index("debug_print<int>")]  # no barrier inside the guard


def test_fragment_print_prints_each_threads_elements():
    script = lower_to_tir(_kernel("fragment"), SM90)["main"].script()
    assert "for pr_l in T.unroll(128):" in script  # 128 x 128 fp32 accumulator over 128 threads
    line = next(ln for ln in script.splitlines() if "debug_print" in ln)
    assert "C_l[%d, %d]=%f (float32)" in line and re.search(r"C_l\[(T\.Add\()?pr_l", line) and "v //" in line


def test_local_and_global_prints():
    local = lower_to_tir(_kernel("local"), SM90)["main"].script()
    line = next(ln for ln in local.splitlines() if "debug_print" in ln)
    assert "n[%d]=%d (int32)" in line
    glob = lower_to_tir(_kernel("global"), SM90)["main"].script()
    assert "for pr0, pr1 in T.grid(2, 2):" in glob and "3 + pr1" in glob and "if v == 0:" in glob


def test_print_does_not_change_layouts():
    def layouts(func):
        out = layout_inference(canonicalize(func), SM90)
        return {b.name: str(v) for b, v in out.attrs[LAYOUT_MAP_ATTR].items()}

    assert layouts(_kernel("fragment")) == layouts(_kernel(None))
    assert layouts(_kernel("shared")) == layouts(_kernel(None))


def test_print_inside_a_pipelined_loop_keeps_the_pipeline():
    @T.prim_func
    def main(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 256), "float16"),
             C: T.Tensor((256, 256), "float16")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(8, num_stages=3):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                T.print(B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * 128, bx * 128])

    script = lower_to_tir(main, SM90, {"tilex.disable_warp_specialized": True})["main"].script()
    assert "tilex::cp_async<16>" in script and "B_s[%d, %d, %d]" in script  # the stage index is printed too


@pytest.mark.parametrize("value,conv,ctype", [
    (tirx.const(7, "int64"), "%lld", "long long"), (tirx.const(7, "uint8"), "%u", "unsigned int"),
    (tirx.const(1.5, "float16"), "%f", "float"), (tirx.const(1.5, "bfloat16"), "%f", "float"),
    (tirx.const(1.5, "float64"), "%f", "double"), (tirx.const(True, "bool"), "%d", "int"),
    (3, "%d", "int"), (2.5, "%f", "float")])
def test_value_formats(value, conv, ctype):
    call = T.print(value)
    assert str(call.args[1].value).endswith(f"value={conv} ({_dtype(value)})\\n")
    assert f"<{ctype}>" in str(call)


def _dtype(v):
    return {int: "int32", float: "float32"}.get(type(v)) or str(v.ty.dtype)


@needs_nvcc
def test_all_prints_compile_with_nvcc():
    from tilex.engine.nvcc import compile_cuda

    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), B: T.Tensor((64, 256), "float16"),
             C: T.Tensor((256, 256), "float16")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                T.print(A_s, msg="A_s")
                T.gemm(A_s, B_s, C_l)
            T.print(C_l, msg="acc %")
            T.print(A[0:2, 3:5])
            T.print(bx, msg='"quoted"\n')
            T.print(T.int64(1) << 40)
            T.print(T.uint8(7))
            T.print(T.bfloat16(1.5))
            T.print(bx < by)
            T.copy(C_l, C[by * 128, bx * 128])

    src = _cuda(main)
    assert len(re.findall(r"tilex::debug_print<", src)) == 8
    assert "tilex::debug_print<long long>" in src
    assert len(compile_cuda(src, "sm_90a")) > 1000


def test_print_errors():
    with pytest.raises(TypeError, match="msg"):
        T.print(tirx.const(1, "int32"), msg=3)
    with pytest.raises(TypeError, match="vector"):
        T.print(tirx.Broadcast(tirx.const(1.0, "float32"), 4))
    with pytest.raises(TypeError, match="buffer"):
        T.print("text")
    frag = tirx.decl_buffer((16, 16), "float32", "F", scope="local.fragment")
    with pytest.raises(TileOpError, match="whole"):
        T.print(frag[0:8, 0:16])
