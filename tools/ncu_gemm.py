"""One launch each of a tilex GEMM config and cuBLAS, for Nsight Compute (tools/ncu_gemm.sh)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch  # noqa: E402
from gemm_kernels import matmul  # noqa: E402

import tilex  # noqa: E402

M, N, K = map(int, (sys.argv[1] if len(sys.argv) > 1 else "4096x4096x4096").split("x"))
cfg = tuple(map(int, (sys.argv[2] if len(sys.argv) > 2 else "128,256,64,4,256,0").split(",")))
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
k = tilex.compile(matmul(M, N, K, *cfg[:5], swizzle=cfg[5], stage_c=len(cfg) > 7 and bool(cfg[7])), out_idx=[2])
for _ in range(3):
    k(a, b)
    a @ b
torch.cuda.synchronize()
