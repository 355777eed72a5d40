"""Experiment: warp specialization forced on a rasterized GEMM, with a given producer/consumer register split."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch  # noqa: E402
from gemm_kernels import matmul  # noqa: E402

import tilex  # noqa: E402
import tilex.transform.inject_pipeline as ip  # noqa: E402
import tilex.transform.warp_specialize as ws  # noqa: E402

ip._uses_swizzle = lambda body: False  # allow WS together with T.use_swizzle
M = N = K = 4096
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
ref = a.float() @ b.float()
for prod, cons in [(40, 232), (56, 224), (0, 0)]:
    ws.PRODUCER_REGS, ws.CONSUMER_REGS = prod, cons
    if prod == 0:
        ws._ext_orig = ws._ext
        ws._ext = lambda name, *args: ws._ext_orig("tilex::wgmma_fence" if "reg_" in name else name, *args)
    k = tilex.compile(matmul(M, N, K, 128, 128, 64, 4, 256, swizzle=8), out_idx=[2])
    err = (k(a, b).float() - ref).abs().max().item()
    print("regs", prod, cons, "max err", round(err, 3))
