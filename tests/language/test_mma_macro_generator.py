"""TileLang's hand-written MMA emitter, ``tilex.cuda.intrinsics.macro.mma_macro_generator.TensorCoreIntrinEmitter``:
GEMMs written with per-warp ``T.alloc_local`` registers, ``ldmatrix_a`` / ``ldmatrix_b`` / ``mma`` / ``stmatrix``.

CPU: the lane addresses the emitter gives ldmatrix, pushed through a model of ldmatrix (PTX ISA), land every element
where the mma.sync operand layout wants it; the fragment maps and their inverses agree; example-style programs
compile for sm_90a with ldmatrix and mma.sync; bad arguments raise. GPU (@pytest.mark.gpu): float16, bfloat16 and
int8 GEMMs, every storage order of A and B, against torch."""
import itertools
import pathlib

import pytest
import tvm

import tilex
import tilex.language as T
from tilex import env
from tilex.cuda.intrinsics import make_mma_swizzle_layout
from tilex.cuda.intrinsics.layout import mma_layout
from tilex.cuda.intrinsics.layout.utils import get_ldmatrix_offset, get_mma_micro_size, mma_store_index_map
from tilex.cuda.intrinsics.macro.mma_macro_generator import TensorCoreIntrinEmitter
from tilex.engine import pipeline
from tilex.ir import intrin
from tilex.ir.visit import walk


# ---- a model of ldmatrix and the mma.sync fragments (PTX ISA), in plain Python ---------------------------------
def ldmatrix_model(row_start, count, trans, elem_bytes):
    """{(lane, register element): (stored row, stored column)} that ``ldmatrix.x{count}`` (``.trans``) gives when
    lane l points at `row_start(l)`: lanes 8q..8q+7 give the rows of 8 x 16-byte matrix q, which fills register q
    of every lane -- without .trans lane t takes row t // 4, bytes 4 (t % 4) ..; with .trans (16-bit) elements
    (2 (t % 4) + e, t // 4) of the matrix."""
    per_reg = 4 // elem_bytes
    out = {}
    for lane in range(32):
        for q in range(count):
            for e in range(per_reg):
                if trans:
                    r, c = 2 * (lane % 4) + e, lane // 4
                else:
                    r, c = lane // 4, (lane % 4) * per_reg + e
                row0, col0 = row_start(8 * q + r)
                out[lane, q * per_reg + e] = (row0, col0 + c)
    return out


def _operand_cases():
    # (dtype, matrix, transposed, ldmatrix count, register -> element map of the mma operand, (m|n, k) -> stored)
    for dtype, transposed in itertools.product(("float16", "int8"), (False, True)):
        bits = 16 if dtype == "float16" else 8
        for matrix in ("A", "B"):
            k_contiguous = transposed == (matrix == "B")
            if bits == 8 and not k_contiguous:
                continue  # no ldmatrix: loaded element by element
            if matrix == "A":
                regs = (mma_layout.mma_load_a_32x8_to_shared_16x16_layout if bits == 16
                        else mma_layout.mma_load_a_32x16_to_shared_16x32_layout)
            else:
                regs = (mma_layout.mma_load_b_32x8_to_shared_16x16_layout if bits == 16
                        else mma_layout.mma_load_b_32x16_to_shared_16x32_layout)
            yield dtype, matrix, transposed, bits, regs, k_contiguous


@pytest.mark.parametrize("dtype,matrix,transposed,bits,regs,k_contiguous", list(_operand_cases()))
def test_ldmatrix_offsets_fill_the_mma_operand_registers(dtype, matrix, transposed, bits, regs, k_contiguous):
    loaded = ldmatrix_model(lambda lane: get_ldmatrix_offset(matrix, lane, 0, None, dtype, transposed), 4,
                            trans=not k_contiguous, elem_bytes=bits // 8)
    for (lane, reg), (row, col) in loaded.items():
        spatial, k = regs(lane, reg)  # (m, k) of A, (n, k) of B the mma wants in this register
        assert ((row, col) if k_contiguous else (col, row)) == (spatial, k), (lane, reg)


def test_fragment_maps_and_their_inverses_agree():
    cases = [(mma_layout.mma_load_a_32x8_to_shared_16x16_layout, mma_layout.shared_16x16_to_mma_32x8_layout_sr_a, 8),
             (mma_layout.mma_load_b_32x8_to_shared_16x16_layout, mma_layout.shared_16x16_to_mma_32x8_layout_sr_b, 8),
             (mma_layout.mma_load_a_32x16_to_shared_16x32_layout, mma_layout.shared_16x32_to_mma_32x16_layout_sr_a,
              16),
             (mma_layout.mma_load_b_32x16_to_shared_16x32_layout, mma_layout.shared_16x32_to_mma_32x16_layout_sr_b,
              16),
             (mma_layout.mma_load_a_32x4_to_shared_16x8_layout, mma_layout.shared_16x8_to_mma_32x4_layout_sr_a, 4),
             (mma_layout.mma_load_b_32x4_to_shared_16x8_layout, mma_layout.shared_16x8_to_mma_32x4_layout_sr_b, 4)]
    for forward, inverse, regs in cases:
        seen = set()
        for lane, reg in itertools.product(range(32), range(regs)):
            i, j = forward(lane, reg)
            assert inverse(i, j) == (lane, reg)
            seen.add((i, j))
        assert len(seen) == 32 * regs  # every element of the tile exactly once
    # the accumulator of m16n8: c0 c1 on row groupID, c2 c3 on row groupID + 8, columns 2 (lane % 4) + (0, 1)
    for lane, reg in itertools.product(range(32), range(4)):
        assert mma_store_index_map(lane, reg) == (lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + reg % 2)
    assert {mma_store_index_map(lane, reg) for lane in range(32) for reg in range(8)} == set(
        itertools.product(range(16), range(16)))
    assert get_mma_micro_size("float16") == (16, 16, 16) and get_mma_micro_size(T.int8) == (16, 16, 32)


def test_emitter_attributes_follow_tilelangs():
    em = TensorCoreIntrinEmitter(a_dtype=T.float16, b_dtype=T.float16, accum_dtype=T.float32, b_transposed=True,
                                 block_row_warps=2, block_col_warps=2, warp_row_tiles=64, warp_col_tiles=64, chunk=32)
    assert (em.micro_size_x, em.micro_size_y, em.micro_size_k) == (16, 16, 16)
    assert (em.warp_rows, em.warp_cols, em.local_size_a, em.local_size_b, em.local_size_out) == (4, 4, 8, 8, 8)
    assert em.mma_prefix == "m16n8k16" and em.threads == 128 and em.a_dtype_abbrv == "fp16"
    assert (em.mma_num_inst_m, em.mma_num_inst_n) == (4, 4)
    i8 = TensorCoreIntrinEmitter("int8", "int8", "int32", warp_row_tiles=32, warp_col_tiles=24, chunk=64,
                                 reduce_k=2)
    assert (i8.micro_size_k, i8.micro_size_y, i8.n_dim, i8.warp_cols) == (32, 8, 8, 3)
    assert (i8.local_size_a, i8.local_size_b, i8.local_size_out, i8.threads) == (16, 8, 4, 256)
    lane, warp_n, warp_m = em.extract_thread_binding(101)
    assert (lane, warp_n, warp_m) == (5, 1, 1)  # warp 3 of a 2 x 2 grid, M first
    assert em.extract_thread_binding(64 + 7, is_m_first=True) == (7, 0, 1)
    inv = em.get_store_index_map(inverse=True)
    assert [int(x) for x in inv.map_indices([8, 3])] == [1, 3]  # lane 1, c3 (row g + 8, odd column)


def test_bad_arguments_raise():
    with pytest.raises(NotImplementedError, match="a_dtype=float32"):
        TensorCoreIntrinEmitter("float32", "float32", "float32", warp_row_tiles=16, warp_col_tiles=16)
    with pytest.raises(ValueError, match="unsupported a_dtype int16"):
        TensorCoreIntrinEmitter("int16", "int16", "int32", warp_row_tiles=16, warp_col_tiles=16)
    with pytest.raises(ValueError, match="accumulate into float32, not float16"):
        TensorCoreIntrinEmitter("bfloat16", "bfloat16", "float16", warp_row_tiles=16, warp_col_tiles=16)
    with pytest.raises(ValueError, match="accumulate into int32"):
        TensorCoreIntrinEmitter("int8", "int8", "float32", warp_row_tiles=16, warp_col_tiles=16, chunk=32)
    with pytest.raises(ValueError, match="have no mma.sync together"):
        TensorCoreIntrinEmitter("float16", "int8", "float32", warp_row_tiles=16, warp_col_tiles=16, chunk=32)
    with pytest.raises(ValueError, match="warp_row_tiles must be a multiple of 16"):
        TensorCoreIntrinEmitter(warp_row_tiles=24, warp_col_tiles=16, accum_dtype="float32")
    with pytest.raises(ValueError, match="chunk must be a multiple of 32"):
        TensorCoreIntrinEmitter("int8", "int8", "int32", warp_row_tiles=16, warp_col_tiles=16, chunk=16)
    with pytest.raises(TypeError, match="thread_var must be an integer expression"):
        TensorCoreIntrinEmitter(warp_row_tiles=16, warp_col_tiles=16, thread_var=1.5)
    em = TensorCoreIntrinEmitter(warp_row_tiles=16, warp_col_tiles=16, accum_dtype="float32")
    with pytest.raises(NotImplementedError, match="make_mma_store_layout"):
        em.make_mma_store_layout(None)
    with pytest.raises(NotImplementedError, match="TensorCoreIntrinEmitterWithLadderTransform"):
        from tilex.cuda.intrinsics.macro.mma_macro_generator import TensorCoreIntrinEmitterWithLadderTransform  # noqa
    with pytest.raises(NotImplementedError, match="TensorCoreIntrinEmitterSM120"):
        from tilex.cuda.intrinsics.macro import TensorCoreIntrinEmitterSM120  # noqa: F401
    with pytest.raises(NotImplementedError, match="metal_ct_store_index_map"):
        from tilex.cuda.intrinsics.layout.mma_layout import metal_ct_store_index_map  # noqa: F401


# ---- tile programs ------------------------------------------------------------------------------------------------
def emitter_gemm(M, N, K, dtype, accum, out, a_t=False, b_t=True, warps=(2, 2), tiles=(64, 64), chunk=32, stages=2,
                 parallel_loads=False, c_2d=False, to_global=False):
    """C = A @ B (A stored K x M when `a_t`, B N x K when `b_t`) written with the emitter, as TileLang's
    example_gemm_intrinsics does."""
    em = TensorCoreIntrinEmitter(a_dtype=dtype, b_dtype=dtype, accum_dtype=accum, a_transposed=a_t, b_transposed=b_t,
                                 block_row_warps=warps[0], block_col_warps=warps[1], warp_row_tiles=tiles[0],
                                 warp_col_tiles=tiles[1], chunk=chunk)
    bm, bn, bk = warps[0] * tiles[0], warps[1] * tiles[1], chunk
    my, mk = em.micro_size_y, em.micro_size_k
    a_shape, b_shape = ((K, M) if a_t else (M, K)), ((N, K) if b_t else (K, N))
    a_tile, b_tile = ((bk, bm) if a_t else (bm, bk)), ((bn, bk) if b_t else (bk, bn))
    c_tile = (bm, bn) if c_2d else (bm // 16, bn // my, 16, my)

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), out)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=em.threads) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_s = T.alloc_shared(c_tile, out)
            A_l = T.alloc_local((em.warp_rows * em.local_size_a), dtype)
            B_l = T.alloc_local((em.warp_cols * em.local_size_b), dtype)
            C_l = T.alloc_local((em.warp_rows * em.warp_cols * em.local_size_out), accum)
            T.annotate_layout({A_s: make_mma_swizzle_layout(A_s), B_s: make_mma_swizzle_layout(B_s)})
            T.clear(C_l)
            for ko in T.Pipelined(K // bk, num_stages=stages):
                if parallel_loads:
                    for i, k in T.Parallel(bm, bk):
                        A_s[i, k] = A[by * bm + i, ko * bk + k]
                    for j, k in T.Parallel(bn, bk):
                        B_s[j, k] = B[bx * bn + j, ko * bk + k]
                else:
                    T.copy(A[ko * bk, by * bm] if a_t else A[by * bm, ko * bk], A_s)
                    T.copy(B[bx * bn, ko * bk] if b_t else B[ko * bk, bx * bn], B_s)
                for ki in T.serial(bk // mk):
                    em.ldmatrix_a(A_l, A_s, ki)
                    em.ldmatrix_b(B_l, B_s, ki)
                    em.mma(A_l, B_l, C_l)
            if to_global:
                em.stmatrix(C_l, C, pid_m=by, pid_n=bx)
            else:
                em.stmatrix(C_l, C_s)
                if c_2d:
                    T.copy(C_s, C[by * bm, bx * bn])
                else:
                    for i, j in T.Parallel(bm, bn):
                        C[by * bm + i, bx * bn + j] = C_s[i // 16, j // my, i % 16, j % my]

    return gemm


def device_calls(func):
    """The tilex:: device functions the program calls once its tile passes ran (each distinct name)."""
    target = env.resolve_target("sm_90a")
    with target:
        lowered = pipeline.run_tile_passes(func, target)
    names = []
    walk(lowered.body, (tvm.ir.Call, lambda c: names.append(intrin.name_of(c)) if intrin.name_of(c) else None))
    return set(names)


def test_example_style_gemm_compiles_with_ldmatrix_and_mma_sync():
    kernel = tilex.compile(emitter_gemm(256, 256, 128, T.float16, T.float32, T.float16, parallel_loads=True),
                           target="sm_90a")
    src = kernel.get_kernel_source()
    body = src[src.index('extern "C"'):]
    assert body.count(f"{intrin.LDMATRIX}_x4(") == 2  # A and B, once per warp tile in an unrolled loop
    assert body.count(f"{intrin.MMA_M16N8K16}_f16(") == 2  # two m16n8 halves of each 16 x 16 tile
    assert "_trans" not in body
    header = (pathlib.Path(__file__).resolve().parents[2] / "src" / "tilex" / "mma_sm80.h").read_text()
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in header and "mma.sync.aligned.m16n8k16" in header


def test_transposed_and_8bit_operands_pick_their_loads():
    fp16 = device_calls(emitter_gemm(128, 96, 64, T.float16, T.float16, T.float16, a_t=True, b_t=False,
                                     tiles=(32, 24)))
    assert {f"{intrin.LDMATRIX}_x4_trans", f"{intrin.LDMATRIX}_x2_trans",
            f"{intrin.MMA_M16N8K16}_f16_acc_f16"} <= fp16  # n8 tiles: B by ldmatrix.x2
    i8 = device_calls(emitter_gemm(128, 128, 128, T.int8, T.int32, T.int32, chunk=64))
    assert {f"{intrin.LDMATRIX}_x4", f"{intrin.MMA_M16N8K32}_i8<0, 0>"} <= i8
    i8_t = device_calls(emitter_gemm(128, 128, 128, T.int8, T.int32, T.int32, a_t=True, b_t=False, chunk=64))
    assert not any(n.startswith(intrin.LDMATRIX) for n in i8_t)  # 8-bit, K not contiguous: element loads
    assert f"{intrin.MMA_M16N8K32}_i8<0, 0>" in i8_t
    f8 = device_calls(emitter_gemm(128, 128, 128, T.float8_e4m3fn, T.float32, T.float32, chunk=64))
    assert {f"{intrin.LDMATRIX}_x4", f"{intrin.MMA_M16N8K32}_f8<0, 0>"} <= f8


def test_int8_gemm_compiles():
    src = tilex.compile(emitter_gemm(128, 128, 128, T.int8, T.int32, T.int32, a_t=True, b_t=False, chunk=64,
                                     c_2d=True), target="sm_90a").get_kernel_source()
    assert f"{intrin.MMA_M16N8K32}_i8<0, 0>(" in src


def test_misused_operands_raise():
    def program(make_a_local=True, a_scope_global=False, threads=128):
        em = TensorCoreIntrinEmitter(T.float16, T.float16, T.float32, b_transposed=True, warp_row_tiles=32,
                                     warp_col_tiles=32, chunk=32)

        @T.prim_func
        def bad(A: T.Tensor((64, 32), T.float16), C: T.Tensor((64, 64), T.float32)):
            with T.Kernel(1, threads=threads) as bx:
                A_s = T.alloc_shared((64, 32), T.float16)
                A_l = (T.alloc_local((em.warp_rows * em.local_size_a), T.float16) if make_a_local
                       else T.alloc_fragment((64, 32), T.float16))
                em.ldmatrix_a(A_l, A if a_scope_global else A_s, 0)

        return bad

    with pytest.raises(NotImplementedError, match="is a fragment"):
        program(make_a_local=False)
    with pytest.raises(TypeError, match="must be in shared memory"):
        program(a_scope_global=True)
    with pytest.raises(ValueError, match="the block has 64 threads"):
        program(threads=64)


# ---- GPU: values against torch ------------------------------------------------------------------------------------
def _run(func, a, b, out_dtype):
    torch = pytest.importorskip("torch")
    kernel = tilex.compile(func)
    c = torch.empty(*_out_shape(func), dtype=out_dtype, device="cuda")
    kernel(a, b, c)
    return c


def _out_shape(func):
    return [int(x) for x in func.params[2].shape]  # a buffer parameter carries its shape


@pytest.mark.gpu
@pytest.mark.parametrize("a_t,b_t", [(False, True), (False, False), (True, True), (True, False)])
@pytest.mark.parametrize("dtype,accum,out", [("float16", "float32", "float16"), ("float16", "float16", "float16"),
                                             ("bfloat16", "float32", "float32")])
def test_float_gemm_matches_torch(a_t, b_t, dtype, accum, out):
    torch = pytest.importorskip("torch")
    M, N, K = 256, 256, 256
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(K, N, device="cuda", dtype=tdt)
    func = emitter_gemm(M, N, K, dtype, accum, out, a_t=a_t, b_t=b_t)
    c = _run(func, a.T.contiguous() if a_t else a, b.T.contiguous() if b_t else b, getattr(torch, out))
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)


@pytest.mark.gpu
@pytest.mark.parametrize("a_t,b_t", [(False, True), (False, False), (True, True), (True, False)])
def test_int8_gemm_matches_torch(a_t, b_t):
    torch = pytest.importorskip("torch")
    M, N, K = 256, 256, 256
    a = torch.randint(-128, 128, (M, K), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (K, N), device="cuda", dtype=torch.int8)
    func = emitter_gemm(M, N, K, "int8", "int32", "int32", a_t=a_t, b_t=b_t, chunk=64)
    c = _run(func, a.T.contiguous() if a_t else a, b.T.contiguous() if b_t else b, torch.int32)
    assert torch.equal(c.cpu(), a.cpu().long() @ b.cpu().long())


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["parallel_loads", "c_2d", "to_global", "n8"])
def test_gemm_variants_match_torch(variant):
    torch = pytest.importorskip("torch")
    kw = {"parallel_loads": dict(parallel_loads=True), "c_2d": dict(c_2d=True), "to_global": dict(to_global=True),
          "n8": dict(tiles=(32, 24), a_t=True, b_t=False)}[variant]
    M, N, K = 128, 96 if variant == "n8" else 256, 128
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    b_t = kw.get("b_t", True)
    func = emitter_gemm(M, N, K, "float16", "float32", "float32", **kw)
    c = _run(func, a.T.contiguous() if kw.get("a_t") else a, b.T.contiguous() if b_t else b, torch.float32)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-1)


@pytest.mark.gpu
@pytest.mark.parametrize("a_t,b_t", [(False, True), (True, False)])
def test_float8_gemm_matches_torch(a_t, b_t):
    torch = pytest.importorskip("torch")
    M, N, K = 128, 128, 256
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(K, N, device="cuda").to(torch.float8_e4m3fn)
    func = emitter_gemm(M, N, K, "float8_e4m3fn", "float32", "float32", a_t=a_t, b_t=b_t, chunk=64)
    c = _run(func, a.T.contiguous() if a_t else a, b.T.contiguous() if b_t else b, torch.float32)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
