"""FlashAttention-2-style backward of multi-head attention (BHSD, fp16): the three tile programs of
tilex/kernels/attention/backward.py (delta = rowsum(O * dO); per key block dK, dV and atomically accumulated dQ;
dQ cast). On a GPU this script checks dq, dk, dv against autograd through torch's scaled_dot_product_attention and
prints TFLOP/s (2.5x the forward's 4*b*h*s*s*d flops, halved when causal) and the speed ratio to torch's backward;
without a GPU it prints the generated CUDA of the main kernel."""
import math

import tilex
from tilex.kernels.attention.backward import attention_backward, bwd_main


def main(batch=8, heads=16, seq=2048, dim=128, causal=True):
    import torch

    if not torch.cuda.is_available():
        print(tilex.compile(bwd_main(batch, heads, seq, dim, causal), out_idx=[7, 8]).get_kernel_source())
        return
    from tilex.autotuner import do_bench

    shape = (batch, heads, seq, dim)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(4))
    scale = 1.0 / math.sqrt(dim)
    qr, kr, vr = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
    s = q.float() @ k.float().transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(seq, seq, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    del s
    dq, dk, dv = attention_backward(q, k, v, o.detach(), do, lse, causal)
    o.backward(do, retain_graph=True)
    for name, got, ref in (("dq", dq, qr.grad), ("dk", dk, kr.grad), ("dv", dv, vr.grad)):
        tol = 2e-2 * ref.abs().max().item()
        torch.testing.assert_close(got.float(), ref.float(), atol=tol, rtol=2e-2, msg=lambda m: f"{name}: {m}")

    t = do_bench(lambda: attention_backward(q, k, v, o.detach(), do, lse, causal))
    t_ref = do_bench(lambda: o.backward(do, retain_graph=True))
    flops = 4 * 2.5 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
    print(f"mha bwd b={batch} h={heads} s={seq} d={dim} causal={causal} fp16: correct; "
          f"{flops / t * 1e-9:.0f} TFLOP/s; torch/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
