"""FlashAttention-2-style backward (tilex/kernels/attention/backward.py): nvcc compiles of the three programs for
sm_90a (causal and not, head dims 64/128, ragged sequence lengths, fp16/bf16) with properties of the generated CUDA;
on a GPU, dq/dk/dv against autograd through torch's scaled_dot_product_attention on fp32 copies."""
import math
import re
import shutil

import pytest

import tilex
from tilex.kernels.attention.backward import attention_backward, bwd_main, bwd_postprocess, bwd_preprocess

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
SM90 = "sm_90a"


@needs_nvcc
@pytest.mark.parametrize("batch,heads,seq,dim,causal,dtype", [
    (2, 4, 1000, 64, True, "float16"),
    (1, 2, 512, 128, False, "bfloat16"),
    (1, 2, 1001, 128, True, "float16"),
])
def test_backward_main_compiles(batch, heads, seq, dim, causal, dtype):
    k = tilex.compile(bwd_main(batch, heads, seq, dim, causal, dtype=dtype), out_idx=[7, 8], target=SM90)
    src = k.get_kernel_source()
    # dQ is accumulated across key blocks into the fp32 dQ_accum by TMA reductions of the staged tile (no atomics)
    assert "tilex::tma_reduce_add_4d" in src and "tilex::atomic_add" not in src
    # five tensor-core gemms per query block, two of them with a 16-bit register A operand (P^T, dS^T)
    assert len(re.findall(r"wgmma_m64n\d+k16_rs_b?f16", src)) == 2
    assert len(re.findall(r"wgmma_m64n\d+k16_b?f16<", src)) == 3
    if causal:  # the query-block loop starts at the diagonal block
        assert "for (int i = lo" in src or "lo_ptr" in src
    assert k.resources is None or not k.resources.spilled


@needs_nvcc
@pytest.mark.parametrize("seq,dim,dtype", [(1000, 64, "float16"), (333, 128, "bfloat16")])
def test_backward_pre_and_post_compile(seq, dim, dtype):
    pre = tilex.compile(bwd_preprocess(2, 3, seq, dim, dtype), out_idx=[2, 3], target=SM90)
    post = tilex.compile(bwd_postprocess(2, 3, seq, dim, dtype=dtype), out_idx=[1], target=SM90)
    assert "Delta_ptr" in pre.get_kernel_source() and "dQ_accum_ptr" in post.get_kernel_source()


def _reference(q, k, v, do, causal, scale):
    import torch
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
    o.backward(do.float())
    s = qf.detach() @ kf.detach().transpose(-1, -2) * scale
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return o.detach(), lse, qf.grad, kf.grad, vf.grad


@pytest.mark.gpu
@pytest.mark.parametrize("batch,heads,seq,dim,causal,dtype", [
    (1, 4, 1024, 64, False, "float16"),
    (1, 4, 1000, 64, True, "float16"),
    (8, 2, 1000, 128, False, "bfloat16"),
    (8, 2, 512, 128, True, "float16"),
    (1, 2, 77, 64, True, "bfloat16"),
])
def test_backward_matches_torch(batch, heads, seq, dim, causal, dtype):
    import torch
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    q, k, v, do = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=dt) for _ in range(4))
    scale = 1.0 / math.sqrt(dim)
    o, lse, dq_ref, dk_ref, dv_ref = _reference(q, k, v, do, causal, scale)
    dq, dk, dv = attention_backward(q, k, v, o.to(dt), do, lse, causal)
    for name, got, ref in (("dq", dq, dq_ref), ("dk", dk, dk_ref), ("dv", dv, dv_ref)):
        tol = 2e-2 * ref.abs().max().item()
        torch.testing.assert_close(got.float(), ref, atol=tol, rtol=2e-2, msg=lambda m: f"{name}: {m}")
