"""Check: warp-specialized GEMMs with and without T.use_swizzle; prints which output tiles come out wrong."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch  # noqa: E402
from gemm_kernels import matmul  # noqa: E402

import tilex  # noqa: E402

M = N = K = int(os.environ.get("SIZE", 4096))
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
ref = a.float() @ b.float()
for bm, bn, th, sw in [(128, 128, 256, 8), (128, 128, 256, 0), (128, 128, 128, 8), (128, 256, 256, 8), (64, 128, 128, 8)]:
    k = tilex.compile(matmul(M, N, K, bm, bn, 64, 4, th, swizzle=sw), out_idx=[2])
    for rep in range(2):
        c = k(a, b)
        torch.cuda.synchronize()
        err = (c.float() - ref).abs()
        bad = (err > 1.0).reshape(M // bm, bm, N // bn, bn).any(3).any(1)
        print(f"cfg {bm}x{bn} t{th} sw{sw} rep{rep}: max err {err.max().item():.3f}, bad tiles {int(bad.sum())}"
              f"/{bad.numel()}", "first:", bad.nonzero()[:6].tolist())
        if bad.any():
            ty, tx = bad.nonzero()[0].tolist()
            e = (err[ty * bm:(ty + 1) * bm, tx * bn:(tx + 1) * bn] > 1.0)
            print("   bad rows in tile:", e.any(1).nonzero().flatten()[:20].tolist(), "bad cols:",
                  e.any(0).nonzero().flatten()[:20].tolist(), "count", int(e.sum()))
