"""TileLang names that stopped its examples at import or parse time: ``tilex.tvm`` and the TVM fork's names
(``tvm.tirx.PrimExpr``, ``expr.dtype``, ``tvm.testing.requires_package``), ``tilex.DataType``, ``T.reinterpret`` in
both argument orders, the ``T.ptx_*`` copies, ``tilex.engine.callback`` (CPU: programs compiled for sm_90a;
T.im2col is tests/op/test_im2col.py, T.tfloat32 tests/op/test_gemm_operand_types.py)."""
import pytest
import tvm
from tvm import tirx

import tilex
import tilex.language as T
from tilex.engine import callback
from tilex.jit import cache


def cuda(func, target="sm_90a"):
    src = tilex.compile(func, target=target).get_kernel_source()
    return src[src.index('extern "C"'):]


# ---- tilex.tvm, tilex.DataType and the TVM fork's names -------------------------------------------------------------
def test_tilex_tvm_is_the_installed_tvm():
    from tilex import tvm as tilex_tvm

    assert tilex_tvm is tvm
    assert "tvm" in tilex.__all__ and "DataType" in tilex.__all__


def test_data_type_is_tvms_dtype_class():
    from tilex import DataType

    assert DataType is tvm.DataType
    assert DataType("float16").bits == 16 and DataType(T.bfloat16).bits == 16 and DataType("int4").bits == 4
    assert DataType("float16x2").lanes == 2
    assert 128 // DataType(T.float16).bits == 8  # the examples' `MAX_TRANSACTION_SIZE_BITS // DataType(d).bits`


def test_prim_expr_is_the_expression_base_class():
    assert tvm.tirx.PrimExpr is tvm.ir.expr.Expr
    x = tirx.Var("x", "int32")
    for e in (x, x + 1, tirx.const(1.5, "float32"), tirx.Cast("float16", x)):
        assert isinstance(e, tirx.PrimExpr)
    assert not isinstance(3, tirx.PrimExpr)


def test_expressions_have_a_dtype():
    x = tirx.Var("x", "uint8")
    assert x.dtype == "uint8" and x.dtype == T.uint8
    assert tirx.const(3, "int64").dtype == "int64"
    assert tirx.Cast("float16", x).dtype == "float16"
    assert (tirx.Var("y", "float32") * 2.0).dtype == "float32"
    assert tirx.Var("p", "handle").dtype == "handle"
    buf = tirx.decl_buffer((4, 8), "bfloat16", name="B")
    assert buf.dtype == "bfloat16"  # a buffer keeps TVM 0.27's answer: its element type
    assert tirx.BufferLoad(buf, [0, 1]).dtype == "bfloat16"
    assert str(tirx.Var("v", "float16x4").dtype) == "float16x4"


def test_fork_names_installed_once_and_kept():
    from tilex.ir import tvm_fork

    before = tvm.ir.expr.Var.dtype
    tvm_fork.install()
    tvm_fork.install()
    assert tvm.ir.expr.Var.dtype is before
    assert tirx.Var("z", "int16").dtype == "int16"


def test_tvm_testing_requires_package_once_tilex_testing_is_imported():
    import tilex.testing

    import tvm.testing

    assert tvm.testing.requires_package is tilex.testing.requires_package
    def needs_it():
        pass

    marked = tvm.testing.requires_package("no_such_package_tilex_test")(needs_it)
    assert any(m.name == "skipif" and m.args[0] for m in marked.pytestmark)


def _u8_to_f16(nbit: int, val: tirx.PrimExpr, pos: tirx.PrimExpr, dtype: str):
    """An example-style helper: annotations with tirx.PrimExpr, checks on val.dtype, tirx builders."""
    assert val.dtype == T.uint8 and dtype == T.float16
    mask = tirx.const((1 << nbit) - 1, T.uint16)
    f4 = (val >> (pos.astype(T.uint16) * tirx.const(nbit, T.uint16))) & mask
    return tirx.reinterpret(T.float16, (f4 << tirx.const(10, T.uint16)).astype(T.uint16))


def test_example_style_helper_compiles():
    @T.prim_func
    def main(B: T.Tensor((128, 64), "uint8"), C: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(128, 128):
                C[i, j] = _u8_to_f16(4, B[i, j // 2], j % 2, dtype=T.float16)

    src = cuda(main)
    assert "B_ptr" in src and "C_ptr" in src


# ---- T.reinterpret ------------------------------------------------------------------------------------------------
def _reinterpret_program(tilelang_order):
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "uint32"), C: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                if tilelang_order:
                    B[i] = T.reinterpret(A[i], T.uint32)
                    C[i] = T.reinterpret(B[i] ^ T.uint32(0x80000000), "float32")
                else:
                    B[i] = T.reinterpret(T.uint32, A[i])
                    C[i] = T.reinterpret("float32", B[i] ^ T.uint32(0x80000000))

    return main


def test_reinterpret_takes_both_argument_orders():
    a, b = cuda(_reinterpret_program(True)), cuda(_reinterpret_program(False))
    assert a == b
    assert "(*(uint4 *)(&(v_)))" in a and "(*(float4 *)(&(__1)))" in a  # bit casts, not value conversions


def test_reinterpret_expressions():
    x = tirx.Var("x", "float16")
    for e in (T.reinterpret(x, T.uint16), T.reinterpret(T.uint16, x), T.reinterpret(x, dtype="uint16"),
              T.reinterpret(dtype=T.uint16, value=x), T.reinterpret(x, tvm.ir.PrimType("uint16"))):
        assert isinstance(e, tvm.ir.Call) and e.dtype == "uint16" and e.args[0].same_as(x)
    assert T.reinterpret(T.uint64(0), dtype="handle").dtype == "handle"
    assert T.reinterpret(tirx.Var("p", "uint32"), T.float16x2).dtype == "float16x2"
    assert T.reinterpret(tirx.Cast("float4_e2m1fn", tirx.Var("f", "float32")), T.uint8).dtype == "uint8"
    assert T.reinterpret(tirx.Var("q", "uint8"), "float8_e4m3").dtype == "float8_e4m3fn"  # TileLang's alias


def test_reinterpret_errors():
    x = tirx.Var("x", "float16")
    with pytest.raises(ValueError, match="float16 .16 bits. cannot be reinterpreted as float32 .32 bits."):
        T.reinterpret(x, T.float32)
    with pytest.raises(TypeError, match="both arguments are dtypes"):
        T.reinterpret("float32", T.uint32)
    with pytest.raises(TypeError, match="one argument must be a dtype"):
        T.reinterpret(x, x)
    with pytest.raises(TypeError, match="not the Python number 5"):
        T.reinterpret(5, T.uint32)
    with pytest.raises(ValueError, match="unknown dtype 'floatish'"):
        T.reinterpret(x, "floatish")


# ---- T.ptx_* ------------------------------------------------------------------------------------------------------
def test_ptx_cp_async_commit_and_wait_compile():
    @T.prim_func
    def main(A: T.Tensor((16, 64), "float16"), B: T.Tensor((16, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_shared((16, 64), "float16")
            tx = T.get_thread_binding()
            T.ptx_cp_async(T.access_ptr(S[tx // 8, tx % 8 * 8], "w", 8), T.access_ptr(A[tx // 8, tx % 8 * 8], "r", 8),
                           8)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.sync_threads()
            for i, j in T.Parallel(16, 64):
                B[i, j] = S[i, j]

    src = cuda(main)
    assert "cp_async" in src and "commit" in src and "wait" in src


# ---- tilex.engine.callback ------------------------------------------------------------------------------------------
@pytest.fixture
def no_postproc():
    callback.clear_cuda_postproc()
    yield
    callback.clear_cuda_postproc()


def _add_one():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                A[i] = A[i] + 1.0

    return main


MARK = "// edited by test_tilelang_names2"


def test_cuda_postproc_edits_what_nvcc_compiles(no_postproc):
    from tilex.engine.callback import register_cuda_postproc_callback

    seen = []

    @register_cuda_postproc_callback
    def edit(code, target):
        seen.append((type(code), target.kind.name, str(target.attrs["arch"])))
        return code.replace('extern "C" __global__', MARK + '\nextern "C" __global__', 1)

    assert callback.cuda_postproc() is edit
    src = tilex.compile(_add_one(), target="sm_90a").get_kernel_source()
    assert seen == [(str, "cuda", "sm_90a")]
    assert MARK in src and src.index('#include "tilex/common.h"') < src.index(MARK)  # after tilex's own edits

    @register_cuda_postproc_callback
    def broken(code, target):
        return code + "\nthis is not C++;\n"

    with pytest.raises(tilex.TilexCompileError):
        tilex.compile(_add_one(), target="sm_90a")
    callback.clear_cuda_postproc()
    assert MARK not in tilex.compile(_add_one(), target="sm_90a").get_kernel_source()


def test_cuda_postproc_decorator_forms_and_override(no_postproc):
    from tilex.engine.callback import register_cuda_postproc, register_cuda_postproc_callback

    def first(code, target):
        return code

    def second(code, target):
        return code

    assert register_cuda_postproc_callback()(first) is first and callback.cuda_postproc() is first
    with pytest.raises(ValueError, match="already registered"):
        register_cuda_postproc_callback(override=False)(second)
    with pytest.raises(ValueError, match="already registered"):
        register_cuda_postproc_callback(False)(second)
    assert callback.cuda_postproc() is first
    register_cuda_postproc(second)
    assert callback.cuda_postproc() is second
    assert tilex.register_cuda_postproc is register_cuda_postproc
    assert tilex.engine.register_cuda_postproc is register_cuda_postproc
    with pytest.raises(TypeError, match="expected a function"):
        register_cuda_postproc("code")
    with pytest.raises(TypeError, match="use it as a decorator"):
        register_cuda_postproc_callback("code")


def test_cuda_postproc_errors_keep_their_type(no_postproc):
    callback.register_cuda_postproc(lambda code, target: None)
    with pytest.raises(TypeError, match="returned NoneType, not the CUDA source"):
        tilex.compile(_add_one(), target="sm_90a")

    def fails(code, target):
        raise KeyError("the user's own error")

    callback.register_cuda_postproc(fails)
    with pytest.raises(KeyError, match="own error"):
        tilex.compile(_add_one(), target="sm_90a")


def test_cache_is_off_while_a_postproc_is_registered(no_postproc):
    was = cache.enabled()
    callback.register_cuda_postproc(lambda code, target: code)
    assert not cache.enabled() and not tilex.is_cache_enabled()
    callback.clear_cuda_postproc()
    assert cache.enabled() == was


@pytest.mark.parametrize("name", ["register_hip_postproc", "register_hip_postproc_callback", "register_c_postproc",
                                  "register_c_postproc_callback", "register_metal_postproc",
                                  "register_metal_postproc_callback"])
def test_other_backends_hooks_are_refused(name):
    with pytest.raises(NotImplementedError, match=name):
        getattr(callback, name)(lambda code, target: code)
