"""Memory-bound tile kernels vs torch, in one process: softmax and RMSNorm on fp16 (M, N).

Prints achieved bandwidth (bytes read + written / time), the device's measured copy bandwidth (torch copy of
the same number of bytes), the fraction of it reached, and torch time / tilex time.
"""
import tilex
from tilex.kernels.norms import rmsnorm_kernel
from tilex.kernels.softmax import softmax_kernel

SHAPES = [(4096, 4096), (16384, 8192)]
CONFIGS = [dict(bm=1, threads=128), dict(bm=1, threads=256), dict(bm=1, threads=512), dict(bm=2, threads=256)]


def best_of(make, args, check):
    from triton.testing import do_bench

    best = None
    for cfg in CONFIGS:
        try:
            k = make(cfg)
            check(k(*args))
        except Exception as e:  # noqa: BLE001
            print(f"    {cfg}: failed: {str(e).splitlines()[0][:160]}")
            continue
        t = do_bench(lambda: k(*args), warmup=25, rep=200)
        if best is None or t < best[0]:
            best = (t, cfg)
    return best


def main():
    import torch
    from triton.testing import do_bench

    print(f"device: {torch.cuda.get_device_name()}")
    rows = []
    for M, N in SHAPES:
        x = torch.randn(M, N, device="cuda", dtype=torch.float16)
        w = torch.randn(N, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        t_copy = do_bench(lambda: y.copy_(x), warmup=25, rep=200)
        bw_copy = nbytes / t_copy * 1e-6
        ref_sm = torch.softmax(x.float(), 1).half()
        ref_rms = torch.nn.functional.rms_norm(x.float(), (N,), w.float(), eps=1e-6).half()
        cases = [
            ("softmax", lambda cfg: tilex.compile(softmax_kernel(M, N, **cfg), out_idx=[1]), (x,),
             lambda out: torch.testing.assert_close(out, ref_sm, atol=1e-2, rtol=1e-2),
             lambda: torch.softmax(x, 1)),
            ("rmsnorm", lambda cfg: tilex.compile(rmsnorm_kernel(M, N, **cfg), out_idx=[2]), (x, w),
             lambda out: torch.testing.assert_close(out, ref_rms, atol=1e-2, rtol=1e-2),
             lambda: torch.nn.functional.rms_norm(x, (N,), w, eps=1e-6)),
        ]
        for name, make, args, check, ref in cases:
            print(f"{name} {M}x{N}:")
            best = best_of(make, args, check)
            t_ref = do_bench(ref, warmup=25, rep=200)
            if best is None:
                rows.append((name, M, N, None, None, bw_copy, t_ref, None))
                continue
            t, cfg = best
            rows.append((name, M, N, t, nbytes / t * 1e-6, bw_copy, t_ref, cfg))
    print("\nop | shape | tilex GB/s | copy GB/s | % of copy | torch GB/s | torch/tilex | config")
    for name, M, N, t, bw, bw_copy, t_ref, cfg in rows:
        torch_bw = 2 * M * N * 2 / t_ref * 1e-6
        if t is None:
            print(f"{name} | {M}x{N} | - | {bw_copy:.0f} | - | {torch_bw:.0f} | - | none worked")
        else:
            print(f"{name} | {M}x{N} | {bw:.0f} | {bw_copy:.0f} | {100 * bw / bw_copy:.0f}% | {torch_bw:.0f} | "
                  f"{t_ref / t:.2f} | {cfg}")


if __name__ == "__main__":
    main()
