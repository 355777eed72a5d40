"""Compile time of one GEMM kernel (parse + tilex passes + TVM codegen + nvcc), cache disabled."""
import os
import time

os.environ["TILEX_DISABLE_CACHE"] = "1"
import tilex  # noqa: E402
from tilex.kernels.gemm import matmul  # noqa: E402

ts = []
for i in range(3):
    t0 = time.perf_counter()
    f = matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, stage_c=True)
    t1 = time.perf_counter()
    k = tilex.compile(f, out_idx=[2])
    t2 = time.perf_counter()
    ts.append((t1 - t0, t2 - t1))
print("compile time (parse, tilex+TVM+nvcc):", [(round(a, 2), round(b, 2)) for a, b in ts])
