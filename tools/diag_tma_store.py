"""Diagnose the staged (TMA store) epilogue: where the output differs from torch."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch  # noqa: E402
from gemm_kernels import matmul  # noqa: E402

import tilex  # noqa: E402

M = N = K = 1024
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
ref = (a.float() @ b.float())
for pc in [{"tilex.disable_warp_specialized": True}, None]:
    k = tilex.compile(matmul(M, N, K, 128, 256, 64, 3, 256, stage_c=True), pass_configs=pc)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    k(a, b, c)
    torch.cuda.synchronize()
    bad = ~torch.isclose(c.float(), ref, atol=0.5, rtol=1e-2)
    print(pc, "bad fraction", bad.float().mean().item(), "nan", c.isnan().float().mean().item())
    if bad.any():
        r, col = bad.nonzero()[0].tolist()
        print(" first bad", r, col, "got", c[r, col].item(), "want", ref[r, col].item())
        print(" bad rows mod 128 (tile 0,0):", bad[:128, :256].any(1).nonzero().flatten()[:16].tolist())
        print(" bad cols (tile 0,0):", bad[:128, :256].any(0).nonzero().flatten()[:16].tolist())
        # is the tile there but permuted? look for the ref value of (0, 0) in the first tile
        v = ref[0, :8].tolist()
        print(" ref row0[:8]", [round(x, 2) for x in v])
        print(" got row0[:8]", [round(x, 2) for x in c[0, :8].float().tolist()])
        print(" got row1[:8]", [round(x, 2) for x in c[1, :8].float().tolist()], "ref row1", [round(x, 2) for x in ref[1, :8].tolist()])
