"""FlashAttention forward from the library (tilex/kernels/attention/forward.py, `attention_forward`) over a table
of variants: BHSD and BSHD, causal or not, head dim 64/128/256, fp16/bf16, GQA with 4 and 8 query heads per
key/value head. On a GPU each variant is checked against torch's scaled_dot_product_attention (for GQA the kv
heads repeated with `repeat_interleave`; SDPA itself is timed with `enable_gqa`), and TFLOP/s (4*b*h*s*s*d,
halved when causal) and the SDPA/tilex time ratio are printed; without a GPU the generated CUDA of one kernel
(BHSD, D=128, fp16) is printed."""
import tilex
from tilex.kernels.attention.forward import attention_forward, mha_forward

#         layout   causal  dim  dtype       heads heads_kv
VARIANTS = [("bhsd", False, 128, "float16", 32, 32),
            ("bhsd", True, 128, "float16", 32, 32),
            ("bshd", False, 128, "float16", 32, 32),
            ("bshd", True, 128, "bfloat16", 32, 32),
            ("bhsd", False, 64, "float16", 32, 32),
            ("bhsd", True, 64, "bfloat16", 32, 32),
            ("bhsd", False, 256, "float16", 16, 16),
            ("bhsd", True, 256, "bfloat16", 16, 16),
            ("bhsd", False, 128, "float16", 32, 8),    # GQA 4
            ("bshd", True, 128, "bfloat16", 32, 4),    # GQA 8
            ]


def reference(q, k, v, causal, layout):
    """SDPA on BHSD tensors, kv heads repeated to the query heads; returned in q's layout."""
    import torch

    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return o.transpose(1, 2) if layout == "bshd" else o


def main(batch=8, seq=4096):
    import torch

    if not torch.cuda.is_available():
        print(tilex.compile(mha_forward(batch, 32, seq, 128), out_idx=[3, 4]).get_kernel_source())
        return
    from tilex.autotuner import do_bench

    for layout, causal, dim, dtype, heads, heads_kv in VARIANTS:
        dt = getattr(torch, dtype)

        def make(h):
            shape = (batch, h, seq, dim) if layout == "bhsd" else (batch, seq, h, dim)
            return torch.randn(shape, device="cuda", dtype=dt)

        q, k, v = make(heads), make(heads_kv), make(heads_kv)
        out, _ = attention_forward(q, k, v, causal=causal, layout=layout)
        tol = 1e-2 if dtype == "float16" else 2e-2
        torch.testing.assert_close(out, reference(q, k, v, causal, layout), atol=tol, rtol=tol)
        t = do_bench(lambda: attention_forward(q, k, v, causal=causal, layout=layout))
        # SDPA timed on its own GQA path (enable_gqa), without the repeat_interleave copies of the reference
        qt, kt, vt = (x.transpose(1, 2) if layout == "bshd" else x for x in (q, k, v))
        t_ref = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(
            qt, kt, vt, is_causal=causal, enable_gqa=heads_kv != heads))
        flops = 4 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
        gqa = f" hkv={heads_kv}" if heads_kv != heads else ""
        print(f"mha fwd {layout} b={batch} h={heads}{gqa} s={seq} d={dim} causal={causal!s:5} {dtype:8}: correct; "
              f"{flops / t * 1e-9:4.0f} TFLOP/s; sdpa/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
