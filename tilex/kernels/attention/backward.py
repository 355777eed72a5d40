"""FlashAttention-2-style backward pass of multi-head attention as three tile programs (BHSD layout
``[batch, heads, seq, dim]``, fp16/bf16, causal or not, any sequence length), and `attention_backward`, which
compiles (once per shape / dtype / flags) and runs them.

Notation: ``S = Q K^T * sm_scale``; the forward saved ``lse[b, h, i] = log(sum_j exp(S[i, j]))`` in fp32 in
**natural-log units** (``m + log(l)`` with the max ``m`` of the scaled scores); ``P = exp(S - lse)``.

* `bwd_preprocess`: ``delta[b, h, i] = sum_d O[b, h, i, d] * dO[b, h, i, d]`` (fp32), and zeroes the fp32
  ``dQ_accum`` tile of the same rows (so no separate memset is needed).
* `bwd_main`: one block per (key block of `bn` rows, head, batch). It loads its K and V tiles once, then walks the
  query blocks (T.Pipelined) with Q, dO, lse and delta of `bm` rows. Everything is computed transposed, with the key
  rows as the gemms' M side, so the key-side accumulators and both 16-bit probability tiles are register A operands
  (wgmma "rs" form) and only dS^T goes through shared memory:
    ``S^T = K Q^T`` (K_s, Q_s in shared), ``P^T = exp2(S^T * scale*log2e - lse*log2e)`` (masked),
    ``dP^T = V dO^T``, ``dV += P^T dO``, ``dS^T = P^T (dP^T - delta)``, ``dK += dS^T Q``,
    ``dQ_partial = (dS^T)^T K`` (A = dS^T from shared memory, transposed), added into ``dQ_accum`` with
    ``T.atomic_add(..., use_tma=True)`` (blocks of different key blocks add into the same rows).
  dK is scaled by sm_scale at the end; dQ_accum holds dQ / sm_scale.
* `bwd_postprocess`: ``dQ = dQ_accum * sm_scale`` cast to the input dtype.

Causal (the mask of torch's ``is_causal=True``: query i sees keys j <= i): key block `j` only visits query blocks
`i` with ``i*bm + bm > j*bn`` (the loop starts there); inside the diagonal blocks the scores are masked. Rows and
keys past `seq` are masked too (T.copy zero-fills out-of-range rows of a load; their lse/delta are 0)."""
import math

import tilex.language as T
from tilex.jit import compile as compile_kernel
from tilex.kernels.attention.common import LOG2E, TORCH_DTYPES



def bwd_preprocess(batch, heads, seq, dim, dtype="float16", blk=64, threads=128):
    """delta = rowsum(O * dO) (fp32 [batch, heads, seq]); dQ_accum (fp32 [batch, heads, seq, dim]) set to 0."""
    shape = (batch, heads, seq, dim)

    @T.prim_func
    def preprocess(O: T.Tensor(shape, dtype), dO: T.Tensor(shape, dtype),
                   Delta: T.Tensor((batch, heads, seq), "float32"), dQ_accum: T.Tensor(shape, "float32")):
        with T.Kernel(T.ceildiv(seq, blk), heads, batch, threads=threads) as (bx, by, bz):
            o = T.alloc_fragment((blk, dim), dtype)
            do = T.alloc_fragment((blk, dim), dtype)
            acc = T.alloc_fragment((blk, dim), "float32")
            delta = T.alloc_fragment((blk,), "float32")
            T.copy(O[bz, by, bx * blk, 0], o)
            T.copy(dO[bz, by, bx * blk, 0], do)
            for i, d in T.Parallel(blk, dim):
                acc[i, d] = T.Cast("float32", o[i, d]) * T.Cast("float32", do[i, d])
            T.reduce_sum(acc, delta, dim=1)
            T.copy(delta, Delta[bz, by, bx * blk])
            T.clear(acc)
            T.copy(acc, dQ_accum[bz, by, bx * blk, 0])

    return preprocess


def bwd_main(batch, heads, seq, dim, causal, sm_scale=None, dtype="float16", bm=64, bn=64, num_stages=2,
             threads=128):
    """dK, dV (outputs, [batch, heads, seq, dim], dtype) and dQ_accum += dQ / sm_scale (fp32, atomics)."""
    sm_scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(dim)
    scale2 = sm_scale * LOG2E  # scores in base-2 units
    shape = (batch, heads, seq, dim)
    nq = (seq + bm - 1) // bm

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             dO: T.Tensor(shape, dtype), Lse: T.Tensor((batch, heads, seq), "float32"),
             Delta: T.Tensor((batch, heads, seq), "float32"), dQ_accum: T.Tensor(shape, "float32"),
             dK: T.Tensor(shape, dtype), dV: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq, bn), heads, batch, threads=threads) as (bx, by, bz):
            K_s = T.alloc_shared((bn, dim), dtype)
            V_s = T.alloc_shared((bn, dim), dtype)
            Q_s = T.alloc_shared((bm, dim), dtype)
            dO_s = T.alloc_shared((bm, dim), dtype)
            lse_s = T.alloc_shared((bm,), "float32")
            delta_s = T.alloc_shared((bm,), "float32")
            dsT_s = T.alloc_shared((bn, bm), dtype)
            sT = T.alloc_fragment((bn, bm), "float32")
            dpT = T.alloc_fragment((bn, bm), "float32")
            pT = T.alloc_fragment((bn, bm), dtype)
            dsT = T.alloc_fragment((bn, bm), dtype)
            dq = T.alloc_fragment((bm, dim), "float32")
            dk = T.alloc_fragment((bn, dim), "float32")
            dv = T.alloc_fragment((bn, dim), "float32")

            T.copy(K[bz, by, bx * bn, 0], K_s)
            T.copy(V[bz, by, bx * bn, 0], V_s)
            T.clear(dk)
            T.clear(dv)
            lo = (bx * bn) // bm if causal else 0
            for i in T.Pipelined(lo, nq, num_stages=num_stages):
                T.copy(Q[bz, by, i * bm, 0], Q_s)
                T.copy(dO[bz, by, i * bm, 0], dO_s)
                T.copy(Lse[bz, by, i * bm], lse_s)
                T.copy(Delta[bz, by, i * bm], delta_s)
                T.clear(sT)
                T.clear(dpT)
                T.gemm(K_s, Q_s, sT, transpose_B=True)
                T.gemm(V_s, dO_s, dpT, transpose_B=True)
                for r, c in T.Parallel(bn, bm):
                    # keys past seq (zero rows) would get P = exp(-lse); queries past seq have dO = 0 but are
                    # masked as well, so nothing depends on what their lse / delta slots hold
                    if causal:
                        sT[r, c] = T.if_then_else(
                            (bx * bn + r <= i * bm + c) and (i * bm + c < seq),
                            T.exp2(sT[r, c] * scale2 - lse_s[c] * LOG2E), 0.0)
                    else:
                        sT[r, c] = T.if_then_else((bx * bn + r < seq) and (i * bm + c < seq),
                                                  T.exp2(sT[r, c] * scale2 - lse_s[c] * LOG2E), 0.0)
                for r, c in T.Parallel(bn, bm):
                    pT[r, c] = T.Cast(dtype, sT[r, c])
                T.gemm(pT, dO_s, dv)
                for r, c in T.Parallel(bn, bm):
                    dsT[r, c] = T.Cast(dtype, sT[r, c] * (dpT[r, c] - delta_s[c]))
                T.copy(dsT, dsT_s)
                T.clear(dq)
                # dQ's gemm first: on sm90 dK's runs on while dQ is stored (each MMA is waited for only where
                # its result is needed)
                T.gemm(dsT_s, K_s, dq, transpose_A=True)
                T.gemm(dsT, Q_s, dk)
                # on sm90 dq is staged in shared memory and the TMA unit adds it into dQ_accum (bulk reductions
                # instead of bm * dim atomics)
                T.atomic_add(dQ_accum[bz, by, i * bm, 0], dq, use_tma=True)
            for r, d in T.Parallel(bn, dim):
                dk[r, d] = dk[r, d] * sm_scale
            T.copy(dk, dK[bz, by, bx * bn, 0])
            T.copy(dv, dV[bz, by, bx * bn, 0])

    return main


def bwd_postprocess(batch, heads, seq, dim, sm_scale=None, dtype="float16", blk=64, threads=128):
    """dQ = dQ_accum * sm_scale, cast to `dtype`."""
    sm_scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(dim)
    shape = (batch, heads, seq, dim)

    @T.prim_func
    def postprocess(dQ_accum: T.Tensor(shape, "float32"), dQ: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq, blk), heads, batch, threads=threads) as (bx, by, bz):
            acc = T.alloc_fragment((blk, dim), "float32")
            out = T.alloc_fragment((blk, dim), dtype)
            T.copy(dQ_accum[bz, by, bx * blk, 0], acc)
            for i, d in T.Parallel(blk, dim):
                out[i, d] = T.Cast(dtype, acc[i, d] * sm_scale)
            T.copy(out, dQ[bz, by, bx * blk, 0])

    return postprocess


_KERNELS = {}


def default_blocks(dim):
    """(bm, bn, num_stages, threads) of the main kernel for a head dim: 128 key rows in two warpgroups, 64 query
    rows per step (H100, D128: 0.78x SDPA's backward; 64 x 64 in one warpgroup: 0.53x)."""
    return (64, 128, 2, 256) if dim <= 128 else (64, 64, 2, 128)


def backward_kernels(batch, heads, seq, dim, causal, sm_scale, dtype, target="auto"):
    """The three compiled kernels (preprocess, main, postprocess) for one problem, cached in a dict."""
    key = (batch, heads, seq, dim, bool(causal), float(sm_scale), dtype, str(target))
    if key not in _KERNELS:
        bm, bn, stages, threads = default_blocks(dim)
        _KERNELS[key] = (
            compile_kernel(bwd_preprocess(batch, heads, seq, dim, dtype), out_idx=[2, 3], target=target),
            compile_kernel(bwd_main(batch, heads, seq, dim, causal, sm_scale, dtype, bm=bm, bn=bn,
                                   num_stages=stages, threads=threads), out_idx=[7, 8], target=target),
            compile_kernel(bwd_postprocess(batch, heads, seq, dim, sm_scale, dtype), out_idx=[1], target=target),
        )
    return _KERNELS[key]


def attention_backward(q, k, v, o, do, lse, causal, sm_scale=None):
    """dq, dk, dv of ``o = softmax(q k^T * sm_scale (+ causal mask)) v`` for BHSD tensors ``[batch, heads, seq,
    dim]`` (fp16/bf16, contiguous), given the forward's output `o`, the gradient `do` and its fp32 log-sum-exp
    `lse` ``[batch, heads, seq]`` in natural-log units. `sm_scale` defaults to ``dim ** -0.5``."""
    batch, heads, seq, dim = q.shape
    dtype = TORCH_DTYPES.get(str(q.dtype))
    if dtype is None:
        raise TypeError(f"attention_backward: q has dtype {q.dtype}; expected float16 or bfloat16")
    for name, t in (("k", k), ("v", v), ("o", o), ("do", do)):
        if tuple(t.shape) != tuple(q.shape) or t.dtype != q.dtype:
            raise ValueError(f"attention_backward: {name} is {t.dtype}{list(t.shape)}, expected "
                             f"{q.dtype}{list(q.shape)}")
    if tuple(lse.shape) != (batch, heads, seq):
        raise ValueError(f"attention_backward: lse has shape {list(lse.shape)}, expected {[batch, heads, seq]}")
    sm_scale = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(dim)
    pre, main, post = backward_kernels(batch, heads, seq, dim, causal, sm_scale, dtype)
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    delta, dq_accum = pre(o, do)
    dk, dv = main(q, k, v, do, lse.float().contiguous(), delta, dq_accum)
    dq = post(dq_accum)
    return dq, dk, dv
