"""Attention over a batch of variable-length sequences packed end to end, and `attention_varlen` to run it.

Shapes: q ``[total_q, heads, dim]``, k and v ``[total_k, heads_kv, dim]`` (sequence b's queries are rows
``cu_seqlens_q[b]:cu_seqlens_q[b + 1]``, its keys rows ``cu_seqlens_k[b]:cu_seqlens_k[b + 1]``), ``cu_seqlens_q``
and ``cu_seqlens_k`` int32 ``[batch + 1]`` starting at 0. fp16 / bf16, fp32 accumulation, head dim 64/128/256,
GQA (``heads % heads_kv == 0``, query head h reads kv head ``h // (heads // heads_kv)``).

The grid is ``(ceildiv(max_seqlen_q, block_M), heads, batch)``: block (bx, h, b) reads its sequence's bounds from
the two cu_seqlens tensors, does nothing when its first query row ``bx * block_M`` is past the sequence's length,
otherwise runs the online softmax over the sequence's keys (keys past the sequence's end are masked) and stores its
output row by row, only the rows inside the sequence: a tile store clipped at ``total_q`` would still write into
the next sequence's rows. An empty sequence writes nothing; a sequence with queries but no keys gets zeros.
Causal masking (optional) is top-left aligned per sequence and assumes equal query and key lengths per sequence.

This first version takes ``total_q`` / ``total_k`` as static shapes: a kernel is compiled per (batch, total
lengths, max_seqlen_q) and reused while those stay the same. Because the key/value tile coordinates depend on
values loaded from ``cu_seqlens_k`` at run time, tilex keeps the key loop on its cp.async pipeline (no TMA producer
warpgroup) on sm_90a; the gemms still use wgmma.
"""
import math

import tilex.language as T
from tilex.jit import compile as compile_kernel
from tilex.kernels.attention.common import LOG2E, TORCH_DTYPES, online_softmax



def default_config(dim):
    """(block_M, block_N, num_stages, threads) for a head dim."""
    return {64: (128, 128, 2, 256), 128: (128, 128, 2, 256), 256: (128, 64, 2, 256)}[dim]


def mha_varlen(batch, heads, heads_kv, total_q, total_k, max_seqlen_q, dim, causal=False, sm_scale=None,
               dtype="float16", block_M=None, block_N=None, num_stages=None, threads=None):
    """The tile program ``main(Q, K, V, cu_seqlens_q, cu_seqlens_k, Output)``."""
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"attention_varlen: dtype must be float16 or bfloat16, got {dtype}")
    if dim not in (64, 128, 256):
        raise ValueError(f"attention_varlen: head dim {dim} is not supported (64, 128 or 256)")
    if heads_kv <= 0 or heads % heads_kv:
        raise ValueError(f"attention_varlen: {heads} query heads are not a multiple of {heads_kv} key/value heads")
    if min(batch, heads, total_q, total_k, max_seqlen_q) <= 0:
        raise ValueError(f"attention_varlen: empty problem (batch={batch}, heads={heads}, total_q={total_q}, "
                         f"total_k={total_k}, max_seqlen_q={max_seqlen_q})")
    bm, bn, stages, nthreads = default_config(dim)
    bm, bn = block_M or bm, block_N or bn
    stages, nthreads = num_stages or stages, threads or nthreads
    group = heads // heads_kv
    sm_scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(dim)
    scale = sm_scale * LOG2E  # base-2 softmax
    accum, index = "float32", "int32"

    @T.prim_func
    def main(Q: T.Tensor((total_q, heads, dim), dtype), K: T.Tensor((total_k, heads_kv, dim), dtype),
             V: T.Tensor((total_k, heads_kv, dim), dtype), cu_seqlens_q: T.Tensor((batch + 1,), index),
             cu_seqlens_k: T.Tensor((batch + 1,), index), Output: T.Tensor((total_q, heads, dim), dtype)):
        with T.Kernel(T.ceildiv(max_seqlen_q, bm), heads, batch, threads=nthreads) as (bx, by, bz):
            Q_shared = T.alloc_shared([bm, dim], dtype)
            K_shared = T.alloc_shared([bn, dim], dtype)
            V_shared = T.alloc_shared([bn, dim], dtype)
            acc_s = T.alloc_fragment([bm, bn], accum)
            acc_s_cast = T.alloc_fragment([bm, bn], dtype)
            acc_o = T.alloc_fragment([bm, dim], accum)
            scores_max = T.alloc_fragment([bm], accum)
            scores_max_prev = T.alloc_fragment([bm], accum)
            scores_scale = T.alloc_fragment([bm], accum)
            scores_sum = T.alloc_fragment([bm], accum)
            logsum = T.alloc_fragment([bm], accum)

            q_start = cu_seqlens_q[bz]
            q_len = cu_seqlens_q[bz + 1] - q_start
            k_start = cu_seqlens_k[bz]
            k_len = cu_seqlens_k[bz + 1] - k_start
            # rows past the sequence read the next sequence's queries (or zeros past total_q): never stored
            T.copy(Q[q_start + bx * bm:q_start + bx * bm + bm, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum))
            n_blocks = (T.min(T.ceildiv(k_len, bn), T.ceildiv((bx + 1) * bm, bn)) if causal
                        else T.ceildiv(k_len, bn))
            # a query block past its sequence's end runs no key block and stores no row. (Not an `if` around the
            # whole body: TVM's ThreadSync cannot place the tile operators' barriers inside a condition.)
            loop_range = T.if_then_else(bx * bm < q_len, n_blocks, 0)
            for k in T.Pipelined(loop_range, num_stages=stages):
                T.copy(K[k_start + k * bn:k_start + k * bn + bn, by // group, :], K_shared)
                if causal:
                    for i, j in T.Parallel(bm, bn):
                        acc_s[i, j] = T.if_then_else((bx * bm + i >= k * bn + j) & (k * bn + j < k_len), 0,
                                                     -T.infinity(accum))
                else:
                    for i, j in T.Parallel(bm, bn):
                        acc_s[i, j] = T.if_then_else(k * bn + j < k_len, 0, -T.infinity(accum))
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum,
                               logsum, scale, bm, bn, dim)
                # V rows past the sequence (the next sequence's, or zeros) meet probabilities of exactly 0
                T.copy(V[k_start + k * bn:k_start + k * bn + bn, by // group, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(bm, dim):
                acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)  # no keys: zeros
            T.copy(acc_o, Q_shared)  # Q's tile is free after the loop: it stages O (head dim 256 fits)
            for i, j in T.Parallel(bm, dim):
                if bx * bm + i < q_len:
                    Output[q_start + bx * bm + i, by, j] = Q_shared[i, j]

    return main


_kernels = {}


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal=False, sm_scale=None):
    """O ``[total_q, heads, dim]`` for packed sequences (see the module docstring); `max_seqlen_q` is a Python int,
    the longest query length. A kernel is compiled per (batch, total lengths, max_seqlen_q, heads, dim, dtype)."""
    dtype = TORCH_DTYPES.get(str(q.dtype))
    if dtype is None:
        raise ValueError(f"attention_varlen: q must be float16 or bfloat16, got {q.dtype}")
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape or k.shape[2] != q.shape[2]:
        raise ValueError(f"attention_varlen: q [total_q, heads, dim] and k, v [total_k, heads_kv, dim] expected, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"attention_varlen: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if cu_seqlens_q.shape != cu_seqlens_k.shape or cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape[0] < 2:
        raise ValueError(f"attention_varlen: cu_seqlens_q {tuple(cu_seqlens_q.shape)} and cu_seqlens_k "
                         f"{tuple(cu_seqlens_k.shape)} must both be [batch + 1]")
    (total_q, heads, dim), (total_k, heads_kv, _) = q.shape, k.shape
    batch = cu_seqlens_q.shape[0] - 1
    max_seqlen_q = int(max_seqlen_q)
    key = (batch, heads, heads_kv, total_q, total_k, max_seqlen_q, dim, bool(causal), sm_scale, dtype)
    kern = _kernels.get(key)
    if kern is None:
        prog = mha_varlen(batch, heads, heads_kv, total_q, total_k, max_seqlen_q, dim, causal, sm_scale, dtype)
        kern = _kernels[key] = compile_kernel(prog, out_idx=[5])
    return kern(q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens_q.int().contiguous(),
                cu_seqlens_k.int().contiguous())
