"""A reduction over a fragment that is itself replicated (a GEMM A operand that warps side by side along N all
hold, and what a T.Parallel computes from it) combines the threads that held the reduced dimension, never the
replicas: each replica holds a copy of the same values, so summing them would count every element twice. Likewise
a reducer written by a loop that runs in several replicas takes the writes of one replica only (T.finalize_reducer
adds its replicas up).

CPU: the projection's reduction terms and the CUDA tilex generates; GPU: the values against torch."""
import numpy as np
import pytest

import tilex
import tilex.language as T
from tilex.layout import Fragment
from tilex.layout.project import project


def test_projection_reports_only_the_reduced_dimension_terms():
    # 8 x 4 over 64 threads: j on lanes 0..3, i on lanes 4..31 (bits 2..4), a copy in the second warp (replica)
    frag = Fragment((8, 4), lambda i, j, r: r * 32 + i * 4 + j, lambda i, j: 0 * i, replicate=2)
    rows, terms = project(frag, [1])
    assert [(sc, e) for sc, e, _ in terms] == [(1, 4)]  # lanes 0..3 (xor 1, 2); not the replica digit (scale 32)
    assert int(rows.replicate) == 8  # the row lives in 4 lanes of both warps
    held = sorted({int(np.ravel(rows.map_numpy(np.array([3]), rep=r)[0])[0]) for r in range(8)})
    assert held == [12, 13, 14, 15, 44, 45, 46, 47]
    # the radix places the term's digit in the replica index
    (sc, e, radix), = terms
    for r in range(8):
        t = int(np.ravel(rows.map_numpy(np.array([3]), rep=r)[0])[0])
        assert (t // sc) % e == (r // radix) % e


def _staged_operands(bt, bh):
    """A macro loading step k of the GEMM's operands: W's (32, bh) slice into the tf32 shared tile `w_s`, X's
    (bt, bh) bf16 block through shared memory and a bf16 fragment into the tf32 fragment `x_f` (the A operand)."""

    @T.macro
    def stage(X, W, bx, k, w_s, x_f):
        x_s = T.alloc_shared((bt, bh), "bfloat16")
        T.copy(X[bx * bt, k * bh], x_s)
        T.copy(W[0, k * bh], w_s)
        x_16 = T.alloc_fragment((bt, bh), "bfloat16")
        T.copy(x_s, x_16)
        T.copy(x_16, x_f)

    return stage


def sum_of_squares_beside_gemm(tokens=64, hidden=512, bt=32, bh=256):
    """The shape of TileLang's mHC pre GEMM: x (bf16, exact in tf32) through a fragment that is the A operand of a
    tf32 GEMM against W, and per-token sums of squares of the same fragment (4 partial columns, then reduced)."""

    stage = _staged_operands(bt, bh)

    @T.prim_func
    def main(X: T.Tensor((tokens, hidden), "bfloat16"), W: T.Tensor((32, hidden), "float32"),
             O: T.Tensor((tokens, 32), "float32"), S: T.Tensor((tokens,), "float32")):
        with T.Kernel(T.ceildiv(tokens, bt), threads=128) as bx:
            acc = T.alloc_fragment((bt, 32), "float32")
            part = T.alloc_fragment((bt, 4), "float32")
            T.clear(acc)
            T.clear(part)
            for k in T.Pipelined(hidden // bh, num_stages=2):
                w_s = T.alloc_shared((32, bh), T.tfloat32)
                x_f = T.alloc_fragment((bt, bh), T.tfloat32)
                stage(X, W, bx, k, w_s, x_f)
                for jj in T.serial(bh // 4):
                    for i, j in T.Parallel(bt, 4):
                        part[i, j] += x_f[i, jj * 4 + j] * x_f[i, jj * 4 + j]
                T.gemm(x_f, w_s, acc, transpose_B=True)
            rows = T.alloc_fragment((bt,), "float32")
            T.reduce_sum(part, rows)
            for i in T.Parallel(bt):
                S[bx * bt + i] = rows[i]
            T.copy(acc, O[bx * bt, 0])

    return main


def reducer_beside_gemm(tokens=64, hidden=512, bt=32, bh=256):
    """sum_of_squares_beside_gemm's sums through a reducer written by a loop over the replicated A operand."""

    stage = _staged_operands(bt, bh)

    @T.prim_func
    def main(X: T.Tensor((tokens, hidden), "bfloat16"), W: T.Tensor((32, hidden), "float32"),
             O: T.Tensor((tokens, 32), "float32"), S: T.Tensor((tokens,), "float32")):
        with T.Kernel(T.ceildiv(tokens, bt), threads=128) as bx:
            acc = T.alloc_fragment((bt, 32), "float32")
            sums = T.alloc_reducer((bt,), "float32", op="sum")
            T.clear(acc)
            T.reducer_init(sums)
            for k in T.Pipelined(hidden // bh, num_stages=2):
                w_s = T.alloc_shared((32, bh), T.tfloat32)
                x_f = T.alloc_fragment((bt, bh), T.tfloat32)
                stage(X, W, bx, k, w_s, x_f)
                for i, j in T.Parallel(bt, bh):
                    sums[i] += x_f[i, j] * x_f[i, j]
                T.gemm(x_f, w_s, acc, transpose_B=True)
            T.finalize_reducer(sums)
            for i in T.Parallel(bt):
                S[bx * bt + i] = sums[i]
            T.copy(acc, O[bx * bt, 0])

    return main


def test_replicated_loop_adds_into_one_reducer_replica():
    src = tilex.compile(reducer_beside_gemm(), target="sm_90a").get_kernel_source()
    body = src[src.index('extern "C" __global__'):]
    add = body.index("sums_ptr[(par_l")
    # the loop's second copy (the other warp of each pair) leaves its reducer replica at the identity
    assert "((((int)threadIdx.x) & 63) >> 5) == 0)" in body[body.rindex("if (", 0, add):add], body


def test_replicated_partials_are_not_combined_across_warps():
    src = tilex.compile(sum_of_squares_beside_gemm(), target="sm_90a").get_kernel_source()
    # the A operand is held by both warps of a warp pair (they split N): the 4 partial columns sit in lanes
    # 0..3 only, so the reduction is two xor shuffles and no cross-warp workspace
    assert "red_ws" not in src and "ws_r" not in src
    assert src.count("tilex::shfl_xor(") == 2


@pytest.mark.gpu
@pytest.mark.parametrize("program,check_gemm", [(sum_of_squares_beside_gemm, True), (reducer_beside_gemm, False)])
def test_sums_of_squares_beside_gemm_values(program, check_gemm):
    import torch

    kernel = tilex.compile(program(), out_idx=[2, 3])
    x = torch.randn(64, 512, device="cuda").bfloat16()
    w = torch.randn(32, 512, device="cuda")
    o, s = kernel(x, w)
    torch.testing.assert_close(s, x.float().square().sum(-1), rtol=1e-5, atol=1e-3)
    if check_gemm:
        # W rounded to tf32, as the MMA reads it
        w_tf32 = ((w.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)
        torch.testing.assert_close(o, x.float() @ w_tf32.T, rtol=1e-4, atol=1e-3)
