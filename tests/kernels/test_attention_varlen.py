"""Attention over packed variable-length sequences (tilex/kernels/attention/varlen.py): nvcc compiles for sm_90a
(GQA, causal or not), properties of the generated CUDA (row-by-row guarded stores); on a GPU, the output against
torch's scaled_dot_product_attention run on each sequence alone, with an empty and a length-1 sequence, and rows
outside every sequence left untouched."""
import math
import re
import shutil

import pytest

import tilex
from tilex.kernels.attention.varlen import attention_varlen, mha_varlen

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
SM90 = "sm_90a"
LENGTHS = [0, 1, 77, 300, 129]


@needs_nvcc
@pytest.mark.parametrize("heads,heads_kv,dim,causal,dtype", [
    (8, 2, 128, False, "float16"),
    (4, 4, 64, True, "bfloat16"),
])
def test_varlen_compiles(heads, heads_kv, dim, causal, dtype):
    total = sum(LENGTHS)
    prog = mha_varlen(len(LENGTHS), heads, heads_kv, total, total, max(LENGTHS), dim, causal, dtype=dtype)
    k = tilex.compile(prog, out_idx=[5], target=SM90)
    src = k.get_kernel_source()
    assert "cu_seqlens_q_ptr" in src and "cu_seqlens_k_ptr" in src and "wgmma" in src
    # every store to Output (scalar or vector) sits under a per-row condition against the sequence's length
    stores = [m.start() for m in re.finditer(r"Output_ptr(\[| \+ )", src)]
    assert stores
    for pos in stores:
        assert "q_len" in src[max(0, pos - 400):pos]
    assert k.resources is None or not k.resources.spilled


def test_varlen_rejects_bad_problems():
    with pytest.raises(ValueError, match="head dim 96"):
        mha_varlen(2, 8, 8, 100, 100, 64, 96)
    with pytest.raises(ValueError, match="not a multiple of 3"):
        mha_varlen(2, 8, 3, 100, 100, 64, 128)


def _pack(lengths_q, lengths_k, heads, heads_kv, dim, dt):
    import torch
    cu_q = torch.tensor([0] + list(lengths_q)).cumsum(0).to(torch.int32).cuda()
    cu_k = torch.tensor([0] + list(lengths_k)).cumsum(0).to(torch.int32).cuda()
    q = torch.randn(max(1, sum(lengths_q)), heads, dim, device="cuda", dtype=dt)
    k = torch.randn(max(1, sum(lengths_k)), heads_kv, dim, device="cuda", dtype=dt)
    v = torch.randn(max(1, sum(lengths_k)), heads_kv, dim, device="cuda", dtype=dt)
    return q, k, v, cu_q, cu_k


def _reference(q, k, v, cu_q, cu_k, causal):
    import torch
    out = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    group = q.shape[1] // k.shape[1]
    cu_q, cu_k = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cu_q) - 1):
        if cu_q[b + 1] == cu_q[b] or cu_k[b + 1] == cu_k[b]:
            continue
        qb = q[cu_q[b]:cu_q[b + 1]].float().transpose(0, 1)
        kb = k[cu_k[b]:cu_k[b + 1]].float().transpose(0, 1).repeat_interleave(group, dim=0)
        vb = v[cu_k[b]:cu_k[b + 1]].float().transpose(0, 1).repeat_interleave(group, dim=0)
        ob = torch.nn.functional.scaled_dot_product_attention(qb[None], kb[None], vb[None], is_causal=causal,
                                                              scale=1.0 / math.sqrt(q.shape[-1]))
        out[cu_q[b]:cu_q[b + 1]] = ob[0].transpose(0, 1)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("heads,heads_kv,dim,causal,dtype", [
    (4, 4, 128, False, "float16"),
    (4, 4, 128, True, "float16"),
    (8, 2, 64, False, "bfloat16"),
    (8, 2, 128, True, "bfloat16"),
    (4, 1, 256, True, "float16"),
])
def test_varlen_matches_torch(heads, heads_kv, dim, causal, dtype):
    import torch
    torch.manual_seed(0)
    q, k, v, cu_q, cu_k = _pack(LENGTHS, LENGTHS, heads, heads_kv, dim, getattr(torch, dtype))
    out = attention_varlen(q, k, v, cu_q, cu_k, max(LENGTHS), causal=causal)
    tol = 1e-2 if dtype == "float16" else 2e-2
    torch.testing.assert_close(out.float(), _reference(q, k, v, cu_q, cu_k, causal), atol=tol, rtol=tol)


@pytest.mark.gpu
def test_varlen_unequal_query_and_key_lengths():
    import torch
    torch.manual_seed(0)
    lq, lk = [5, 0, 200, 1, 130, 3], [300, 7, 1, 129, 64, 0]  # the last one has queries and no keys: zeros
    q, k, v, cu_q, cu_k = _pack(lq, lk, 8, 2, 128, torch.float16)
    out = attention_varlen(q, k, v, cu_q, cu_k, max(lq))
    torch.testing.assert_close(out.float(), _reference(q, k, v, cu_q, cu_k, False), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_varlen_writes_only_rows_inside_sequences():
    """Rows after the last sequence (cu_seqlens_q[-1] < total_q) keep what the caller put there."""
    import torch
    torch.manual_seed(0)
    lengths, pad = [77, 0, 130], 40
    q, k, v, cu_q, cu_k = _pack(lengths, lengths, 4, 4, 128, torch.float16)
    total = q.shape[0] + pad
    q = torch.cat([q, torch.randn(pad, 4, 128, device="cuda", dtype=torch.float16)])
    kern = tilex.compile(mha_varlen(len(lengths), 4, 4, total, k.shape[0], max(lengths), 128, causal=True))
    out = torch.full_like(q, 7.0)
    kern(q, k, v, cu_q, cu_k, out)
    n = sum(lengths)
    assert bool((out[n:] == 7.0).all())
    torch.testing.assert_close(out[:n].float(), _reference(q[:n], k, v, cu_q, cu_k, True), atol=1e-2, rtol=1e-2)
