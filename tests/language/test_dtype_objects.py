"""TileLang's dtype objects in tilex.language: T.float16, T.float, T.dtype(x), ... in programs (CPU: parsing and the
generated CUDA, which must be the one string dtypes give), their attributes, conversions and errors."""
import pickle

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as tvm_T
from tvm.tirx.script.builder import ir as script_ir

import tilex
import tilex.language as T
from tilex import dtypes as lowbit
from tilex.language.dtypes import canonical_dtype

M, N = 128, 64


def _cast_program(f16, f32, i32):
    """A copy / cast kernel whose every dtype is one of the arguments (strings or dtype objects)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), f16), B: T.Tensor((M, N), f32), C: T.Tensor((M,), i32)):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, N), f16)
            B_f = T.alloc_fragment((M, N), f32)
            T.copy(A, A_s)
            for i, j in T.Parallel(M, N):
                B_f[i, j] = T.min(T.max(T.Cast(f32, A_s[i, j]), T.Cast(f32, T.min_value(f16))),
                                  T.Cast(f32, T.max_value(f16))) + tirx.const(0.5, f32)
            T.copy(B_f, B)
            tid = T.get_thread_binding()
            r = T.alloc_local((4,), f32)
            acc = T.alloc_var(i32, 0)
            for v in T.serial(4):
                r[v] = T.if_then_else(A[tid, v] > T.Cast(f16, 0), T.Cast(f32, A[tid, v]), -T.infinity(f32))
                acc = acc + T.reinterpret(i32, r[v])
            C[tid] = acc

    return main


def _source(prog):
    return tilex.compile(prog, target="sm_90a").get_kernel_source()


def test_dtype_objects_give_the_cuda_of_string_dtypes():
    by_name = _source(_cast_program("float16", "float32", "int32"))
    assert "__half" in by_name and "tilex" in by_name
    assert _source(_cast_program(T.float16, T.float32, T.int32)) == by_name
    assert _source(_cast_program(T.half, T.float, T.int)) == by_name  # TileLang's C spellings
    assert _source(_cast_program(T.dtype("float16"), T.dtype(torch.float32), T.dtype(np.int32))) == by_name


def test_tensor_subscript_form_is_the_call_form():
    @T.prim_func
    def called(A: T.Tensor((M, N), T.float16), B: T.Tensor((M, N), T.float16)):
        with T.Kernel(1, threads=128) as bx:
            T.copy(A, B)

    @T.prim_func
    def subscripted(A: T.Tensor[(M, N), T.float16], B: T.Tensor[(M, N), "float16"]):
        with T.Kernel(1, threads=128) as bx:
            T.copy(A, B)

    assert called.script().replace("called", "f") == subscripted.script().replace("subscripted", "f")
    assert _source(called).replace("called", "f") == _source(subscripted).replace("subscripted", "f")
    assert tuple(T.Tensor[M, N].shape) == (M, N) and T.Tensor[M, N].dtype == "float32"  # the shape alone
    assert T.Tensor[(M,), torch.bfloat16].dtype == "bfloat16"
    assert T.Tensor(M, T.int8).dtype == "int8" and len(T.Tensor(M, T.int8).shape) == 1


def test_strided_tensor():
    @T.prim_func
    def main(A: T.StridedTensor((M, N), (2 * N, 1), T.float16), B: T.Tensor((M, N), T.float16)):
        with T.Kernel(1, threads=128) as bx:
            T.copy(A, B)

    assert [int(s) for s in main.params[0].strides] == [2 * N, 1]
    src = _source(main)
    assert "A_ptr" in src
    sub = T.StridedTensor[(M, N), (2 * N, 1), T.float16]
    assert [int(s) for s in sub.strides] == [2 * N, 1] and sub.dtype == "float16"
    with pytest.raises(ValueError, match="different ranks"):
        T.StridedTensor((M, N), (1,), T.float16)
    with pytest.raises(TypeError, match="strides are both needed"):
        T.StridedTensor[(M, N)]


def test_macro_tile_annotations_keep_their_scopes():
    assert T.SharedBuffer((64, 64), T.float16).scope() == "shared.dyn"
    assert T.FragmentBuffer[(64, 64), T.float32].scope() == "local.fragment"
    assert T.LocalBuffer((8,), T.float).scope() == "local"
    assert T.SharedBuffer((64, 64), T.float8_e4m3).dtype == "float8_e4m3fn"


def test_names_equal_and_hash_as_strings():
    assert T.float16 == "float16" and hash(T.float16) == hash("float16") and isinstance(T.float16, str)
    assert {T.bfloat16: 1}["bfloat16"] == 1
    spellings = {T.float: "float32", T.int: "int32", T.uint: "uint32", T.half: "float16", T.double: "float64",
                 T.bool: "bool", T.long: "int64", T.short: "int16", T.float8_e4m3fn: "float8_e4m3fn",
                 T.float8_e5m2: "float8_e5m2", T.float4_e2m1fn: "float4_e2m1fn", T.int8: "int8", T.uint64: "uint64",
                 T.f16: "float16", T.i32: "int32"}
    for obj, name in spellings.items():
        assert isinstance(obj, T.dtype) and obj == name and str(obj) == name and type(str(obj)) is str
    assert T.float8_e4m3 == "float8_e4m3"  # TileLang's name; canonical_dtype gives TVM codegen's
    assert canonical_dtype(T.float8_e4m3) == "float8_e4m3fn" and canonical_dtype("float8_e4m3") == "float8_e4m3fn"
    assert T.dtype("float") == T.float32 and T.dtype("half") == T.float16 and T.dtype("ulong") == "uint64"


def test_bits_bytes_lanes():
    assert (T.float16.bits, T.float16.bytes, T.float16.lanes) == (16, 2, 1)
    assert (T.float32x4.bits, T.float32x4.bytes, T.float32x4.lanes) == (32, 16, 4)
    assert (T.float8_e4m3fn.bits, T.float8_e4m3fn.bytes) == (8, 1)
    assert (T.int4.bits, T.int4.bytes) == (4, 1)
    assert T.bfloat16.itemsize == 2 and T.int64.bytes == 8


def test_dtype_constructor_sources():
    assert T.dtype(T.float16) is T.float16
    assert T.dtype(tvm_T.float16) == "float16"  # TVMScript's constructor
    assert T.dtype(tvm_T.bool) == "bool"
    assert T.dtype(torch.float16).as_torch() is torch.float16
    assert T.dtype(torch.bfloat16) == "bfloat16" and T.dtype(torch.float8_e4m3fn) == "float8_e4m3fn"
    assert T.dtype(torch.float4_e2m1fn_x2) == "float4_e2m1fnx2"
    assert T.dtype(np.float16) == "float16" and T.dtype(np.dtype("int8")) == "int8"
    assert T.dtype(float) == "float32" and T.dtype(int) == "int32" and T.dtype(bool) == "bool"
    assert T.dtype(lowbit.uint4) == "uint4" and T.dtype(tvm.ir.PrimType("int16")) == "int16"
    assert T.dtype(tvm.DataType("float32")) == "float32"


def test_as_torch():
    cases = {T.float16: torch.float16, T.bfloat16: torch.bfloat16, T.float: torch.float32, T.int8: torch.int8,
             T.uint16: torch.uint16, T.bool: torch.bool, T.float8_e4m3fn: torch.float8_e4m3fn,
             T.float8_e4m3: torch.float8_e4m3fn, T.float8_e5m2: torch.float8_e5m2,
             T.float4_e2m1fnx2: torch.float4_e2m1fn_x2}
    for dt, want in cases.items():
        assert dt.as_torch() is want
    for dt in (T.int4, T.float4_e2m1fn, T.float16x2):
        with pytest.raises(TypeError, match="has no torch dtype"):
            dt.as_torch()


def test_unknown_dtypes_are_named():
    with pytest.raises(ValueError, match="unknown dtype 'flaot16'"):
        T.dtype("flaot16")
    with pytest.raises(TypeError, match="expected a dtype"):
        T.dtype(3)
    with pytest.raises(TypeError, match="expected a dtype"):
        T.dtype(torch.zeros(1))
    with pytest.raises(ValueError, match="low-bit code type float6_e3m2"):
        T.Tensor((M,), T.float6_e3m2)
    with pytest.raises(ValueError, match="unknown dtype 'flaot32'"):
        @T.prim_func
        def bad(A: T.Tensor((M, N), "float16")):
            with T.Kernel(1, threads=128) as bx:
                T.alloc_fragment((M, N), "flaot32")
    with pytest.raises(ValueError, match="unknown dtype 'half16'"):
        T.Tensor[(M, N), "half16"]


def test_ffi_and_tvm_apis_take_dtype_objects():
    x = tirx.Var("x", "float16")
    assert tvm_ffi.structural_equal(tirx.Cast(T.float32, x), tirx.Cast("float32", x))
    assert tirx.const(1, T.float32).ty == tvm.ir.PrimType("float32")
    assert tirx.decl_buffer((4, 4), T.bfloat16).dtype == "bfloat16"
    assert tvm.DataType(T.int8).bits == 8
    assert tvm_T.Buffer((4,), T.float16).dtype == "float16"
    assert str(tirx.max_value(T.float16)) == str(tirx.max_value("float16"))
    assert str(tirx.reinterpret(T.float32, tirx.const(1, "int32"))) == 'T.reinterpret("float32", 1)'


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "int8", "uint64", "float8_e4m3fn",
                                  "float32x4", "bool", "f16", "i32"])
def test_calls_are_tvmscript_constructor_calls(name):
    ours, theirs = getattr(T, name), getattr(tvm_T, name)
    x = tirx.Var("x", "float32")
    values = [0, 1, x] + ([3] if name != "bool" else []) + (["inf", 1.5] if "float" in name else [])
    for v in values:
        assert str(ours(v)) == str(theirs(v)), v
    assert ours().ty == theirs().ty  # a fresh variable


def test_calls_without_a_tvmscript_constructor():
    assert str(T.int4(3)) == str(tirx.const(3, "int4"))
    assert T.int4().ty == tvm.ir.PrimType("int4")
    x = tirx.Var("x", "float32")
    assert str(T.int3(x)) == 'T.Cast("int3", x)'
    # TVMScript's T.float16x2 has no FFI function behind it; tilex's builds the value itself
    assert str(T.float16x2(1.0)) == "T.Broadcast(T.float16(1.0), 2)"
    assert T.float16x2().ty == tvm.ir.PrimType("float16x2")
    assert str(T.float16x2(1.0, 2.0)) == "T.Shuffle([T.float16(1.0), T.float16(2.0)], [0, 1])"
    with pytest.raises(ValueError, match="3 values given for a vector of 2 lanes"):
        T.float16x2(1.0, 2.0, 3.0)
    with pytest.raises(NotImplementedError, match="SizeVar"):
        T.int32(is_size_var=True)


def test_tvmscript_positions():
    @T.prim_func
    def main(A: T.Tensor((M,), T.float32), n: T.int32, s: T.float):
        with T.Kernel(1, threads=128) as bx:
            tid = T.get_thread_binding()
            v: T.float32[4]
            w: T.float32 = T.float32(0)
            k: T.let[T.int32] = n * 2
            for i in T.serial(4):
                v[i] = T.float32(i) * s
                w = w + v[i]
            if tid < n:
                A[tid] = w + T.Cast(T.float, k)

    assert [str(p.ty) for p in main.params[1:]] == ["int32", "float32"]
    script = main.script()
    assert "T.alloc_local((4,))" in script
    assert "A_ptr" in _source(main)


def test_lowbit_types_with_dequantize():
    assert isinstance(T.int4, T.dtype) and isinstance(T.uint3, T.dtype) and T.int3 == "int3"
    assert isinstance(T.float6_e3m2, lowbit.LowBitType)  # no TVM dtype: tilex.dtypes' type
    assert (T.uint4.max_value, T.int4.min_value, T.int3.kind, T.float8_e5m2.exponent) == (15.0, -8.0, "int", 5)
    with pytest.raises(AttributeError):
        T.float16.max_value
    packed = tirx.decl_buffer((512,), "int32", "P")
    out = tirx.decl_buffer((128, 128), "float16", "W")
    for dt, want in [(T.int4, (1, 4, 0, 0)), (T.uint2, (0, 2, 0, 0)), (T.float4_e2m1fn, (2, 4, 2, 1)),
                     (T.float6_e3m2, (2, 6, 3, 2)), (T.dtype("uint4"), (0, 4, 0, 0))]:
        call = T.dequantize(packed, out, dt)
        assert tuple(int(a.value) for a in call.args[4:8]) == want
    assert T.Tensor((M,), T.int4).dtype == "int4"


def test_pickle_and_subscript_slices():
    for dt in (T.float16, T.int3, T.float):
        back = pickle.loads(pickle.dumps(dt))
        assert back == dt and type(back) is T.dtype
    assert T.float16[:5] == "float"  # a slice is the string's
    ann = T.float32[2, 3]
    assert isinstance(ann, script_ir.LocalVectorAnnotation) and ann.shape == (2, 3) and ann.dtype == "float32"


def _declarations(D):
    """A program whose scalar dtypes come from `D` (tilex.language or TVMScript's T)."""

    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), n: D.int32):
        with T.Kernel(1, threads=128) as bx:
            m = T.int32()
            flag: D.bool = D.bool(n > 3)
            k = T.bind(n * 2, D.int32)
            if flag:
                A[0] = D.float32(k)

    return main


def test_parser_reads_tilex_and_tvmscript_constructors_alike():
    assert _declarations(T).script() == _declarations(tvm_T).script()
