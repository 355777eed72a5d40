"""Split-KV decoding with a KV cache (tilex/kernels/attention/decode.py): nvcc compiles for sm_90a (GQA ratios 1, 4,
8, MQA, head dims 64/128, ragged kv_len), the split-count choice, properties of the generated CUDA; on a GPU, the
output against torch's scaled_dot_product_attention (kv_len 1 and 8k+17, batch 1 and 8)."""
import math
import shutil

import pytest

import tilex
from tilex.kernels.attention.decode import (attention_decode, choose_num_splits, decode_combine, decode_split,
                                            split_chunk)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
SM90 = "sm_90a"


@pytest.mark.parametrize("kv_len,splits,bn", [(1, 8, 64), (1000, 4, 64), (1000, 6, 64), (8209, 43, 64),
                                              (64, 1, 64), (8192, 64, 64)])
def test_split_chunk_covers_kv_without_empty_splits(kv_len, splits, bn):
    chunk, used = split_chunk(kv_len, splits, bn)
    assert chunk % bn == 0 and used <= splits
    assert (used - 1) * chunk < kv_len <= used * chunk


def test_num_splits_fills_whole_waves():
    # few (batch, kv head) pairs: split the cache into about one wave of blocks (not a second, nearly empty one)
    assert 100 <= choose_num_splits(1, 8, 8209, sms=132) * 8 <= 132
    assert choose_num_splits(1, 8, 65536, sms=132) == 16
    # 64 pairs: 2 splits are one full wave of 128 blocks, where 5 would be 2.4 waves
    assert choose_num_splits(8, 8, 16384, sms=132) == 2
    assert choose_num_splits(64, 8, 8209, sms=132) == 1        # 512 blocks already fill 132 SMs
    assert choose_num_splits(1, 1, 1, sms=132) == 1            # one key: nothing to split


@needs_nvcc
@pytest.mark.parametrize("batch,heads_q,heads_kv,kv_len,dim,dtype", [
    (2, 8, 8, 1000, 64, "float16"),       # MHA (group 1)
    (1, 32, 8, 8209, 128, "bfloat16"),    # GQA 4
    (8, 64, 8, 300, 128, "float16"),      # GQA 8
    (1, 8, 1, 1, 64, "float16"),          # MQA, one key
])
def test_decode_compiles(batch, heads_q, heads_kv, kv_len, dim, dtype):
    splits = choose_num_splits(batch, heads_kv, kv_len)
    k1 = tilex.compile(decode_split(batch, heads_q, heads_kv, kv_len, dim, splits, dtype=dtype), out_idx=[3, 4],
                       target=SM90)
    k2 = tilex.compile(decode_combine(batch, heads_q, dim, splits, dtype=dtype), out_idx=[2], target=SM90)
    src1, src2 = k1.get_kernel_source(), k2.get_kernel_source()
    assert "wgmma" in src1 and "Lse_part_ptr" in src1
    # the combine reads the partial lse of every split: a loop of num_splits trips (or straight-line code for 1)
    assert "Lse_part_ptr" in src2 and "O_part_ptr" in src2
    assert splits == 1 or f"< {splits}; ++" in src2
    assert k1.resources is None or not k1.resources.spilled


@pytest.mark.gpu
@pytest.mark.parametrize("batch,heads_q,heads_kv,kv_len,dim,dtype", [
    (1, 8, 8, 1, 64, "float16"),
    (8, 32, 8, 8192 + 17, 128, "float16"),
    (1, 32, 4, 8192 + 17, 128, "bfloat16"),
    (8, 16, 16, 1000, 64, "bfloat16"),
    (1, 8, 1, 4096, 128, "float16"),
    (8, 64, 8, 777, 64, "float16"),
])
def test_decode_matches_torch(batch, heads_q, heads_kv, kv_len, dim, dtype):
    import torch
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    q = torch.randn(batch, heads_q, dim, device="cuda", dtype=dt)
    kc = torch.randn(batch, kv_len, heads_kv, dim, device="cuda", dtype=dt)
    vc = torch.randn(batch, kv_len, heads_kv, dim, device="cuda", dtype=dt)
    out = attention_decode(q, kc, vc)
    g = heads_q // heads_kv
    kf = kc.float().transpose(1, 2).repeat_interleave(g, dim=1)  # [batch, heads_q, kv_len, dim]
    vf = vc.float().transpose(1, 2).repeat_interleave(g, dim=1)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float().unsqueeze(2), kf, vf,
                                                           scale=1.0 / math.sqrt(dim)).squeeze(2)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    for splits in (1, 3):  # explicit split counts give the same result
        torch.testing.assert_close(attention_decode(q, kc, vc, num_splits=splits).float(), ref, atol=2e-2,
                                   rtol=2e-2)
