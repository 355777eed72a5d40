"""tilex.ops.attention: the differentiable operator (forward + backward through torch.autograd)."""
import pytest
import torch
import torch.nn.functional as F

import tilex.ops

gpu = pytest.mark.gpu


def test_backward_of_gqa_is_refused_clearly():
    q = torch.zeros(1, 8, 128, 64, dtype=torch.float16, requires_grad=True)
    k = v = torch.zeros(1, 2, 128, 64, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match="backward supports BHSD multi-head"):
        tilex.ops.attention(q, k, v)


@gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq,dim,dtype", [(1000, 128, torch.float16), (256, 64, torch.bfloat16)])
def test_attention_op_forward_and_backward_match_sdpa(causal, seq, dim, dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, seq, dim, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    do = torch.randn(2, 4, seq, dim, device="cuda", dtype=dtype)
    out = tilex.ops.attention(q, k, v, causal=causal)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    grads = torch.autograd.grad(out, (q, k, v), do)
    refs = torch.autograd.grad(ref, (q, k, v), do)
    for g, r in zip(grads, refs):
        tol = 2e-2 * r.float().abs().max().item()
        torch.testing.assert_close(g.float(), r.float(), atol=tol, rtol=2e-2)


@gpu
def test_attention_op_without_grad_takes_gqa_and_bshd():
    q = torch.randn(1, 300, 8, 128, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(1, 300, 2, 128, device="cuda", dtype=torch.float16) for _ in range(2))
    out = tilex.ops.attention(q, k, v, layout="bshd")
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         enable_gqa=True).transpose(1, 2)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)


@gpu
def test_attention_op_tune_picks_a_candidate_and_matches_sdpa():
    from tilex.kernels.attention import forward

    q, k, v = (torch.randn(1, 4, 1024, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    out = tilex.ops.attention(q, k, v, causal=True, config="tune")
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-2, rtol=1e-2)
    chosen = [cfg for key, cfg in forward._tuned.items() if key[3] == 1024 and key[6]]
    assert chosen and chosen[0] in forward.TUNE_CANDIDATES[128]


def test_the_operators_are_registered_with_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 300, 8, 64, dtype=torch.float16)
        k = v = torch.empty(2, 300, 2, 64, dtype=torch.float16)
        o, lse = torch.ops.tilex.attention_fwd(q, k, v, True, None, "bshd", [])
        assert o.shape == q.shape and lse.shape == (2, 8, 300) and lse.dtype == torch.float32
        dq, dk, dv = torch.ops.tilex.attention_bwd(q, k, v, o, o, lse, True, None)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


@gpu
def test_compiled_training_step_matches_eager_sdpa():
    """torch.compile(fullgraph=True) over a function using the attention operator and its backward."""
    torch.manual_seed(0)
    w = torch.randn(64, 384, device="cuda", dtype=torch.float16, requires_grad=True)

    def step(x, use_tilex):
        q, k, v = ((x @ w).view(2, 256, 3, 2, 64).unbind(2))
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        if use_tilex:
            o = tilex.ops.attention(q, k, v, causal=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.float().square().mean()

    compiled = torch.compile(lambda x: step(x, True), fullgraph=True)
    x = torch.randn(2, 256, 64, device="cuda", dtype=torch.float16)
    loss = compiled(x)
    (g,) = torch.autograd.grad(loss, (w,))
    ref = step(x, False)
    (g_ref,) = torch.autograd.grad(ref, (w,))
    torch.testing.assert_close(loss, ref, atol=1e-3, rtol=1e-2)
    torch.testing.assert_close(g.float(), g_ref.float(), atol=2e-2 * g_ref.float().abs().max().item(), rtol=2e-2)
