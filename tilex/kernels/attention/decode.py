"""Attention decoding with a KV cache ("flash-decoding", split-KV) as two tile programs, and `attention_decode`.

Shapes: q ``[batch, heads_q, dim]`` (the one new token per sequence), the caches k, v ``[batch, kv_len, heads_kv,
dim]`` (BSHD), fp16/bf16, ``heads_q % heads_kv == 0`` (GQA; MQA when heads_kv is 1, MHA when equal).

* `decode_split`: grid (batch, heads_kv, num_splits). A block takes all ``group = heads_q // heads_kv`` query heads
  that share one kv head as the rows of a 64-row Q tile (rows past the group are zeros and never written: wgmma
  needs M = 64 per warpgroup), and runs the online softmax over one contiguous chunk of the cache (``chunk`` keys,
  a whole number of `bn`-key tiles, T.Pipelined). Keys past kv_len are masked. It writes the chunk's normalized
  partial output (fp32 ``[batch, heads_q, num_splits, dim]``) and its log-sum-exp in **base 2** of the scaled
  scores (fp32 ``[batch, heads_q, num_splits]``; an empty chunk writes -inf and zeros).
* `decode_combine`: grid (heads_q, batch): ``O = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M)``, M = max lse_s.
"""
import functools
import math

import tilex.language as T
from tilex.ir.hardware import num_sms
from tilex.jit import compile as compile_kernel
from tilex.kernels.attention.common import LOG2E, TORCH_DTYPES

ROWS = 64  # query rows of the tile (one wgmma warpgroup's M)


def split_chunk(kv_len, num_splits, bn):
    """Keys per split (whole bn tiles) and the number of non-empty splits that covers kv_len with them."""
    tiles = max(1, -(-kv_len // bn))
    per = -(-tiles // max(1, num_splits))
    return per * bn, -(-tiles // per)


def decode_split(batch, heads_q, heads_kv, kv_len, dim, num_splits, sm_scale=None, dtype="float16", bn=64,
                 num_stages=2, threads=128):
    if heads_q % heads_kv:
        raise ValueError(f"decode: heads_q={heads_q} is not a multiple of heads_kv={heads_kv}")
    group = heads_q // heads_kv
    if group > ROWS:
        raise ValueError(f"decode: {group} query heads per kv head; at most {ROWS} are supported")
    sm_scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(dim)
    scale2 = sm_scale * LOG2E
    chunk, _ = split_chunk(kv_len, num_splits, bn)
    tiles_per_split = chunk // bn

    @T.prim_func
    def split(Q: T.Tensor((batch, heads_q, dim), dtype), Kc: T.Tensor((batch, kv_len, heads_kv, dim), dtype),
              Vc: T.Tensor((batch, kv_len, heads_kv, dim), dtype),
              O_part: T.Tensor((batch, heads_q, num_splits, dim), "float32"),
              Lse_part: T.Tensor((batch, heads_q, num_splits), "float32")):
        with T.Kernel(batch, heads_kv, num_splits, threads=threads) as (bx, by, bz):
            Q_s = T.alloc_shared((ROWS, dim), dtype)
            K_s = T.alloc_shared((bn, dim), dtype)
            V_s = T.alloc_shared((bn, dim), dtype)
            S = T.alloc_fragment((ROWS, bn), "float32")
            P = T.alloc_fragment((ROWS, bn), dtype)
            acc = T.alloc_fragment((ROWS, dim), "float32")
            m = T.alloc_fragment((ROWS,), "float32")
            m_prev = T.alloc_fragment((ROWS,), "float32")
            alpha = T.alloc_fragment((ROWS,), "float32")
            rowsum = T.alloc_fragment((ROWS,), "float32")
            l = T.alloc_fragment((ROWS,), "float32")

            for r, d in T.Parallel(ROWS, dim):
                Q_s[r, d] = T.if_then_else(r < group, Q[bx, by * group + r, d], T.Cast(dtype, 0))
            T.clear(acc)
            T.clear(l)
            T.fill(m, -T.infinity("float32"))
            start = bz * chunk
            n_tiles = T.max(T.min(T.floordiv(kv_len - start + bn - 1, bn), tiles_per_split), 0)
            for t in T.Pipelined(n_tiles, num_stages=num_stages):
                T.copy(Kc[bx, start + t * bn:start + t * bn + bn, by, :], K_s)
                T.copy(Vc[bx, start + t * bn:start + t * bn + bn, by, :], V_s)
                T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True)
                for r, c in T.Parallel(ROWS, bn):
                    S[r, c] = T.if_then_else(start + t * bn + c < kv_len, S[r, c] * scale2, -T.infinity("float32"))
                T.copy(m, m_prev)
                T.reduce_max(S, m, dim=1, clear=False)
                for r in T.Parallel(ROWS):
                    alpha[r] = T.exp2(m_prev[r] - m[r])
                for r, c in T.Parallel(ROWS, bn):
                    S[r, c] = T.exp2(S[r, c] - m[r])
                T.reduce_sum(S, rowsum, dim=1)
                for r in T.Parallel(ROWS):
                    l[r] = l[r] * alpha[r] + rowsum[r]
                for r, d in T.Parallel(ROWS, dim):
                    acc[r, d] = acc[r, d] * alpha[r]
                T.copy(S, P)
                T.gemm(P, V_s, acc)
            for r, d in T.Parallel(ROWS, dim):
                if r < group:
                    O_part[bx, by * group + r, bz, d] = T.if_then_else(l[r] > 0, acc[r, d] / l[r], 0.0)
            for r in T.Parallel(ROWS):
                if r < group:
                    Lse_part[bx, by * group + r, bz] = T.if_then_else(l[r] > 0, m[r] + T.log2(l[r]),
                                                                      -T.infinity("float32"))

    return split


def decode_combine(batch, heads_q, dim, num_splits, dtype="float16", threads=128):
    # the split loops are unrolled: every thread issues all of its loads of a pass at once instead of one
    # dependent load per split
    @T.prim_func
    def combine(O_part: T.Tensor((batch, heads_q, num_splits, dim), "float32"),
                Lse_part: T.Tensor((batch, heads_q, num_splits), "float32"),
                O: T.Tensor((batch, heads_q, dim), dtype)):
        with T.Kernel(heads_q, batch, threads=threads) as (bx, by):
            lse = T.alloc_local((num_splits,), "float32")
            mx = T.alloc_local((1,), "float32")
            den = T.alloc_local((1,), "float32")
            acc = T.alloc_fragment((dim,), "float32")
            for s in T.unroll(num_splits):
                lse[s] = Lse_part[by, bx, s]
            mx[0] = -T.infinity("float32")
            for s in T.unroll(num_splits):
                mx[0] = T.max(mx[0], lse[s])
            den[0] = 0.0
            for s in T.unroll(num_splits):
                lse[s] = T.exp2(lse[s] - mx[0])
                den[0] = den[0] + lse[s]
            T.clear(acc)
            for s in T.unroll(num_splits):
                for d in T.Parallel(dim):
                    acc[d] = acc[d] + lse[s] * O_part[by, bx, s, d]
            for d in T.Parallel(dim):
                O[by, bx, d] = T.Cast(dtype, acc[d] / den[0])

    return combine


@functools.lru_cache(maxsize=1024)
def choose_num_splits(batch, heads_kv, kv_len, bn=64, sms=None, blocks_per_sm=1, max_splits=64, block_cost=2):
    """Splits of the cache per (batch, kv head), chosen by waves: with ``P = batch * heads_kv`` pairs, `s` splits
    run ``ceil(P s / (sms * blocks_per_sm))`` waves of blocks that each take ``ceil(tiles / s)`` key tiles plus
    a fixed `block_cost` (in tiles: Q load, first loads' latency, partial output), and the smallest such time
    wins (fewer splits on a tie: less to combine). The split kernel holds a whole multiprocessor
    (`blocks_per_sm` 1); H100: 132 multiprocessors."""
    sms = sms if sms is not None else num_sms("sm_90a")
    tiles = max(1, -(-kv_len // bn))
    pairs = batch * heads_kv
    slots = sms * blocks_per_sm
    best = None
    for s in range(1, min(tiles, max_splits) + 1):
        cost = -(-pairs * s // slots) * (-(-tiles // s) + block_cost)
        if best is None or cost < best[0]:
            best = (cost, s)
    return split_chunk(kv_len, best[1], bn)[1]


_KERNELS = {}


def decode_kernels(batch, heads_q, heads_kv, kv_len, dim, num_splits, sm_scale, dtype, target="auto"):
    """The compiled (split, combine) pair for one problem, cached in a dict."""
    key = (batch, heads_q, heads_kv, kv_len, dim, num_splits, float(sm_scale), dtype, str(target))
    if key not in _KERNELS:
        _KERNELS[key] = (
            compile_kernel(decode_split(batch, heads_q, heads_kv, kv_len, dim, num_splits, sm_scale, dtype),
                          out_idx=[3, 4], target=target),
            compile_kernel(decode_combine(batch, heads_q, dim, num_splits, dtype), out_idx=[2], target=target),
        )
    return _KERNELS[key]


def attention_decode(q, k_cache, v_cache, sm_scale=None, num_splits=None):
    """``softmax(q k^T * sm_scale) v`` for one query token per sequence: q ``[batch, heads_q, dim]``, caches
    ``[batch, kv_len, heads_kv, dim]``; returns ``[batch, heads_q, dim]`` in q's dtype."""
    batch, heads_q, dim = q.shape
    kb, kv_len, heads_kv, kd = k_cache.shape
    dtype = TORCH_DTYPES.get(str(q.dtype))
    if dtype is None:
        raise TypeError(f"attention_decode: q has dtype {q.dtype}; expected float16 or bfloat16")
    if (kb, kd) != (batch, dim) or tuple(v_cache.shape) != tuple(k_cache.shape) or \
            k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"attention_decode: caches {k_cache.dtype}{list(k_cache.shape)} / "
                         f"{v_cache.dtype}{list(v_cache.shape)} do not match q {q.dtype}{list(q.shape)}")
    sm_scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(dim)
    if num_splits is None:
        num_splits = choose_num_splits(batch, heads_kv, kv_len)
    else:
        num_splits = split_chunk(kv_len, num_splits, 64)[1]
    split, combine = decode_kernels(batch, heads_q, heads_kv, kv_len, dim, num_splits, sm_scale, dtype)
    o_part, lse_part = split(q.contiguous(), k_cache.contiguous(), v_cache.contiguous())
    return combine(o_part, lse_part)
