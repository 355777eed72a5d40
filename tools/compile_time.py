"""Compile time of one GEMM kernel (parse + tilex passes + TVM codegen + nvcc), cache disabled."""
import os, sys, time
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, ROOT)
os.environ["TILEX_DISABLE_CACHE"] = "1"
from gemm_kernels import matmul
import tilex
ts = []
for i in range(3):
    t0 = time.perf_counter()
    f = matmul(4096, 4096, 4096, 128, 256, 64, 3, 256, stage_c=True)
    t1 = time.perf_counter()
    k = tilex.compile(f, out_idx=[2])
    t2 = time.perf_counter()
    ts.append((t1 - t0, t2 - t1))
print("compile time (parse, tilex+TVM+nvcc):", [(round(a, 2), round(b, 2)) for a, b in ts])
