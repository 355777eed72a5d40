"""Attention over variable-length sequences packed end to end (tilex/kernels/attention/varlen.py): q
``[total_q, heads, dim]``, k/v ``[total_k, heads_kv, dim]`` and the int32 offsets cu_seqlens_q/k ``[batch + 1]``.
The batch includes an empty sequence and a length-1 sequence. On a GPU the output is checked against torch's
scaled_dot_product_attention run on each sequence alone (causal and not, GQA 4), and the time is printed next to
that of the per-sequence SDPA loop; without a GPU the generated CUDA is printed."""
import tilex
from tilex.kernels.attention.varlen import attention_varlen, mha_varlen


def reference(q, k, v, cu_q, cu_k, causal):
    """Per-sequence SDPA (kv heads repeated for GQA), packed back into [total_q, heads, dim]."""
    import torch

    out = torch.zeros_like(q)
    group = q.shape[1] // k.shape[1]
    for b in range(len(cu_q) - 1):
        qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if qe == qs:
            continue
        qb = q[qs:qe].transpose(0, 1).unsqueeze(0)                                # [1, heads, len, dim]
        kb = k[ks:ke].transpose(0, 1).repeat_interleave(group, dim=0).unsqueeze(0)
        vb = v[ks:ke].transpose(0, 1).repeat_interleave(group, dim=0).unsqueeze(0)
        ob = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=causal)
        out[qs:qe] = ob[0].transpose(0, 1)
    return out


def main(lengths=(0, 1, 77, 300, 129, 1024, 2000, 513), heads=32, heads_kv=8, dim=128):
    import torch

    total, max_len = sum(lengths), max(lengths)
    if not torch.cuda.is_available():
        prog = mha_varlen(len(lengths), heads, heads_kv, total, total, max_len, dim)
        print(tilex.compile(prog, out_idx=[5]).get_kernel_source())
        return
    from tilex.autotuner import do_bench

    cu = torch.tensor([0] + list(lengths), device="cuda").cumsum(0).to(torch.int32)
    q = torch.randn(total, heads, dim, device="cuda", dtype=torch.float16)
    k = torch.randn(total, heads_kv, dim, device="cuda", dtype=torch.float16)
    v = torch.randn(total, heads_kv, dim, device="cuda", dtype=torch.float16)
    for causal in (False, True):
        out = attention_varlen(q, k, v, cu, cu, max_len, causal=causal)
        torch.testing.assert_close(out, reference(q, k, v, cu.tolist(), cu.tolist(), causal), atol=1e-2, rtol=1e-2)
        t = do_bench(lambda: attention_varlen(q, k, v, cu, cu, max_len, causal=causal))
        cu_host = cu.tolist()
        t_ref = do_bench(lambda: reference(q, k, v, cu_host, cu_host, causal))
        flops = sum(4 * heads * n * n * dim * (0.5 if causal else 1.0) for n in lengths)
        print(f"varlen lengths={list(lengths)} h={heads} hkv={heads_kv} d={dim} causal={causal} fp16: correct; "
              f"{flops / t * 1e-9:.0f} TFLOP/s; per-sequence sdpa/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
