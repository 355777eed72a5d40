"""TileLang keyword arguments of the frontend (CPU only): each one works, raises NotImplementedError naming it
(for a non-default value), or is validated with a message naming it; unknown keywords are a TypeError."""
import inspect

import pytest
import tvm
from tvm import tirx

import tilex.language as T
from tilex.engine import lower_to_tir
from tilex.op.base import TileOpError
from tilex.op.copy import copy_call

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})

G = tirx.decl_buffer((256, 256), "float16", "G")
S = tirx.decl_buffer((64, 64), "float16", "S", scope="shared.dyn")
S2 = tirx.decl_buffer((64, 64), "float16", "S2", scope="shared.dyn")
F = tirx.decl_buffer((64, 64), "float32", "F", scope="local.fragment")
R = tirx.decl_buffer((64,), "float32", "R", scope="local.fragment")
GF = tirx.decl_buffer((256, 256), "float32", "GF")


def gemm_program(clear_accum=False, disable_tma=False, M=256, N=256, K=256, bm=128, bn=128, bk=32):
    @T.prim_func
    def f(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[by * bm, k * bk], A_s, disable_tma=disable_tma)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l, clear_accum=clear_accum)
            T.copy(C_l, C[by * bm, bx * bn])

    return f


def script(func):
    return lower_to_tir(func, SM90)["main"].script()


# ---- T.copy -------------------------------------------------------------------------------------------------------
@pytest.mark.skipif("disable_tma" not in inspect.signature(copy_call).parameters,
                    reason="tilex.op.copy.copy_call has no disable_tma yet")
def test_copy_disable_tma_keeps_the_copy_off_tma():
    with_tma, without = script(gemm_program()), script(gemm_program(disable_tma=True))
    assert "A_tmap" in with_tma and "B_tmap" in with_tma
    assert "A_tmap" not in without


def test_copy_options_not_implemented():
    with pytest.raises(NotImplementedError, match=r"T.copy\(coalesced_width=4\)"):
        T.copy(G[0, 0], S, coalesced_width=4)
    with pytest.raises(NotImplementedError, match=r"T.copy\(eviction_policy='evict_first'\)"):
        T.copy(G[0, 0], S, eviction_policy="evict_first")
    with pytest.raises(NotImplementedError, match=r"T.copy\(prefer_instruction='tma'\)"):
        T.copy(G[0, 0], S, prefer_instruction="tma")
    with pytest.raises(NotImplementedError, match=r"T.copy\(loop_layout="):
        T.copy(G[0, 0], S, loop_layout=T.Layout((64, 64), lambda i, j: [j, i]))
    with pytest.raises(NotImplementedError, match="annotation 'foo'"):
        T.copy(G[0, 0], S, annotations={"foo": 1})
    with pytest.raises(NotImplementedError, match=r"T.copy\(coalesced_width=2\)"):
        T.copy(G[0, 0], S, annotations={"coalesced_width": 2})  # annotations carry the same options


def test_copy_options_validated_and_defaults_accepted():
    with pytest.raises(ValueError, match="coalesced_width must be >= 1"):
        T.copy(G[0, 0], S, coalesced_width=0)
    with pytest.raises(ValueError, match="eviction_policy must be one of"):
        T.copy(G[0, 0], S, eviction_policy="evict_sometimes")
    with pytest.raises(TypeError, match="disable_tma must be a bool"):
        T.copy(G[0, 0], S, disable_tma="yes")
    default = T.copy(G[0, 0], S)
    assert T.copy(G[0, 0], S, eviction_policy="evict_normal", annotations={}).same_as(default) or \
        str(T.copy(G[0, 0], S, eviction_policy="evict_normal")) == str(default)


# ---- T.gemm -------------------------------------------------------------------------------------------------------
def test_gemm_clear_accum_zeroes_the_accumulator():
    plain, cleared = script(gemm_program()), script(gemm_program(clear_accum=True))
    zero = "C_l[z] = T.float32(0.0)"
    assert zero in cleared and zero not in plain


def test_gemm_options():
    with pytest.raises(NotImplementedError, match=r"T.gemm\(wg_wait=1\).*waits for its warpgroup MMAs"):
        T.gemm(S, S2, F, wg_wait=1)
    with pytest.raises(NotImplementedError, match=r"T.gemm\(wg_wait=-1\)"):
        T.gemm(S, S2, F, wg_wait=-1)
    with pytest.raises(ValueError, match="wg_wait must be >= -1"):
        T.gemm(S, S2, F, wg_wait=-2)
    with pytest.raises(NotImplementedError, match=r"T.gemm\(k_pack=2\)"):
        T.gemm(S, S2, F, k_pack=2)
    with pytest.raises(ValueError, match="k_pack must be >= 1"):
        T.gemm(S, S2, F, k_pack=0)
    with pytest.raises(NotImplementedError, match=r"T.gemm\(mbar="):
        T.gemm(S, S2, F, mbar=R)
    with pytest.raises(NotImplementedError, match="annotation 'use_2cta'"):
        T.gemm(S, S2, F, annotations={"use_2cta": 1})
    with pytest.raises(ValueError, match="policy must be a T.GemmWarpPolicy"):
        T.gemm(S, S2, F, policy=7)
    with pytest.raises(TypeError, match="transpose_B must be a bool"):
        T.gemm(S, S2, F, transpose_B="T")
    call = T.gemm(S, S2, F, True, True, T.GemmWarpPolicy.FullRow, True)
    assert [int(a) for a in call.args[3:7]] == [1, 1, 1, 1]


# ---- T.fill / T.clear / T.reduce_* ----------------------------------------------------------------------------------
def test_fill_clear_annotations():
    with pytest.raises(NotImplementedError, match=r"T.fill\(annotations="):
        T.fill(F, 1.0, annotations={"x": 1})
    with pytest.raises(NotImplementedError, match=r"T.clear\(annotations="):
        T.clear(F, annotations={"x": 1})
    assert str(T.clear(F, annotations={})) == str(T.fill(F, 0))


def test_reduce_options():
    with pytest.raises(ValueError, match=r"T.reduce_max: dim=2 is out of range for a 2-d source"):
        T.reduce_max(F, R, dim=2)
    with pytest.raises(ValueError, match=r"dim=-3 is out of range"):
        T.reduce_sum(F, R, dim=-3)
    with pytest.raises(TypeError, match="dim must be an int"):
        T.reduce_sum(F, R, dim=1.0)
    with pytest.raises(NotImplementedError, match=r"T.reduce_sum\(batch=2\)"):
        T.reduce_sum(F, R, dim=1, batch=2)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        T.reduce_sum(F, R, dim=1, batch=0)
    with pytest.raises(NotImplementedError, match=r"T.reduce_max\(nan_propagate=True\)"):
        T.reduce_max(F, R, dim=1, nan_propagate=True)
    with pytest.raises(TypeError, match="T.reduce_bitand: a bitwise reduction needs integer tiles"):
        T.reduce(F, R, "bitand", 1, True)  # (F is float32; integer tiles: tests/op/test_reduce_bitwise.py)
    with pytest.raises(ValueError, match="unknown reduce_type"):
        T.reduce(F, R, "prod", 1, True)
    # dim (negative ones included) and clear reach the operator
    assert [int(a) for a in T.reduce_max(F, R, dim=-1, clear=False).args[2:]] == [1, -1, 0]
    assert int(T.reduce_abssum(F, R, 0).args[4]) == 1  # abs-sum always clears, as in TileLang


# ---- atomics ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [T.atomic_add, T.atomic_max, T.atomic_min])
def test_atomic_options(fn):
    with pytest.raises(ValueError, match="memory_order must be one of"):
        fn(GF[0, 0], 1.0, memory_order="sequential")
    if fn is T.atomic_add:  # float32 add returns the value before, with any memory order
        assert "tilex::atomic_fetch<0, 4>" in str(fn(GF[0, 0], 1.0, memory_order="seq_cst", return_prev=True))
        assert "tilex::atomic_fetch<0, 0>" in str(fn(GF[0, 0], 1.0, return_prev=True))
    else:  # max / min return the value before on integers only
        with pytest.raises(TileOpError, match="supported for int32, uint32, int64, uint64"):
            fn(GF[0, 0], 1.0, return_prev=True)
    with pytest.raises(NotImplementedError, match="annotation 'x'"):
        fn(GF[0, 0], 1.0, annotations={"x": 1})
    fn(GF[0, 0], 1.0, memory_order="relaxed")
    if fn is T.atomic_add:
        with pytest.raises(NotImplementedError, match=r"T.atomic_add\(use_tma=True\).*whole tiles"):
            fn(GF[0, 0], 1.0, use_tma=True)


# ---- loops -----------------------------------------------------------------------------------------------------------
def test_parallel_options():
    with pytest.raises(NotImplementedError, match=r"T.Parallel\(coalesced_width=4\)"):
        T.Parallel(64, coalesced_width=4)
    with pytest.raises(ValueError, match="coalesced_width must be >= 1"):
        T.Parallel(64, coalesced_width=-1)
    with pytest.raises(NotImplementedError, match=r"T.Parallel\(loop_layout="):
        T.Parallel(64, 64, loop_layout=T.Layout((64, 64), lambda i, j: [j, i]))
    with pytest.raises(NotImplementedError, match="annotation 'a'"):
        T.Parallel(64, annotations={"a": 1})
    with pytest.raises(ValueError, match="extents must be positive"):
        T.Parallel(64, 0)


def test_prefer_async_is_a_hint_with_the_same_kernel():
    import tilex

    def copy_in(prefer):
        ann = {"parallel_async_without_async_commit_wait": True} if prefer else None
        @T.prim_func
        def f(A: T.Tensor((128, 64), "float16"), B: T.Tensor((128, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((128, 64), "float16")
                for i, j in T.Parallel(128, 64, prefer_async=prefer, annotations=ann):
                    s[i, j] = A[i, j]
                T.copy(s, B)
        return tilex.compile(f, target="sm_90a").get_kernel_source()

    assert copy_in(True) == copy_in(None)


def test_pipelined_options():
    with pytest.raises(ValueError, match=r"T.Pipelined: num_stages must be >= 0, got -2"):
        T.Pipelined(8, num_stages=-2)
    with pytest.raises(TypeError, match="num_stages must be an int"):
        T.Pipelined(8, num_stages=2.5)
    with pytest.raises(NotImplementedError, match=r"T.Pipelined\(sync=\[\[0, 1\]\]\)"):
        T.Pipelined(8, num_stages=2, sync=[[0, 1]])
    with pytest.raises(NotImplementedError, match=r"T.Pipelined\(group=\[\[0\], \[1\]\]\)"):
        T.Pipelined(8, num_stages=2, group=[[0], [1]])
    with pytest.raises(NotImplementedError, match="annotation 'x'"):
        T.Pipelined(8, num_stages=2, annotations={"x": 1})


def test_pipelined_start_stop_as_in_tilelang():
    @T.prim_func
    def f(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for k in T.Pipelined(2, 6, num_stages=0):
                B[k] = A[k]

    assert "for k in T.serial(2, 6" in f.script()


# ---- T.Kernel / allocation -----------------------------------------------------------------------------------------
def test_kernel_arguments():
    for bad, msg in [(0, "positive ints"), (2048, "exceeds the CUDA limit of 1024"), (True, "positive ints"),
                     (128.0, "positive ints"), ((4, 2, 128), "limit of 64 for threadIdx.z")]:
        with pytest.raises(ValueError, match=msg):
            T.Kernel(1, threads=bad)
    with pytest.raises(ValueError, match="grid dimensions must be positive"):
        T.Kernel(4, 0)
    assert T.Kernel(1, prelude="#include <x.h>").prelude == "#include <x.h>"  # written before the kernels
    assert T.Kernel(4).threads == (128,)  # TileLang's default (threads=None)
    assert T.Kernel(4, threads=[64, 2]).threads == (64, 2)


def test_alloc_arguments():
    with pytest.raises(ValueError, match=r"T.alloc_shared: shape dimensions must be positive"):
        T.alloc_shared((64, 0), "float16")
    with pytest.raises(ValueError, match=r"T.alloc_fragment: shape dimensions must be positive"):
        T.alloc_fragment((-1,), "float32")
    with pytest.raises(NotImplementedError, match=r"T.alloc_fragment\(scope='global'\)"):
        T.alloc_fragment((64,), "float32", scope="global")
    with pytest.raises(NotImplementedError, match=r"T.alloc_shared\(scope='global'\)"):
        T.alloc_shared((64,), "float32", scope="global")
    with pytest.raises(NotImplementedError, match=r"T.alloc_var\(scope='shared'\)"):
        T.alloc_var("int32", 0, "shared")
    with pytest.raises(TypeError, match="given twice"):
        T.alloc_var("int32", 0, init=1)


def test_alloc_var_positional_forms():
    @T.prim_func
    def f(A: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_var("int32", "local.var")
            b = T.alloc_var("int32", 3, "local.var")
            c = T.alloc_var("int32", "local.var", init=5)
            a = b + c
            for i in T.Parallel(32):
                A[i] = a

    s = f.script()
    assert "b[0] = 3" in s or "b: T.int32 = 3" in s or "T.int32(3)" in s
    assert "5" in s


# ---- T.use_swizzle / T.annotate_layout / T.print / T.ceildiv ---------------------------------------------------------
def test_use_swizzle_arguments():
    with pytest.raises(NotImplementedError, match="order='mlx'"):
        T.use_swizzle(4, order="mlx")
    with pytest.raises(ValueError, match="order must be one of"):
        T.use_swizzle(4, order="diagonal")
    with pytest.raises(ValueError, match="panel_size must be positive"):
        T.use_swizzle(0, enable=False)
    with pytest.raises(TypeError, match="enable must be a bool"):
        T.use_swizzle(4, enable="no")
    # enable=False pins the launch order: a marker of panel 0, so that tilex chooses no panel either
    off = T.use_swizzle(4, enable=False)
    assert [int(a.value) for a in off.args] == [0, 0]


def test_annotate_layout_takes_a_function_as_tilelang_does():
    @T.prim_func
    def f(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16")):
        with T.Kernel(1, threads=32) as bx:
            A_s = T.alloc_shared((16, 16), "float16")
            T.annotate_layout({A_s: lambda i, j: [j, i]})
            T.copy(A, A_s)
            T.copy(A_s, B)

    @T.prim_func
    def g(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16")):
        with T.Kernel(1, threads=32) as bx:
            A_s = T.alloc_shared((16, 16), "float16")
            T.annotate_layout({A_s: T.Layout((16, 16), lambda i, j: [j, i])})
            T.copy(A, A_s)
            T.copy(A_s, B)

    assert script(f) == script(g).replace("def g(", "def f(")


def test_print_arguments():
    with pytest.raises(NotImplementedError, match=r"T.print\(warp_id=1\)"):
        T.print(S, warp_id=1)
    with pytest.raises(NotImplementedError, match=r"T.print\(warp_group_id=1\)"):
        T.print(S, warp_group_id=1)
    with pytest.raises(ValueError, match="warp_id must be >= 0"):
        T.print(S, warp_id=-1)
    with pytest.raises(NotImplementedError, match=r"T.print\(obj=None\)"):
        T.print(msg="hello")


def test_ceildiv():
    assert T.ceildiv(10, 4) == 3
    with pytest.raises(ValueError, match="divisor must be positive"):
        T.ceildiv(10, 0)
    with pytest.raises(ValueError, match="divisor must be positive"):
        T.ceildiv(tirx.Var("n", "int32"), -2)


# ---- unknown keywords ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda: T.copy(G[0, 0], S, coalesce_width=4),
    lambda: T.gemm(S, S2, F, clear_acc=True),
    lambda: T.fill(F, 0, value2=1),
    lambda: T.reduce_sum(F, R, axis=1),
    lambda: T.atomic_add(GF[0, 0], 1.0, order="relaxed"),
    lambda: T.Parallel(64, vectorize=4),
    lambda: T.Pipelined(8, stages=2),
    lambda: T.Kernel(1, thread=128),
    lambda: T.alloc_shared((16,), "float16", layout=None),
    lambda: T.use_swizzle(4, panel=2),
    lambda: T.print(S, message="x"),
])
def test_unknown_keywords_raise_type_error(call):
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        call()
