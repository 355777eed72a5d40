"""Check one GEMM config at 4096^3 in both pipeline modes (helper for a reported wrong result)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch  # noqa: E402
from gemm_kernels import matmul  # noqa: E402

import tilex  # noqa: E402

M = N = K = 4096
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
ref = a.float() @ b.float()
for cfg in [(128, 128, 64, 4, 256, 8), (128, 128, 64, 4, 256, 0), (128, 128, 64, 3, 256, 0)]:
    for pc in (None, {"tilex.disable_warp_specialized": True}):
        k = tilex.compile(matmul(M, N, K, *cfg[:5], swizzle=cfg[5]), out_idx=[2], pass_configs=pc)
        err = (k(a, b).float() - ref).abs().max().item()
        print(cfg, "ws" if pc is None else "cp.async", "max err", round(err, 3))
