"""Attention decoding with a KV cache (split-KV "flash-decoding", GQA): the two tile programs of
tilex/kernels/attention/decode.py (per (batch, kv head, split) an online softmax over one chunk of the cache for
all query heads of the group; then a log-sum-exp weighted combine of the splits). On a GPU this script checks the
output against torch's scaled_dot_product_attention and prints the bandwidth of reading K and V and the speed ratio
to torch; without a GPU it prints the generated CUDA of the split kernel."""
import math

import tilex
from tilex.kernels.attention.decode import attention_decode, choose_num_splits, decode_split


def main(batch=8, heads_q=32, heads_kv=8, kv_len=8192, dim=128):
    import torch

    if not torch.cuda.is_available():
        splits = choose_num_splits(batch, heads_kv, kv_len)
        print(tilex.compile(decode_split(batch, heads_q, heads_kv, kv_len, dim, splits), out_idx=[3, 4])
              .get_kernel_source())
        return
    from tilex.autotuner import do_bench

    q = torch.randn(batch, heads_q, dim, device="cuda", dtype=torch.float16)
    kc = torch.randn(batch, kv_len, heads_kv, dim, device="cuda", dtype=torch.float16)
    vc = torch.randn(batch, kv_len, heads_kv, dim, device="cuda", dtype=torch.float16)
    g = heads_q // heads_kv

    def reference():
        kt = kc.transpose(1, 2).repeat_interleave(g, dim=1)
        vt = vc.transpose(1, 2).repeat_interleave(g, dim=1)
        return torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), kt, vt,
                                                                scale=1.0 / math.sqrt(dim)).squeeze(2)

    out = attention_decode(q, kc, vc)
    torch.testing.assert_close(out.float(), reference().float(), atol=2e-2, rtol=2e-2)
    t = do_bench(lambda: attention_decode(q, kc, vc))
    # timed without the repeat copies: SDPA reads the kv heads directly (enable_gqa)
    qs, ks, vs = q.unsqueeze(2), kc.transpose(1, 2), vc.transpose(1, 2)
    t_ref = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True))
    kv_bytes = 2 * kc.numel() * kc.element_size()
    print(f"decode b={batch} hq={heads_q} hkv={heads_kv} kv_len={kv_len} d={dim} fp16: correct; "
          f"{kv_bytes / t * 1e-6:.0f} GB/s; SDPA/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
