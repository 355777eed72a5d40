"""T.gemm / T.wgmma_gemm cases TileLang programs use: wgmma on stages and column slices of shared tiles, float32
(tf32), float16-accumulator and int4 gemms, and a B operand held in a register fragment. CPU tests compile for
sm_90a (or sm_80) and read the instructions in the CUDA; the descriptor tests model what wgmma reads; GPU tests
compare with torch."""
import re

import numpy as np
import pytest
import tvm
from tvm import tirx

import tilex
import tilex.language as T
from tilex.layout import make_mma_a_fragment, make_mma_b_fragment, make_wgmma_operand_layout
from tilex.op import gemm_wgmma
from tilex.op.gemm import GemmOp
from tilex.op.mma_types import mma_types
from tilex.op.region import Region
from tilex.op.tma_load import shared_layout, tma_box


def _calls(kernel):
    return set(re.findall(r"tilex::(wgmma_m64n\d+k\d+\w*|mma_m16n8k\d+\w*|ldmatrix_\w+)", kernel.get_kernel_source()))


def _wgmma(kernel):
    return {c for c in _calls(kernel) if c.startswith("wgmma")}


# ---- programs -----------------------------------------------------------------------------------------------------
def staged_gemm(M=256, N=256, K=512, bm=128, bn=128, bk=64, wgmma_gemm=False):
    """C = A @ B^T with a hand-written two-stage buffer: the gemm reads stage ``ko % 2`` of 3-d shared tiles."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((2, bm, bk), "float16")
            B_s = T.alloc_shared((2, bn, bk), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for ko in T.serial(K // bk):
                T.copy(A[by * bm, ko * bk], A_s[ko % 2, :, :])
                T.copy(B[bx * bn, ko * bk], B_s[ko % 2, :, :])
                if wgmma_gemm:
                    T.wgmma_gemm(A_s[ko % 2, :, :], B_s[ko % 2, :, :], C_l, transpose_B=True)
                    T.wait_wgmma(0)
                else:
                    T.gemm(A_s[ko % 2, :, :], B_s[ko % 2, :, :], C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def sliced_gemm(q0=0, width=128, v0=0, v_width=128, wgmma_gemm=False):
    """Attention-like column slices of shared tiles: S = Q[:, q0:q0+width] @ K[:, q0:q0+width]^T (K-major slices)
    and the same for the other half; O = S16 @ V[:, v0:v0+v_width] (an MN-major slice of V's columns)."""

    @T.prim_func
    def main(Q: T.Tensor((64, 256), "float16"), Kt: T.Tensor((64, 256), "float16"), V: T.Tensor((64, 256), "float16"),
             S: T.Tensor((64, 64), "float32"), O: T.Tensor((64, v_width), "float32")):
        with T.Kernel(1, threads=128) as bx:
            Q_s = T.alloc_shared((64, 256), "float16")
            K_s = T.alloc_shared((64, 256), "float16")
            V_s = T.alloc_shared((64, 256), "float16")
            P_s = T.alloc_shared((64, 64), "float16")
            S_l = T.alloc_fragment((64, 64), "float32")
            O_l = T.alloc_fragment((64, v_width), "float32")
            T.copy(Q, Q_s)
            T.copy(Kt, K_s)
            T.copy(V, V_s)
            if wgmma_gemm:
                T.wgmma_gemm(Q_s[:, q0:q0 + width], K_s[:, q0:q0 + width], S_l, transpose_B=True, clear_accum=True)
                T.wait_wgmma(0)
            else:
                T.gemm(Q_s[:, q0:q0 + width], K_s[:, q0:q0 + width], S_l, transpose_B=True, clear_accum=True)
            T.copy(S_l, S)
            T.copy(S_l, P_s)
            if wgmma_gemm:
                T.wgmma_gemm(P_s, V_s[:, v0:v0 + v_width], O_l, clear_accum=True)
                T.wait_wgmma(0)
            else:
                T.gemm(P_s, V_s[:, v0:v0 + v_width], O_l, clear_accum=True)
            T.copy(O_l, O)

    return main


def plain_gemm(M, N, K, bm, bn, bk, dtype, acc, trans_a=False, trans_b=False, threads=128, stages=2):
    """C (M, N) = op(A) @ op(B) in tiles, pipelined."""

    @T.prim_func
    def main(A: T.Tensor(((K, M) if trans_a else (M, K)), dtype), B: T.Tensor(((N, K) if trans_b else (K, N)), dtype),
             C: T.Tensor((M, N), acc)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared(((bk, bm) if trans_a else (bm, bk)), dtype)
            B_s = T.alloc_shared(((bn, bk) if trans_b else (bk, bn)), dtype)
            C_l = T.alloc_fragment((bm, bn), acc)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=trans_a, transpose_B=trans_b)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def b_fragment_gemm(M, N, K, dtype="float32", trans_b=False, threads=128):
    """C = A @ (2 B), the scaled B computed by a T.Parallel loop into a register fragment (kda's chunk_bwd_intra:
    16 rows of float32)."""
    b_shape = (N, K) if trans_b else (K, N)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared(b_shape, dtype)
            B_f = T.alloc_fragment(b_shape, dtype)
            C_l = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            for i, j in T.Parallel(*b_shape):
                B_f[i, j] = B_s[i, j] * 2
            T.clear(C_l)
            T.gemm(A_s, B_f, C_l, transpose_B=trans_b)
            T.copy(C_l, C)

    return main


def int4_gemm(M=256, N=256, K=512, bm=128, bn=128, bk=64):
    @T.prim_func
    def main(A: T.Tensor((M, K), T.int4), B: T.Tensor((N, K), T.int4), C: T.Tensor((M, N), T.int32)):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), T.int4)
            B_s = T.alloc_shared((bn, bk), T.int4)
            C_l = T.alloc_fragment((bm, bn), T.int32)
            T.clear(C_l)
            for ko in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[bx * bn, ko * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


# ---- wgmma on stages and slices -------------------------------------------------------------------------------------
@pytest.mark.parametrize("explicit", [False, True])
def test_stage_of_a_multibuffered_tile_runs_on_wgmma(explicit):
    k = tilex.compile(staged_gemm(wgmma_gemm=explicit), out_idx=-1, target="sm_90a")
    assert _wgmma(k) == {"wgmma_m64n128k16_f16"}


@pytest.mark.parametrize("explicit", [False, True])
def test_column_slices_run_on_wgmma(explicit):
    k = tilex.compile(sliced_gemm(wgmma_gemm=explicit), target="sm_90a")
    assert _wgmma(k) == {"wgmma_m64n64k16_f16", "wgmma_m64n128k16_f16"}
    assert not any(c.startswith("mma_m16n8k16") for c in _calls(k))


def test_k_major_slice_may_start_inside_a_swizzle_row():
    """K-major: each k step reads 16 columns of one swizzle row, so a slice may start at any multiple of 16."""
    k = tilex.compile(sliced_gemm(q0=16, width=64, wgmma_gemm=True), target="sm_90a")
    assert "wgmma_m64n64k16_f16" in _wgmma(k)


def test_mn_major_slice_off_a_swizzle_row_is_refused_by_wgmma_gemm():
    with pytest.raises(tilex.TileOpError, match=r"breaks the 128-byte swizzle atoms of 'V_s'.*multiples of 64"):
        tilex.compile(sliced_gemm(v0=32, v_width=64, wgmma_gemm=True), target="sm_90a")


def test_mn_major_slice_off_a_swizzle_row_falls_back_to_mma_sync():
    k = tilex.compile(sliced_gemm(v0=32, v_width=64), target="sm_90a")
    assert "mma_m16n8k16_f16" in _calls(k)  # the P @ V gemm
    assert "wgmma_m64n64k16_f16" in _wgmma(k)  # the Q @ K^T slices still run on wgmma


def _region(buf, mins, extents):
    return Region(buf, [tirx.const(m, "int32") if isinstance(m, int) else m for m in mins], list(extents))


def test_refusal_names_the_problem():
    a = tirx.decl_buffer((64, 256), "float16", "A_s", scope="shared.dyn")
    b = tirx.decl_buffer((64, 256), "float16", "B_s", scope="shared.dyn")
    c = tirx.decl_buffer((64, 64), "float32", "C_l", scope="local.fragment")
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    ok = GemmOp(_region(a, [0, 64], [64, 64]), _region(b, [0, 64], [64, 64]), Region.full(c), False, True)
    assert gemm_wgmma.refusal(ok, 128, target) is None
    rows = GemmOp(_region(a, [4, 0], [64, 64]), _region(b, [0, 0], [64, 64]), Region.full(c), False, True)
    assert "rows must start at a multiple of 8" in gemm_wgmma.refusal(rows, 128, target)
    f32 = tirx.decl_buffer((64, 64), "float32", "F_s", scope="shared.dyn")
    tf32 = GemmOp(Region.full(f32), Region.full(f32), Region.full(c), False, True)
    assert "no warpgroup MMA takes float32" in gemm_wgmma.refusal(tf32, 128, target)


# ---- what wgmma reads through a descriptor (PTX ISA canonical layouts) --------------------------------------------
def _at(layout, index):
    """The integer `layout` maps constant `index` to."""
    return int(layout.map_numpy(*[np.array([i]) for i in index])[0][0])


def _swizzled(addr, swizzle):
    """The address the hardware reads for canonical byte address `addr` (CUTLASS Swizzle<log2(S/16), 4, 3>)."""
    mask = swizzle // 16 - 1
    return addr ^ (((addr >> 7) & mask) << 4)


def _wgmma_reads(start, lbo, sbo, swizzle, k_major, mn, k, bits=16):
    """Byte address wgmma reads for element (mn, k) of an operand whose descriptor starts at `start`."""
    elems = swizzle * 8 // bits  # elements per swizzle row
    if k_major:
        addr = start + (mn // 8) * sbo + (mn % 8) * swizzle + k * bits // 8
    else:
        addr = start + (mn // elems) * lbo + (k // 8) * sbo + (k % 8) * swizzle + (mn % elems) * bits // 8
    return _swizzled(addr, swizzle)


@pytest.mark.parametrize("rows,cols,k_major,r0,c0,mn_ext,k_ext", [
    (64, 256, True, 0, 64, 64, 16),      # K-major column slice, whole swizzle rows (Q_s[:, 64:128])
    (64, 256, True, 8, 48, 64, 16),      # K-major: rows from 8, a k step inside a swizzle row
    (64, 576, True, 0, 512, 64, 16),     # the 64-column tail of a 576-wide tile (MLA's rope part)
    (64, 256, False, 16, 128, 128, 16),  # MN-major column slice (V_s[k0:, 128:256]), k from row 16
    (128, 64, True, 64, 0, 64, 16),      # a row slice (the second 64-row block)
])
def test_descriptor_of_a_slice_reads_the_slice(rows, cols, k_major, r0, c0, mn_ext, k_ext):
    """wgmma reading an operand box through the descriptor tilex builds (start = the box's first element under the
    buffer's layout, SBO = 8 swizzle rows, LBO = one plane for MN-major) reads each element where the buffer's
    layout stores it."""
    bits = 16
    swizzle = gemm_wgmma.wgmma_swizzle_bytes(rows, cols, bits)
    lay = make_wgmma_operand_layout(rows, cols, bits)

    def byte(r, c):
        return _at(lay, [r, c]) * bits // 8

    start = byte(r0, c0)
    lbo, sbo = (16 if k_major else rows * swizzle), 8 * swizzle
    for mn in range(mn_ext):
        for k in range(k_ext):
            r, c = (r0 + mn, c0 + k) if k_major else (r0 + k, c0 + mn)
            assert _wgmma_reads(start, lbo, sbo, swizzle, k_major, mn, k) == byte(r, c), (mn, k)


def test_descriptor_model_catches_a_box_that_breaks_the_atoms():
    """The model is not vacuous: an MN-major box starting mid swizzle row is read from the wrong places."""
    lay = make_wgmma_operand_layout(64, 256, 16)
    start = _at(lay, [0, 32]) * 2
    bad = [(mn, k) for mn in range(64) for k in range(16)
           if _wgmma_reads(start, 64 * 128, 1024, 128, False, mn, k) != _at(lay, [k, 32 + mn]) * 2]
    assert bad


def test_tma_load_into_column_slices_uses_the_buffer_layout():
    """A TMA box into a column slice of a wider tile lands in the buffer's own swizzle planes."""
    buf = tirx.decl_buffer((64, 256), "float16", "KV_s", scope="shared.dyn")
    j = tirx.Var("j", "int32")
    dst = Region(buf, [tirx.const(0, "int32"), j * 64], [64, 64])
    assert tma_box(dst) == (64, 64, 128, 64)
    assert shared_layout(dst).is_equal(make_wgmma_operand_layout(64, 256, 16))
    with pytest.raises(tilex.TileOpError, match="not whole swizzle planes"):
        tma_box(Region(buf, [tirx.const(0, "int32"), j * 64 + 32], [64, 64]))


# ---- dtypes ---------------------------------------------------------------------------------------------------------
def test_mma_types_of_the_new_families():
    t = mma_types("float32", "float32", "float32")
    assert (t.family, t.k_step, t.has_wgmma) == ("tf32", 8, False)
    t = mma_types("float16", "float16", "float16")
    assert (t.family, t.k_step, t.half_acc, t.has_wgmma) == ("f16", 16, True, True)
    t = mma_types("int4", "int4", "int32")
    assert (t.family, t.k_step, t.k_major_only, t.has_wgmma) == ("i4", 64, True, False)
    assert mma_types("bfloat16", "bfloat16", "float16") is None
    assert mma_types("int4", "int8", "int32") is None


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_float32_gemm_runs_as_tf32_mma_sync(target, trans_a, trans_b):
    """TileLang runs float32 x float32 -> float32 as mma.sync m16n8k8 .tf32 (no warpgroup MMA): K-major operands
    through ldmatrix, MN-major ones element by element."""
    k = tilex.compile(plain_gemm(256, 256, 256, 128, 128, 32, "float32", "float32", trans_a, trans_b),
                      out_idx=-1, target=target)
    calls = _calls(k)
    assert "mma_m16n8k8_tf32" in calls and not _wgmma(k)
    assert ("ldmatrix_x4" in calls) == (not trans_a or trans_b)
    assert "ldmatrix_x4_trans" not in calls and "ldmatrix_x2_trans" not in calls


def test_wgmma_gemm_refuses_float32():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 64), "float32")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.wgmma_gemm(A_s, A_s, C_l, transpose_B=True, clear_accum=True)
            T.wait_wgmma(0)
            T.copy(C_l, C)

    with pytest.raises(tilex.TileOpError, match="no warpgroup MMA takes float32 x float32"):
        tilex.compile(main, target="sm_90a")


@pytest.mark.parametrize("target,threads,want", [
    ("sm_90a", 128, "wgmma_m64n128k16_f16_acc_f16"),
    ("sm_90a", 64, "mma_m16n8k16_f16_acc_f16"),  # two warps: no warpgroup
    ("sm_80", 128, "mma_m16n8k16_f16_acc_f16"),
])
def test_float16_accumulator(target, threads, want):
    k = tilex.compile(plain_gemm(256, 256, 256, 128, 128, 32, "float16", "float16", trans_b=True, threads=threads),
                      out_idx=-1, target=target)
    assert want in _calls(k)


def a_fragment_half_acc_gemm(M=128, N=128, K=64):
    """C (float16) = A @ B with A staged through a register fragment."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            A_f = T.alloc_fragment((M, K), "float16")
            C_l = T.alloc_fragment((M, N), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(A_s, A_f)
            T.clear(C_l)
            T.gemm(A_f, B_s, C_l)
            T.copy(C_l, C)

    return main


@pytest.mark.parametrize("target,want", [("sm_90a", "wgmma_m64n128k16_rs_f16_acc_f16<1>"),
                                         ("sm_80", "mma_m16n8k16_f16_acc_f16")])
def test_float16_accumulator_with_a_fragment(target, want):
    k = tilex.compile(a_fragment_half_acc_gemm(), out_idx=-1, target=target)
    assert want in k.get_kernel_source()


def test_int4_gemm_runs_on_mma_sync_k64():
    """TileLang's int4 T.gemm: mma.sync m16n8k64 .s4 (PTX has no 4-bit wgmma), ldmatrix on K-major tiles."""
    k = tilex.compile(int4_gemm(), out_idx=-1, target="sm_90a")
    assert "mma_m16n8k64_i4<0, 0>" in k.get_kernel_source()
    assert not _wgmma(k)


def test_int4_gemm_needs_k_major_operands():
    @T.prim_func
    def main(A: T.Tensor((128, 128), T.int4), C: T.Tensor((128, 128), T.int32)):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((128, 128), T.int4)
            C_l = T.alloc_fragment((128, 128), T.int32)
            T.copy(A, A_s)
            T.gemm(A_s, A_s, C_l, clear_accum=True)
            T.copy(C_l, C)

    with pytest.raises(tilex.TileOpError, match="4-bit operands .* must be K-major"):
        tilex.compile(main, target="sm_90a")


# ---- B in registers -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_b_fragment_float32_sixteen_rows(target):
    """kda's chunk_bwd_intra: a 16-row float32 A tile times a float32 B fragment, mma.sync with B from the
    fragment's own registers (no B loads)."""
    k = tilex.compile(b_fragment_gemm(16, 64, 16), target=target)
    src = k.get_kernel_source()
    assert "mma_m16n8k8_tf32" in _calls(k)
    assert "B_frag" not in src


@pytest.mark.parametrize("trans_b", [False, True])
def test_b_fragment_float16(trans_b):
    k = tilex.compile(b_fragment_gemm(64, 64, 32, dtype="float16", trans_b=trans_b), target="sm_90a")
    assert "mma_m16n8k16_f16" in _calls(k) and "B_frag" not in k.get_kernel_source()


def both_fragments_gemm():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((64, 32), "float16")
            B_f = T.alloc_fragment((32, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_f)
            T.copy(B, B_f)
            T.clear(C_l)
            T.gemm(A_f, B_f, C_l)
            T.copy(C_l, C)

    return main


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_both_operands_in_registers(target):
    k = tilex.compile(both_fragments_gemm(), out_idx=-1, target=target)
    src = k.get_kernel_source()
    assert _calls(k) == {"mma_m16n8k16_f16"} and "A_frag" not in src and "B_frag" not in src


def test_b_fragment_must_be_used_whole():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32"), C: T.Tensor((16, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((16, 16), "float32")
            B_f = T.alloc_fragment((16, 64), "float32")
            C_l = T.alloc_fragment((16, 32), "float32")
            T.copy(A, A_s)
            T.fill(B_f, 1)
            T.gemm(A_s, B_f[:, 0:32], C_l, clear_accum=True)
            T.copy(C_l, C)

    with pytest.raises(tilex.TileOpError, match="B fragment must be used whole"):
        tilex.compile(main, target="sm_90a")


def test_fragment_layouts_follow_the_ptx_tables():
    """tf32 m16n8k8: a0..a3 = (g, t), (g+8, t), (g, t+4), (g+8, t+4); b0, b1 = (k t, n g), (k t+4, n g); 8-bit
    k32 B: b0 = k 4t..4t+3, b1 = k 16+4t.., column g (g = lane // 4, t = lane % 4)."""
    a = make_mma_a_fragment(16, 8, 1, 1, bits=32)
    b = make_mma_b_fragment(8, 8, 1, 1, bits=32)
    b8 = make_mma_b_fragment(32, 8, 1, 1, bits=8)
    for lane in (0, 6, 31):
        g, t = lane // 4, lane % 4
        got_a = [tuple(int(v) for v in a.inverse().map([lane, x])[:2]) for x in range(4)]
        assert got_a == [(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]
        got_b = [tuple(int(v) for v in b.inverse().map([lane, x])[:2]) for x in range(2)]
        assert got_b == [(t, g), (t + 4, g)]
        got_b8 = [tuple(int(v) for v in b8.inverse().map([lane, x])[:2]) for x in range(8)]
        assert got_b8 == [(4 * t + x % 4 + 16 * (x // 4), g) for x in range(8)]
    # 16-bit B is unchanged: b0..b3 = k 2t, 2t+1, 2t+8, 2t+9
    b16 = make_mma_b_fragment(16, 8, 1, 1)
    assert [tuple(int(v) for v in b16.inverse().map([5, x])[:2]) for x in range(4)] == [(2, 1), (3, 1), (10, 1),
                                                                                          (11, 1)]


# ---- on the GPU -----------------------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


def _tf32(x):
    """float32 values as the tf32 MMAs take them: rounded to the nearest tf32, ties away (finite values)."""
    torch = _torch()
    return ((x.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_float32_gemm_matches_torch(trans_a, trans_b):
    torch = _torch()
    M, N, K = 256, 384, 512
    kernel = tilex.compile(plain_gemm(M, N, K, 128, 128, 32, "float32", "float32", trans_a, trans_b), out_idx=-1)
    a = torch.randn((K, M) if trans_a else (M, K), device="cuda")
    b = torch.randn((N, K) if trans_b else (K, N), device="cuda")
    opa, opb = (a.t() if trans_a else a), (b.t() if trans_b else b)
    ref = _tf32(opa).double() @ _tf32(opb).double()
    torch.testing.assert_close(kernel(a, b).double(), ref, atol=1e-3 * K ** 0.5, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [128, 64])
def test_float16_accumulator_matches_torch(threads):
    torch = _torch()
    M, N, K = 256, 256, 256
    kernel = tilex.compile(plain_gemm(M, N, K, 128, 128, 32, "float16", "float16", trans_b=True, threads=threads),
                           out_idx=-1)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16) / 4
    b = torch.randn(N, K, device="cuda", dtype=torch.float16) / 4
    torch.testing.assert_close(kernel(a, b).float(), a.float() @ b.float().t(), atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("explicit", [False, True])
def test_staged_gemm_matches_torch(explicit):
    torch = _torch()
    kernel = tilex.compile(staged_gemm(wgmma_gemm=explicit), out_idx=-1)
    a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b) / 512 ** 0.5, (a.float() @ b.float().t()) / 512 ** 0.5, atol=1e-2,
                               rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("q0,width,v0,v_width", [(0, 128, 0, 128), (128, 128, 128, 128), (16, 64, 64, 64)])
def test_sliced_gemm_matches_torch(explicit, q0, width, v0, v_width):
    torch = _torch()
    kernel = tilex.compile(sliced_gemm(q0, width, v0, v_width, wgmma_gemm=explicit))
    q, kt, v = (torch.randn(64, 256, device="cuda", dtype=torch.float16) / 4 for _ in range(3))
    s = torch.empty(64, 64, device="cuda")
    o = torch.empty(64, v_width, device="cuda")
    kernel(q, kt, v, s, o)
    s_ref = q[:, q0:q0 + width].float() @ kt[:, q0:q0 + width].float().t()
    torch.testing.assert_close(s, s_ref, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(o, s.half().float() @ v[:, v0:v0 + v_width].float(), atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,trans_b", [("float32", False), ("float32", True), ("float16", False)])
def test_b_fragment_matches_torch(dtype, trans_b):
    torch = _torch()
    M, N, K = (16, 64, 16) if dtype == "float32" else (64, 64, 32)
    kernel = tilex.compile(b_fragment_gemm(M, N, K, dtype=dtype, trans_b=trans_b), out_idx=-1)
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn((N, K) if trans_b else (K, N), device="cuda", dtype=tdt)
    opb = b.t() if trans_b else b
    if dtype == "float32":
        ref = _tf32(a).double() @ _tf32(2 * opb).double()
    else:
        ref = a.double() @ (2 * opb).double()
    torch.testing.assert_close(kernel(a, b).double(), ref, atol=1e-2, rtol=1e-3)


@pytest.mark.gpu
def test_both_fragments_match_torch():
    torch = _torch()
    kernel = tilex.compile(both_fragments_gemm(), out_idx=-1)
    a = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    b = torch.randn(32, 64, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_float16_accumulator_with_a_fragment_matches_torch():
    torch = _torch()
    kernel = tilex.compile(a_fragment_half_acc_gemm(), out_idx=-1)
    a = torch.randn(128, 64, device="cuda", dtype=torch.float16) / 4
    b = torch.randn(64, 128, device="cuda", dtype=torch.float16) / 4
    torch.testing.assert_close(kernel(a, b).float(), a.float() @ b.float(), atol=5e-2, rtol=1e-2)
