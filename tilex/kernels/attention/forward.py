"""The FlashAttention forward as a tile program (online softmax), and `attention_forward` to run it.

``O = softmax(Q Kᵀ * sm_scale (+ causal mask)) V`` per (batch, head), with the log-sum-exp of each row saved for
the backward (natural-log units of the scaled scores: ``lse = log(sum_j exp(q·k_j * sm_scale))``).

Layouts: ``"bhsd"`` (``[batch, heads, seq, dim]``) or ``"bshd"`` (``[batch, seq, heads, dim]``); K and V may have
fewer heads than Q (GQA / MQA: ``heads_q % heads_kv == 0``, query head h reads kv head ``h // (heads_q //
heads_kv)``). fp16 / bf16 with fp32 accumulation; head dim 64, 128 or 256. Sequence lengths need not be multiples
of the block sizes: keys past the end are masked, rows past the end are not stored. Causal masking is top-left
aligned (query i sees keys j <= i, as torch's ``is_causal``) and needs equal query and key lengths; only the
blocks that cross the diagonal are masked element by element, the others skip the mask.

The program is written as a TileLang user would write it (no tilex-only hints). On sm_90a tilex turns its
pipelined loop into a TMA producer warpgroup and two consumer warpgroups (transform/hopper/ws_groups.py).
"""
import math

import tilex.language as T
from tilex.jit import compile as compile_kernel
from tilex.kernels.attention.common import LN2, LOG2E, TORCH_DTYPES, online_softmax
from tilex.jit.bench import do_bench

LAYOUTS = ("bhsd", "bshd")


def default_config(dim, causal=False):
    """(block_M, block_N, num_stages, threads) measured best on the H100 for a head dim (benchmarks/README.md):
    wider key blocks where they fit (176 keys leave room for two stages of K and V at head dim 128), except for
    non-causal head dim 128, where 128 keys measured best."""
    table = {64: (128, 176, 2, 256), 128: (128, 176, 2, 256) if causal else (128, 128, 2, 256),
             256: (128, 80, 2, 256) if causal else (128, 64, 2, 256)}
    return table.get(dim, (64, 64, 2, 128))


def check_shapes(batch, heads, heads_kv, seq_q, seq_kv, dim, causal, layout, dtype):
    if layout not in LAYOUTS:
        raise ValueError(f"attention: layout must be one of {LAYOUTS}, got {layout!r}")
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"attention: dtype must be float16 or bfloat16, got {dtype}")
    if dim not in (64, 128, 256):
        raise ValueError(f"attention: head dim {dim} is not supported (64, 128 or 256)")
    if heads_kv <= 0 or heads % heads_kv:
        raise ValueError(f"attention: {heads} query heads are not a multiple of {heads_kv} key/value heads")
    if causal and seq_q != seq_kv:
        raise ValueError(f"attention: causal attention needs equal query and key lengths, got {seq_q} and {seq_kv}")
    if min(batch, heads, seq_q, seq_kv) <= 0:
        raise ValueError(f"attention: empty problem (batch={batch}, heads={heads}, seq_q={seq_q}, seq_kv={seq_kv})")


def mha_forward(batch, heads, seq_q, dim, causal=False, *, seq_kv=None, heads_kv=None, layout="bhsd",
                sm_scale=None, dtype="float16", block_M=None, block_N=None, num_stages=None, threads=None):
    """The forward tile program: ``main(Q, K, V, O, LSE)``, LSE fp32 ``[batch, heads, seq_q]``."""
    seq_kv = seq_q if seq_kv is None else seq_kv
    heads_kv = heads if heads_kv is None else heads_kv
    check_shapes(batch, heads, heads_kv, seq_q, seq_kv, dim, causal, layout, dtype)
    bm, bn, stages, nthreads = default_config(dim, causal)
    bm, bn = block_M or bm, block_N or bn
    stages, nthreads = num_stages or stages, threads or nthreads
    group = heads // heads_kv
    sm_scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(dim)
    scale = sm_scale * LOG2E  # scores in base 2: exp(x * sm_scale) = 2^(x * scale)
    accum = "float32"
    if layout == "bhsd":
        q_shape, kv_shape = (batch, heads, seq_q, dim), (batch, heads_kv, seq_kv, dim)
    else:
        q_shape, kv_shape = (batch, seq_q, heads, dim), (batch, seq_kv, heads_kv, dim)
    ragged = seq_kv % bn != 0

    def tile(X, b, h, s0, rows):
        return X[b, h, s0:s0 + rows, :] if layout == "bhsd" else X[b, s0:s0 + rows, h, :]

    @T.prim_func
    def main(Q: T.Tensor(q_shape, dtype), K: T.Tensor(kv_shape, dtype), V: T.Tensor(kv_shape, dtype),
             Output: T.Tensor(q_shape, dtype), LSE: T.Tensor((batch, heads, seq_q), accum)):
        with T.Kernel(T.ceildiv(seq_q, bm), heads, batch, threads=nthreads) as (bx_launch, by, bz):
            # causal: the query blocks with the most key blocks start first (a shorter tail of the last wave)
            bx = T.ceildiv(seq_q, bm) - 1 - bx_launch if causal else bx_launch
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
            lse = T.alloc_fragment([bm], accum)

            T.copy(tile(Q, bz, by, bx * bm, bm), Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum))
            loop_range = (T.min(T.ceildiv(seq_kv, bn), T.ceildiv((bx + 1) * bm, bn)) if causal
                          else T.ceildiv(seq_kv, bn))
            for k in T.Pipelined(loop_range, num_stages=stages):
                T.copy(tile(K, bz, by // group, k * bn, bn), K_shared)
                if causal:
                    if (k + 1) * bn > bx * bm:  # only the key blocks that cross the diagonal are masked
                        for i, j in T.Parallel(bm, bn):
                            acc_s[i, j] = T.if_then_else(bx * bm + i >= k * bn + j, 0, -T.infinity(accum))
                    else:
                        T.clear(acc_s)
                elif ragged:
                    for i, j in T.Parallel(bm, bn):
                        acc_s[i, j] = T.if_then_else(k * bn + j < seq_kv, 0, -T.infinity(accum))
                else:
                    T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum,
                               logsum, scale, bm, bn, dim)
                T.copy(tile(V, bz, by // group, k * bn, bn), V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(bm, dim):
                acc_o[i, j] /= logsum[i]
            for i in T.Parallel(bm):
                lse[i] = (T.log2(logsum[i]) + scores_max[i] * scale) * LN2
            T.copy(acc_o, Q_shared)  # Q's tile is free once the loop is done: it stages O (a head dim of 256 fits)
            T.copy(Q_shared, tile(Output, bz, by, bx * bm, bm))
            T.copy(lse, LSE[bz, by, bx * bm:(bx + 1) * bm])

    return main


_kernels = {}


def attention_forward(q, k, v, causal=False, sm_scale=None, layout="bhsd", config=None):
    """(O, LSE) for torch tensors q ``[b, h, s, d]`` (or ``[b, s, h, d]`` with layout="bshd") and k, v with the same
    batch, length and head dim and ``h_kv`` heads dividing h. `config`: (block_M, block_N, num_stages, threads), None
    for the table of :func:`default_config`, or ``"tune"`` to time :data:`TUNE_CANDIDATES` on the first call of each
    problem and keep the fastest."""
    dtype = TORCH_DTYPES.get(str(q.dtype))
    if dtype is None:
        raise ValueError(f"attention: q must be float16 or bfloat16, got {q.dtype}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"attention: q, k, v must be 4-d, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"attention: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if layout == "bhsd":
        (b, h, s, d), (bk, hk, sk, dk) = q.shape, k.shape
    else:
        (b, s, h, d), (bk, sk, hk, dk) = q.shape, k.shape
    if bk != b or dk != d:
        raise ValueError(f"attention: k {tuple(k.shape)} does not match q {tuple(q.shape)} in batch or head dim")
    problem = (b, h, hk, s, sk, d, bool(causal), layout, sm_scale, dtype)
    if config == "tune":
        cfg = _tuned.get(problem) or _tune(problem, q, k, v)
    else:
        cfg = tuple(config) if config is not None else default_config(d, causal)
    return _kernel(problem, cfg)(q, k, v)


_tuned = {}

#: Block configurations `config="tune"` times, per head dim (the first is the default of the table above).
TUNE_CANDIDATES = {64: [(128, 128, 2, 256), (128, 176, 2, 256), (192, 128, 2, 384)],
                   128: [(128, 128, 2, 256), (128, 176, 2, 256), (128, 160, 2, 256)],
                   256: [(128, 64, 2, 256), (128, 80, 2, 256)]}


def _kernel(problem, cfg):
    key = problem + (cfg,)
    kern = _kernels.get(key)
    if kern is None:
        b, h, hk, s, sk, d, causal, layout, sm_scale, dtype = problem
        bm, bn, st, th = cfg
        prog = mha_forward(b, h, s, d, causal, seq_kv=sk, heads_kv=hk, layout=layout, sm_scale=sm_scale,
                           dtype=dtype, block_M=bm, block_N=bn, num_stages=st, threads=th)
        kern = _kernels[key] = compile_kernel(prog, out_idx=[3, 4])
    return kern


def _tune(problem, q, k, v):
    """The fastest of :data:`TUNE_CANDIDATES` for this problem on these tensors (each compiled and timed once;
    the choice is kept for the process)."""
    best = None
    for cfg in TUNE_CANDIDATES.get(problem[5], [default_config(problem[5], problem[6])]):
        kern = _kernel(problem, cfg)
        t = do_bench(lambda: kern(q, k, v), warmup=5, rep=20)
        if best is None or t < best[0]:
            best = (t, cfg)
    _tuned[problem] = best[1]
    return best[1]
