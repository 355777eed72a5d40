"""Parts of register fragments: T.copy of any slice of a fragment to or from memory or another fragment (each thread
copies the elements of the slice it holds, a replicated source written once), and T.Parallel loops reaching a
fragment at an offset from outside the loop (``acc[i + s * 16, j]``, ``lse[k, i]``) or at a fixed index
(``logits[i, 0]``): the loop runs where the elements live when they stay in the same threads for every offset."""
import warnings

import numpy as np
import pytest
from tvm import tirx

import tilex
import tilex.language as T
from tilex.layout import make_mma_accumulator_fragment, make_wgmma_accumulator_fragment
from tilex.layout.fragment_access import (access_layout, box_chunks, offset_choices, offsets_inside,
                                          spread_over_blocks, threads_agree, with_unit_dims)
from tilex.layout.project import project
from tilex.op.base import TileOpError

SM90 = "sm_90a"


def _vars(*names):
    return [tirx.Var(n, "int32") for n in names]


def _body(prog, **kw):
    src = tilex.compile(prog, target=SM90, **kw).get_kernel_source()
    return src[src.rfind('extern "C"'):]


# ---- the layout questions ------------------------------------------------------------------------------------------


def test_rows_16_apart_stay_in_their_threads_in_the_mma_accumulator_but_not_4_apart():
    acc = make_mma_accumulator_fragment(32, 512, 1, 4)  # 4 warps side by side: rows 8 apart share lanes
    i, j, s = _vars("i", "j", "s")
    assert threads_agree(acc, [i, j], acc, [i + s * 16, j], [i, j], [32, 512]) is None
    why = threads_agree(acc, [i, j], acc, [i + s * 4, j], [i, j], [32, 512])
    assert why is not None and "offsets" in why and "lives in thread(s)" in why


def test_rows_16_apart_change_warps_in_the_wgmma_accumulator():
    acc = make_wgmma_accumulator_fragment(64, 128, 1, 1)  # warp w holds rows 16w .. 16w + 15
    i, j, s = _vars("i", "j", "s")
    assert threads_agree(acc, [i, j], acc, [i + s * 16, j], [i, j], [64, 128]) is not None
    assert threads_agree(acc, [i, j], acc, [i + s * 64, j], [i, j], [64, 128]) is None  # only s = 0 fits


def test_an_access_outside_the_tile_fails_unless_an_outer_offset_moves_it():
    acc = make_mma_accumulator_fragment(32, 64, 1, 1)
    i, j = _vars("i", "j")
    assert "outside the fragment" in threads_agree(acc, [i, j], acc, [i + 8, j], [i, j], [32, 64])


def test_offsets_follow_their_residue_and_the_tile():
    (s,) = _vars("s")
    # base rows 0 .. 15 of a 64-row tile: the offset s * 16 + 8 puts some row inside for -8, 8, 24, 40, 56
    assert offset_choices([s * 16 + 8], [(0, 15)], [64]) == [(-8,), (8,), (24,), (40,), (56,)]
    i, j = _vars("i", "j")
    assert [str(e) for e in offsets_inside([i + s * 16, j], [i, j], [16, 8], [64, 8])] == ["i", "j"]


def test_a_fixed_index_of_a_replicated_row_result_gives_the_loop_its_replicas():
    acc = make_wgmma_accumulator_fragment(64, 64, 1, 1)
    rows = with_unit_dims(project(acc, [1])[0], [64, 1])  # a reduction's (64, 1) result: 4 threads a row
    (i,) = _vars("i")
    loop = access_layout(rows, [i, tirx.const(0, "int32")], [i], [64])
    assert loop is not None and int(loop.replicate) == int(rows.replicate) == 4
    t, _ = loop.map_numpy(np.arange(64), rep=3)
    assert np.array_equal(t, rows.map_numpy(np.arange(64), np.zeros(64, dtype=np.int64), rep=3)[0])


def test_a_part_whose_threads_are_not_one_range_has_no_loop_layout():
    acc = make_mma_accumulator_fragment(16, 8, 1, 1)
    i, j = _vars("i", "j")
    assert access_layout(acc, [i + 4, j], [i, j], [4, 8]) is None  # rows 4 .. 7: lanes 16 .. 31 only
    part = access_layout(acc, [i, j], [i, j], [4, 8])  # rows 0 .. 3: lanes 0 .. 15, one dense range
    assert part is not None and part.thread_extent == 16 and part.local_size == 2


def test_box_chunks_name_the_registers_holding_a_part():
    acc = make_wgmma_accumulator_fragment(64, 128, 1, 1)
    # rows 8 .. 15 are the second pair of every group of 4 registers, held by warp 0 alone
    chunks = box_chunks(acc, [8, 0], [8, 128], 2, one_replica=False)
    assert [q for q, _ in chunks] == list(range(1, 32, 2)) and not any(every for _, every in chunks)
    assert all(every for _, every in box_chunks(acc, [0, 0], [64, 16], 2, one_replica=False))


def test_spread_over_blocks_repeats_a_row_layout_over_the_rows_in_registers():
    acc = make_wgmma_accumulator_fragment(64, 128, 1, 1)
    row = project(acc, [0])[0]  # (128,): a row's elements, replicated over the rows' threads
    lse = spread_over_blocks(row, [1, 128], [4, 128])
    k, i = _vars("k", "i")
    assert lse.local_size == 4 * row.local_size
    assert threads_agree(row, [i], lse, [k, i], [i], [128]) is None


# ---- T.copy of fragment parts ----------------------------------------------------------------------------------------


def copy_rows(lo, hi, M=64, N=128, K=64):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), O: T.Tensor((hi - lo, N), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            O_s = T.alloc_shared((hi - lo, N), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(acc[lo:hi, :], O_s)
            T.copy(O_s, O)

    return main


def copy_row_blocks(M=64, N=128, K=64, rows=16):
    """The accumulator leaves in blocks of `rows` rows, the block's corner a loop variable."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            O_s = T.alloc_shared((rows, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            for k in T.serial(M // rows):
                T.copy(acc[k * rows:(k + 1) * rows, :], O_s)
                T.copy(O_s, O[k * rows:(k + 1) * rows, :])

    return main


def overwrite_rows(lo, hi, M=64, N=128, K=64):
    """acc = A @ B, then rows lo .. hi of acc replaced by X (shared -> fragment part)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), X: T.Tensor((hi - lo, N), "float32"),
             O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            X_s = T.alloc_shared((hi - lo, N), "float32")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(X, X_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            T.copy(X_s, acc[lo:hi, :])
            T.copy(acc, O)

    return main


def columns_into_fragment(M=64, N=128, K=64):
    """acc[:, 64:128] -> a (M, 64) fragment -> global: register moves."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), O: T.Tensor((M, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            half = T.alloc_fragment((M, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            T.copy(acc[:, 64:128], half)
            T.copy(half, O)

    return main


def row_max_part(lo, hi, M=64, N=64):
    """A reduction's result (replicated over the threads of a row) copied out in part."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((hi - lo,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((M,), "float32")
            o_s = T.alloc_shared((hi - lo,), "float32")
            T.copy(A, a)
            T.reduce_max(a, m, dim=1)
            T.copy(m[lo:hi], o_s)
            T.copy(o_s, O)

    return main


def combine(num_split=4):
    """A split-KV combine: row k of a (num_split, 128) fragment copied into a (128,) fragment, k a loop variable."""

    @T.prim_func
    def main(L: T.Tensor((num_split, 128), "float16"), P: T.Tensor((num_split, 128), "float32"),
             O: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            lse = T.alloc_fragment((num_split, 128), "float16")
            row = T.alloc_fragment((128,), "float32")
            mx = T.alloc_fragment((128,), "float32")
            acc = T.alloc_fragment((128,), "float32")
            T.copy(L, lse)
            T.reduce_max(lse, mx, dim=0, clear=True)
            T.clear(acc)
            for k in T.serial(num_split):
                T.copy(lse[k, :], row)
                for i in T.Parallel(128):
                    acc[i] += T.exp2(row[i] - mx[i]) * P[k, i]
            T.copy(acc, O)

    return main


def test_a_row_part_of_the_accumulator_is_written_by_the_threads_holding_it():
    # rows 0 .. 3 of the wgmma accumulator: lanes 0 .. 15 of warp 0, every other pair of registers
    body = _body(copy_rows(0, 4))
    assert body.count("*(float2*)(acc_ptr +") == 16 and "*(float2*)(acc_ptr + 2)" not in body
    body = _body(copy_rows(8, 16))  # rows 8 .. 15: the other pairs, the whole of warp 0
    assert "if (((int)threadIdx.x) < 32) {" in body and body.count("*(float2*)(acc_ptr +") == 16
    assert "*(float2*)(acc_ptr + 2)" in body


def test_a_part_at_a_loop_corner_tests_each_register():
    body = _body(copy_row_blocks())
    assert "for (int k = 0; k < 4; ++k)" in body and "(k * 16) <=" in body


def test_a_fragment_part_written_from_shared_memory():
    body = _body(overwrite_rows(16, 32))
    # every register pair holds rows 16 .. 31 in some thread (warp 1): each thread tests the row it holds there
    assert "for (int cp_l = 0; cp_l < 32; ++cp_l)" in body and "if ((16 <= " in body


def test_a_part_into_another_fragment_moves_registers():
    with warnings.catch_warnings():
        warnings.simplefilter("error", tilex.LayoutConversionWarning)
        body = _body(columns_into_fragment())
    assert "half_ptr[cp_l] = acc_ptr[(cp_l + 32)];" in body


def test_a_replicated_part_is_written_once():
    # m[i] lives in the 16 threads 16 * (i % 8) .. + 15: the first of them writes it
    body = _body(row_max_part(8, 40))
    assert "if ((((int)threadIdx.x) % 16) == 0) {" in body


def test_a_row_of_a_fragment_copied_into_another_for_every_row():
    # the rows of `lse` live in different threads (a coalesced load): inference stages it through shared memory
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tilex.LayoutConversionWarning)
        body = _body(combine(), cache=False)
    assert any("'lse'" in str(w.message) for w in caught if w.category is tilex.LayoutConversionWarning)
    assert "for (int k = 0; k < 4; ++k)" in body


# ---- T.Parallel over shifted and fixed indices ---------------------------------------------------------------------


def masked_row_sums(threads=256):
    """logits = row sums of A @ B^T as a (64, 1) fragment (a reduction over a reshaped accumulator), rows from `lim`
    on set to -inf, written out: T.Parallel(64) reads and writes logits[i, 0]."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), lim: T.Tensor((1,), "int32"),
             O: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            s = T.alloc_fragment((64, 64), "float32")
            s_r = T.reshape(s, (64, 1, 64))
            logits = T.alloc_fragment((64, 1), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.reduce_sum(s_r, logits, dim=-1, clear=True)
            for i in T.Parallel(64):
                if i >= lim[0]:
                    logits[i, 0] = -T.infinity("float32")
            for i in T.Parallel(64):
                O[i] = logits[i, 0]

    return main


def split_store(shift=16, modulo=False):
    """A (32, 512) accumulator leaves through a 16-row shared tile in two halves: ``acc[i + s * 16, j]`` in a loop
    over all 32 rows, guarded to the first 16 (``modulo``: ``acc[(i + s * shift) % 32, j]``, which does not
    split into the loop's rows plus an offset)."""

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((64, 512), "float16"), O: T.Tensor((32, 512), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((64, 512), "float16")
            acc = T.alloc_fragment((32, 512), "float32")
            S = T.alloc_shared((16, 512), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, transpose_A=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
            for s in range(2):
                for i, j in T.Parallel(32, 512):
                    if i < 16:
                        if modulo:
                            S[i, j] = acc[(i + s * shift) % 32, j]
                        else:
                            S[i, j] = acc[i + s * shift, j]
                for i, j in T.Parallel(16, 512):
                    O[s * 16 + i, j] = S[i, j]

    return main


def row_max_added(M=64, N=64):
    """O[i] += max_j A[i, j] with T.atomic_add in a loop run by the (replicated) row maxima's layout."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((M,), "float32")
            T.copy(A, a)
            T.reduce_max(a, m, dim=1)
            for i in T.Parallel(M):
                T.atomic_add(O[i], m[i])

    return main


def test_a_replicated_loop_adds_each_element_once():
    # m[i] lives in 16 threads, each running iteration i: only the first of them adds it
    body = _body(row_max_added())
    assert "if ((((int)threadIdx.x) % 16) == 0) {\n      tilex::atomic_add(" in body


def test_a_fixed_unit_index_runs_the_loop_in_the_fragments_threads():
    with warnings.catch_warnings():
        warnings.simplefilter("error", tilex.LayoutConversionWarning)
        body = _body(masked_row_sums())
    # two registers a thread; each row written out by one of the 8 threads holding it
    assert "logits_ptr[par_l] = -CUDART_INF_F;" in body
    assert "(((int)threadIdx.x) >> 7)) == 0) {" in body and "= logits_ptr[par_l_1];" in body


def test_rows_shifted_by_an_outer_loop_read_the_threads_own_registers():
    body = _body(split_store())
    assert "for (int s = 0; s < 2; ++s)" in body and "acc_ptr + ((s * 64) + (par_l * 2))" in body


def test_an_outer_offset_that_does_not_split_is_refused():
    with pytest.raises(TileOpError, match=r"acc\[\(i \+ s \* 16\) % 32, j\], which depends on s from outside"):
        tilex.compile(split_store(modulo=True), target=SM90)


# ---- on a GPU: values against torch ------------------------------------------------------------------------------


def _fp16(torch, *shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("lo,hi", [(0, 4), (8, 16), (3, 37), (60, 64)])
def test_copy_rows_matches_torch(lo, hi):
    torch = pytest.importorskip("torch")
    a, b = _fp16(torch, 64, 64), _fp16(torch, 64, 128)
    o = torch.empty(hi - lo, 128, device="cuda", dtype=torch.float16)
    tilex.compile(copy_rows(lo, hi))(a, b, o)
    torch.testing.assert_close(o.float(), (a.float() @ b.float())[lo:hi], atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
def test_copy_row_blocks_matches_torch():
    torch = pytest.importorskip("torch")
    a, b = _fp16(torch, 64, 64), _fp16(torch, 64, 128)
    o = torch.empty(64, 128, device="cuda", dtype=torch.float32)
    tilex.compile(copy_row_blocks())(a, b, o)
    torch.testing.assert_close(o, a.float() @ b.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("lo,hi", [(16, 32), (5, 9)])
def test_overwrite_rows_matches_torch(lo, hi):
    torch = pytest.importorskip("torch")
    a, b = _fp16(torch, 64, 64), _fp16(torch, 64, 128)
    x = torch.randn(hi - lo, 128, device="cuda")
    o = torch.empty(64, 128, device="cuda")
    tilex.compile(overwrite_rows(lo, hi))(a, b, x, o)
    ref = a.float() @ b.float()
    ref[lo:hi] = x
    torch.testing.assert_close(o, ref, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_columns_into_fragment_match_torch():
    torch = pytest.importorskip("torch")
    a, b = _fp16(torch, 64, 64), _fp16(torch, 64, 128)
    o = torch.empty(64, 64, device="cuda")
    tilex.compile(columns_into_fragment())(a, b, o)
    torch.testing.assert_close(o, (a.float() @ b.float())[:, 64:], atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("lo,hi", [(8, 40), (0, 64), (63, 64)])
def test_row_max_part_matches_torch(lo, hi):
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 64, device="cuda")
    o = torch.empty(hi - lo, device="cuda")
    tilex.compile(row_max_part(lo, hi))(a, o)
    torch.testing.assert_close(o, a.max(dim=1).values[lo:hi])


@pytest.mark.gpu
def test_combine_matches_torch():
    torch = pytest.importorskip("torch")
    lse = torch.randn(4, 128, device="cuda", dtype=torch.float16)
    p = torch.randn(4, 128, device="cuda")
    o = torch.empty(128, device="cuda")
    tilex.compile(combine())(lse, p, o)
    ref = (torch.exp2(lse.float() - lse.float().max(dim=0).values) * p).sum(dim=0)
    torch.testing.assert_close(o, ref, atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("lim", [0, 17, 64])
def test_masked_row_sums_match_torch(lim):
    torch = pytest.importorskip("torch")
    a, b = _fp16(torch, 64, 64), _fp16(torch, 64, 64)
    o = torch.empty(64, device="cuda")
    tilex.compile(masked_row_sums())(a, b, torch.tensor([lim], device="cuda", dtype=torch.int32), o)
    ref = (a.float() @ b.float().T).sum(dim=1)
    ref[lim:] = -float("inf")
    torch.testing.assert_close(o, ref, atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
def test_split_store_matches_torch():
    torch = pytest.importorskip("torch")
    a, b = _fp16(torch, 64, 32), _fp16(torch, 64, 512)
    o = torch.empty(32, 512, device="cuda")
    tilex.compile(split_store())(a, b, o)
    torch.testing.assert_close(o, a.float().T @ b.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_row_max_added_once_matches_torch():
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 64, device="cuda")
    o = torch.ones(64, device="cuda")
    tilex.compile(row_max_added())(a, o)
    torch.testing.assert_close(o, 1 + a.max(dim=1).values)
