"""Attention benchmarks: tilex vs torch SDPA (default backend) in one process.

    python benchmarks/bench_attention.py [--quick] [--only fwd,plain,bwd,decode]

Forward: the library program (`tilex.kernels.attention.forward`, best of a few block configurations) and the plain
TileLang-style example program (examples/flash_attention/mha_fwd_tilelang_style.py, its defaults); backward:
`attention_backward` vs SDPA's backward (autograd on the same inputs); decoding: `attention_decode` as a fraction
of the copy bandwidth measured in the same run (K and V read once). Ratios are SDPA time / tilex time.
"""
import argparse
import importlib.util
import pathlib
import sys

import torch
import torch.nn.functional as F

from tilex.autotuner import do_bench
from tilex.kernels.attention.backward import attention_backward
from tilex.kernels.attention.decode import attention_decode
from tilex.kernels.attention.forward import TUNE_CANDIDATES, attention_forward

ROOT = pathlib.Path(__file__).resolve().parent.parent
FWD_CONFIGS = TUNE_CANDIDATES  # the library's own candidates (attention_forward(..., config="tune"))


def bench(fn):
    return do_bench(fn, warmup=25, rep=100)


def flops(b, h, s, d, causal, mult=1.0):
    return 4 * b * h * s * s * d * (0.5 if causal else 1.0) * mult


def row(*cells):
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def forward_table(shapes):
    row("forward", "causal", "SDPA ms", "tilex ms", "TFLOP/s", "SDPA/tilex", "config")
    row(*["---"] * 7)
    for b, h, s, d, dtype in shapes:
        for causal in (False, True):
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
            t_ref = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            best = None
            for cfg in FWD_CONFIGS[d]:
                try:
                    out = attention_forward(q, k, v, causal=causal, config=cfg)[0]
                except Exception as e:  # a configuration that does not fit is skipped, and said
                    print(f"  ({b},{h},{s},{d}) {cfg}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
                    continue
                torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
                t = bench(lambda: attention_forward(q, k, v, causal=causal, config=cfg))
                if best is None or t < best[0]:
                    best = (t, cfg)
            t, cfg = best
            row(f"B{b} H{h} S{s} D{d} {str(dtype)[6:]}", causal, f"{t_ref:.3f}", f"{t:.3f}",
                f"{flops(b, h, s, d, causal) / t * 1e-9:.0f}", f"{t_ref / t:.3f}", cfg)


def plain_program_table(b=8, h=32, s=4096, d=128):
    spec = importlib.util.spec_from_file_location(
        "tl_style", ROOT / "examples" / "flash_attention" / "mha_fwd_tilelang_style.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import tilex

    row("plain TileLang-style program", "causal", "SDPA ms", "tilex ms", "TFLOP/s", "SDPA/tilex")
    row(*["---"] * 6)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    for causal in (False, True):
        kern = tilex.compile(mod.flashattn(b, h, s, d, causal), out_idx=[3])
        torch.testing.assert_close(kern(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                   atol=1e-2, rtol=1e-2)
        t_ref = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        t = bench(lambda: kern(q, k, v))
        row(f"B{b} H{h} S{s} D{d}", causal, f"{t_ref:.3f}", f"{t:.3f}",
            f"{flops(b, h, s, d, causal) / t * 1e-9:.0f}", f"{t_ref / t:.3f}")


def backward_table(b=8, h=32, s=4096, d=128):
    row("backward", "causal", "SDPA ms", "tilex ms", "TFLOP/s", "SDPA/tilex")
    row(*["---"] * 6)
    for causal in (False, True):
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn(b, h, s, d, device="cuda", dtype=torch.float16)
        o_ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        t_ref = bench(lambda: torch.autograd.grad(o_ref, (q, k, v), do, retain_graph=True))
        with torch.no_grad():
            o, lse = attention_forward(q, k, v, causal=causal)
        t = bench(lambda: attention_backward(q.detach(), k.detach(), v.detach(), o, do, lse, causal))
        row(f"B{b} H{h} S{s} D{d}", causal, f"{t_ref:.3f}", f"{t:.3f}",
            f"{flops(b, h, s, d, causal, 2.5) / t * 1e-9:.0f}", f"{t_ref / t:.3f}")


def copy_bandwidth():
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    t = bench(lambda: y.copy_(x))
    return 2 * x.numel() / t * 1e-6  # GB/s


def decode_table(cases):
    bw = copy_bandwidth()
    row("decode (q heads 32, kv heads 8, D128)", "kv len", "SDPA ms", "tilex ms", "GB/s", "of copy BW",
        "SDPA/tilex")
    row(*["---"] * 7)
    for b, n in cases:
        q = torch.randn(b, 32, 128, device="cuda", dtype=torch.float16)
        kc, vc = (torch.randn(b, n, 8, 128, device="cuda", dtype=torch.float16) for _ in range(2))
        out = attention_decode(q, kc, vc)
        qr, kr, vr = q[:, :, None], kc.transpose(1, 2), vc.transpose(1, 2)
        ref = F.scaled_dot_product_attention(qr, kr, vr, enable_gqa=True)[:, :, 0]
        torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)
        t_ref = bench(lambda: F.scaled_dot_product_attention(qr, kr, vr, enable_gqa=True))
        t = bench(lambda: attention_decode(q, kc, vc))
        gbs = 2 * kc.numel() * 2 / t * 1e-6
        row(f"B{b}", n, f"{t_ref:.3f}", f"{t:.3f}", f"{gbs:.0f}", f"{gbs / bw:.2f}", f"{t_ref / t:.2f}")
    print(f"(copy bandwidth in this run: {bw:.0f} GB/s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="fwd,plain,bwd,decode")
    a = ap.parse_args()
    parts = a.only.split(",")
    print(f"# {torch.cuda.get_device_name()}")
    if "fwd" in parts:
        shapes = [(8, 32, 4096, 128, torch.float16)]
        if not a.quick:
            shapes += [(1, 32, 16384, 128, torch.float16), (8, 32, 4096, 64, torch.float16),
                       (8, 16, 4096, 256, torch.float16), (8, 32, 4096, 128, torch.bfloat16)]
        forward_table(shapes)
    if "plain" in parts:
        plain_program_table()
    if "bwd" in parts:
        backward_table()
    if "decode" in parts:
        cases = [(1, 8192), (64, 8192)] if a.quick else [(1, 8192), (1, 65536), (8, 16384), (32, 8192),
                                                         (64, 8192), (64, 65536 // 4)]
        decode_table(cases)


if __name__ == "__main__":
    main()
