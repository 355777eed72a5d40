"""T.atomic_add / T.atomic_max / T.atomic_min: lowered TIR, generated CUDA and nvcc (no GPU needed)."""
import re
import shutil

import pytest
import tvm
import tvm_ffi
from tvm import tirx

import tilex.language as T
from tilex.engine import build, lower_to_tir
from tilex.op.atomic import AtomicOp, atomic, expose_shared_atomics
from tilex.op.base import TileOpError
from tilex.op.region import Region

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _script(func, target=SM90):
    return lower_to_tir(func, target)["main"].script()


def _cuda(func, target=SM90):
    return build(func, target).mod.imports[0].inspect_source()


def _kernel_body(src):
    return src[src.rfind('extern "C" __global__'):]


def _ptx(src, arch="sm_90a"):
    from tilex.engine.nvcc import compile_cuda

    return compile_cuda(src, arch, fmt="ptx").decode()


def _atomic_calls(func):
    calls = []

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.call_extern" and \
                str(c.args[0].value).startswith("tilex::atomic"):
            calls.append(c)

    tvm_ffi.structural_walk(func.body, (tvm.ir.Call, on_call))
    return calls


def _free_var_names(expr):
    names = set()
    tvm_ffi.structural_walk(expr, (tvm.ir.Var, lambda v: names.add(v.name)))
    return names


# ---- kernels ------------------------------------------------------------------------------------------------------
def column_sum_elementwise(M, N, bm=32):
    @T.prim_func
    def colsum(A: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            a = T.alloc_fragment((bm, N), "float32")
            T.copy(A[bx * bm, 0], a)
            for i, j in T.Parallel(bm, N):
                T.atomic_add(S[j], a[i, j])

    return colsum


def split_sum(S, M, N, bm=64, bn=64, src_dtype="float32", dst_dtype="float32", frag_dtype="float32", threads=128,
              use_tma=False):
    """C[m, n] += X[s, m, n] over s, one block per (tile, s)."""

    @T.prim_func
    def main(X: T.Tensor((S, M, N), src_dtype), C: T.Tensor((M, N), dst_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), S, threads=threads) as (bx, by, bz):
            x = T.alloc_fragment((bm, bn), frag_dtype)
            T.copy(X[bz, by * bm, bx * bn], x)
            T.atomic_add(C[by * bm, bx * bn], x, use_tma=use_tma)

    return main


def shared_accumulate(M, N, bm=32, bn=64, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            s = T.alloc_shared((bm, bn), dtype)
            T.clear(s)
            T.atomic_add(s, A[by * bm, bx * bn])
            T.copy(s, B[by * bm, bx * bn])

    return main


# ---- element form ---------------------------------------------------------------------------------------------------
def test_element_atomic_inside_parallel_gets_loop_vars_substituted():
    func = lower_to_tir(column_sum_elementwise(256, 64), SM90)["main"]
    calls = _atomic_calls(func)
    assert calls and all(str(c.args[0].value) == "tilex::atomic_add" for c in calls)
    for c in calls:
        assert c.args[1].op.name == "tirx.address_of"
        # the T.Parallel vars i, j are gone: the address and value use the thread / partition loop vars only
        assert not (_free_var_names(c) & {"i", "j"}), c
    script = func.script()
    assert "T.address_of(S[" in script
    assert "tvm_ffi" not in script
    tvm.tirx.analysis.verify_well_formed(func)


def test_element_forms_cast_the_value_and_pick_the_helper():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32"), I: T.Tensor((4,), "int32"), H: T.Tensor((4,), "float16")):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(128):
                T.atomic_max(A[0], A[i])
                T.atomic_min(I[i % 4], i)
                T.atomic_add(H[i % 4], A[i])
                T.atomic_add(I[0], 1)

    s = _script(f)
    assert "tilex::atomic_max" in s and "tilex::atomic_min" in s
    assert 'T.Cast("float16", A[' in s  # value converted to the destination dtype
    assert re.search(r'"tilex::atomic_add", T.address_of\(I(_\d+)?\[0\]\), 1\)', s)


@needs_nvcc
def test_element_atomics_compile():
    src = _cuda(column_sum_elementwise(256, 64))
    assert "tilex::atomic_add((&(S_ptr[" in src
    assert "atom.global.add.f32" in _ptx(src)


# ---- tile form: vectorization ----------------------------------------------------------------------------------------
@needs_nvcc
def test_fp32_fragment_into_global_uses_float4_atomics_on_sm90():
    func = split_sum(4, 256, 256)
    s = _script(func)
    assert "tilex::atomic_add_vec<true>" in s
    call = [c for c in _atomic_calls(lower_to_tir(func, SM90)["main"])][0]
    assert len(call.args) == 2 + 4  # name, address, 4 lanes
    src = _cuda(func)
    assert "tilex::atomic_add_vec<true>((&(C_ptr[" in src
    assert "atom.global.add.v4.f32" in _ptx(src)


@needs_nvcc
def test_fp32_fragment_into_fp16_global_converts_and_uses_f16x2_vectors():
    func = split_sum(4, 256, 256, src_dtype="float16", dst_dtype="float16", frag_dtype="float32")
    s = _script(func)
    assert "tilex::atomic_add_vec<true>" in s and 'T.Cast("float16", x[' in s
    call = _atomic_calls(lower_to_tir(func, SM90)["main"])[0]
    assert len(call.args) == 2 + 8  # the copy's plan gives 8 consecutive registers: one 16-byte red
    ptx = _ptx(_cuda(func))
    assert "red.global.add.noftz.v4.f16x2" in ptx


@needs_nvcc
def test_bf16_tile_atomics():
    func = split_sum(2, 128, 128, src_dtype="bfloat16", dst_dtype="bfloat16", frag_dtype="bfloat16")
    ptx = _ptx(_cuda(func))
    assert "red.global.add.noftz.v4.bf16x2" in ptx


@needs_nvcc
def test_sm80_falls_back_to_pairs_and_scalars():
    f16 = split_sum(2, 128, 128, src_dtype="float16", dst_dtype="float16", frag_dtype="float16")
    s16 = _script(f16, SM80)
    calls16 = _atomic_calls(lower_to_tir(f16, SM80)["main"])
    assert "tilex::atomic_add_vec<true>" in s16 and {len(c.args) for c in calls16} == {4}  # __half2 pairs
    s32 = _script(split_sum(2, 128, 128), SM80)
    assert "tilex::atomic_add_vec" not in s32 and "tilex::atomic_add\"" in s32
    ptx = _ptx(_cuda(f16, SM80), "sm_80")
    assert re.search(r"atom(\.global)?\.add\.noftz\.f16x2", ptx)  # __half2 atomicAdd


def test_max_and_int_tiles_are_scalar():
    @T.prim_func
    def f(X: T.Tensor((4, 128, 128), "float32"), C: T.Tensor((128, 128), "float32"),
          I: T.Tensor((128, 128), "int32")):
        with T.Kernel(4, threads=128) as bz:
            x = T.alloc_fragment((128, 128), "float32")
            xi = T.alloc_fragment((128, 128), "int32")
            T.copy(X[bz, 0, 0], x)
            T.copy(X[bz, 0, 0], xi)
            T.atomic_max(C[0, 0], x)
            T.atomic_min(C[0, 0], x)
            T.atomic_add(I[0, 0], xi)

    s = _script(f)
    assert "tilex::atomic_max" in s and "tilex::atomic_min" in s and "tilex::atomic_add\"" in s
    assert "atomic_add_vec" not in s


@needs_nvcc
@pytest.mark.parametrize("dst_dtype", ["float32", "float16"])
def test_use_tma_stages_a_fragment_and_adds_it_by_tma_on_sm90(dst_dtype):
    func = split_sum(4, 256, 256, bm=64, bn=128, src_dtype=dst_dtype, dst_dtype=dst_dtype, threads=256, use_tma=True)
    src = _cuda(func)
    body = _kernel_body(src)
    # staged (swizzled: one TMA box per 128-byte plane of the 128-column rows), fenced, synchronized, then thread
    # 0 issues the reductions; no element atomics
    assert body.count("tilex::tma_reduce_add_2d") == (4 if dst_dtype == "float32" else 2)
    assert "atomic_add" not in body
    assert body.index("fence_proxy_async") < body.index("__syncthreads") < body.index("tma_reduce_add_2d")
    # without the option, or where there is no TMA, the same program uses vector atomics
    assert "tma_reduce" not in _script(split_sum(4, 256, 256, bm=64, bn=128, threads=256))
    s80 = _script(split_sum(4, 256, 256, bm=64, bn=128, threads=256, use_tma=True), SM80)
    assert "tma_reduce" not in s80 and "tilex::atomic_add" in s80
    # a global tensor whose rows are not 16-byte aligned cannot be a TMA tensor: atomics
    assert "tma_reduce" not in _script(split_sum(4, 100, 70, threads=128, use_tma=True))


# ---- tile form: guards, shared memory, replicated fragments -----------------------------------------------------
def test_ragged_global_tiles_are_guarded_and_vectors_never_straddle_the_edge():
    s70 = _script(split_sum(2, 100, 70))
    assert "< 100" in s70 and "< 70" in s70
    calls = _atomic_calls(lower_to_tir(split_sum(2, 100, 70), SM90)["main"])
    assert {len(c.args) for c in calls} == {4}  # rows of 70 floats: pairs (70 % 2 == 0), never quads
    calls = _atomic_calls(lower_to_tir(split_sum(2, 37, 45), SM90)["main"])
    assert {str(c.args[0].value) for c in calls} == {"tilex::atomic_add"}  # odd rows: scalar


@needs_nvcc
def test_shared_destination_is_visible_to_thread_sync():
    func = shared_accumulate(128, 128)
    s = _script(func)
    assert "T.tvm_access_ptr(T.type_annotation(\"float32\"), s.data" in s
    body = _kernel_body(_cuda(func))
    fill, atom, copy = body.find("make_float4(0x0p+0f"), body.find("tilex::atomic_add("), body.rfind("*(float4*)(B_ptr")
    assert 0 <= fill < atom < copy
    assert "__syncthreads()" in body[fill:atom] and "__syncthreads()" in body[atom:copy]
    _ptx(_cuda(func))


def test_replicated_fragment_adds_each_element_once():
    M, N, bm, bn = 256, 256, 32, 128

    @T.prim_func
    def colsum(X: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), "float32")
            acc = T.alloc_fragment((bn,), "float32")
            T.copy(X[by * bm, bx * bn], x)
            T.reduce_sum(x, acc, dim=0)
            T.atomic_add(S[bx * bn], acc)

    func = lower_to_tir(colsum, SM90)["main"]
    found = []

    def on_if(n):
        calls = []
        tvm_ffi.structural_walk(n.then_case, (tvm.ir.Call, lambda c: calls.append(c)))
        if any(isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.call_extern" and
               str(c.args[0].value).startswith("tilex::atomic") for c in calls):
            found.append(n.condition)

    tvm_ffi.structural_walk(func.body, (tirx.IfThenElse, on_if))
    assert found, "the atomic on a replicated fragment must be guarded to replica 0"
    assert "v // 32 == 0" in func.script()  # 128 threads hold 4 copies of the 128 sums: warp 0 adds them


def test_shared_element_atomics_exposed_to_thread_sync():
    @T.prim_func
    def hist(A: T.Tensor((4096,), "int32"), H: T.Tensor((16,), "int32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_shared((16,), "int32")
            for i in T.Parallel(16):
                s[i] = 0
            for i in T.Parallel(1024):
                T.atomic_add(s[A[bx * 1024 + i] % 16], 1)
            for i in T.Parallel(16):
                T.atomic_add(H[i], s[i])

    from tilex.engine.pipeline import PIPELINE_NAME, run_tile_passes
    from tilex.engine import nvcc  # noqa: F401 - registers the CUDA hooks

    with SM90:
        f = run_tile_passes(hist, SM90)
        f = f.with_body(expose_shared_atomics(f.body))
        assert "T.tvm_access_ptr(T.type_annotation(\"int32\"), s.data" in f.script()
        with tvm.transform.PassContext(opt_level=3):
            ex = tvm.compile(tvm.IRModule({"main": f}), target=SM90, tir_pipeline=PIPELINE_NAME)
    body = _kernel_body(ex.mod.imports[0].inspect_source())
    zero, atom, out = body.find("make_int4(0, 0, 0, 0)"), body.find("tilex::atomic_add((&(s_ptr"), body.find("H_ptr[")
    assert 0 <= zero < atom < out
    assert "__syncthreads()" in body[zero:atom] and "__syncthreads()" in body[atom:out]


# ---- errors ---------------------------------------------------------------------------------------------------------
def _buf(shape, dtype="float32", scope="global", name="B"):
    return tirx.decl_buffer(shape, dtype, name, scope=scope)


def test_destination_must_be_global_or_shared():
    frag, g = _buf((16, 16), scope="local.fragment", name="acc"), _buf((16, 16), name="G")
    with pytest.raises(TileOpError, match="'acc'.*global or shared"):
        atomic("add", frag, g)
    with pytest.raises(TileOpError, match="'acc'.*global or shared"):
        atomic("max", tirx.BufferLoad(frag, [0, 0]), 1.0)


def test_unsupported_dtype_and_options():
    g8 = _buf((16,), "int8", name="G8")
    with pytest.raises(TileOpError, match="int8"):
        atomic("add", tirx.BufferLoad(g8, [0]), 1)
    g = _buf((16,), name="G")
    with pytest.raises(TileOpError, match="a tile atomic is relaxed and returns nothing"):
        atomic("add", g, _buf((16,), name="S"), return_prev=True)
    with pytest.raises(TileOpError, match="memory_order must be one of"):
        atomic("add", tirx.BufferLoad(g, [0]), 1.0, memory_order="sequential")
    with pytest.raises(TileOpError, match="tile value"):
        atomic("add", g, 1.0)
    with pytest.raises(TileOpError, match=r"return_prev / memory_order\) on float16"):
        atomic("max", tirx.BufferLoad(_buf((16,), "float16", name="H"), [0]), 1.0, memory_order="acquire")


def test_shape_mismatch_names_both_operands():
    src, dst = _buf((32, 64), scope="shared", name="S_src"), _buf((128, 128), name="C_dst")
    with pytest.raises(TileOpError, match=r"C_dst.*\[32, 32\].*S_src.*\[32, 64\]"):
        AtomicOp(Region.full(src), Region(dst, [0, 0], [32, 32]))


def test_errors_surface_from_the_frontend():
    with pytest.raises(Exception, match="global or shared"):
        @T.prim_func
        def bad(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as _:
                a = T.alloc_fragment((64, 64), "float32")
                b = T.alloc_fragment((64, 64), "float32")
                T.copy(A, a)
                T.atomic_add(b, a)
