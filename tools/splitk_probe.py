"""Probe: kernel-only time of split-K variants for 128-row GEMMs (C not cleared: times only, no result check)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch  # noqa: E402
from gemm_kernels import matmul, matmul_splitk, matmul_swap_ab  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import tilex  # noqa: E402

M, N, K = 128, 8192, 8192
for dt in (torch.float16, torch.bfloat16):
    name = str(dt).split(".")[1]
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt)
    c = torch.zeros(M, N, device="cuda", dtype=dt)
    runs = {"cublas": lambda: a @ b}
    variants = {
        "swap128x64": matmul_swap_ab(M, N, K, 128, 64, 64, 8, 128, dtype=name),
        "mm128x64": matmul(M, N, K, 128, 64, 64, 8, 256, dtype=name),
        "sk2_128x128_s6": matmul_splitk(M, N, K, 128, 128, 64, 6, 256, 2, dtype=name),
        "sk2_128x128_s4_bk128": matmul_splitk(M, N, K, 128, 128, 128, 3, 256, 2, dtype=name),
        "sk4_128x256_s4": matmul_splitk(M, N, K, 128, 256, 64, 4, 256, 4, dtype=name),
        "sk2_128x64_s8": matmul_splitk(M, N, K, 128, 64, 64, 8, 256, 2, dtype=name),
    }
    for k, prog in variants.items():
        try:
            kern = tilex.compile(prog)
            runs[k] = (lambda kern=kern: kern(a, b, c))
        except Exception as e:  # noqa: BLE001
            print(k, "failed", str(e).splitlines()[0][:200])
    best = {k: float("inf") for k in runs}
    for _ in range(3):
        for k, fn in runs.items():
            best[k] = min(best[k], do_bench(fn, warmup=25, rep=150))
    print(name, "  ".join(f"{k} {best['cublas'] / v:.3f} ({v*1e3:.1f}us)" for k, v in best.items()), flush=True)
