"""Dump the SASS of a GEMM config (needs cuobjdump next to nvcc): python tools/sass_dump.py M N K bm,bn,bk,st,th,sw[,stage_c]."""
import os
import subprocess
import sys

os.environ["TILEX_DISABLE_CACHE"] = "1"
import tilex  # noqa: E402
from tilex import env  # noqa: E402
from tilex.kernels.gemm import matmul  # noqa: E402

M, N, K = map(int, sys.argv[1:4])
c = [int(x) for x in sys.argv[4].split(",")]
k = tilex.compile(matmul(M, N, K, *c[:5], swizzle=c[5], stage_c=len(c) > 6 and bool(c[6])), target="sm_90a")
out = os.environ.get("OUT", "/tmp")
src = os.path.join(out, "k.cu")
open(src, "w").write(k.get_kernel_source())
subprocess.run([env.find_nvcc(), "--cubin", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
                f"-I{env.include_dir()}", "-o", "/tmp/k.cubin", src], check=True)
sass = subprocess.run([os.path.join(os.path.dirname(env.find_nvcc()), "cuobjdump"), "-sass", "/tmp/k.cubin"],
                      capture_output=True, text=True).stdout
open(os.path.join(out, "k.sass"), "w").write(sass)
lines = sass.splitlines()
for i, line in enumerate(lines):
    if "DEPBAR.LE gsb0, 0x0" in line:
        print("\n".join(x[:100] for x in lines[max(0, i - 8):i + 4] if "/*" in x and x.strip().startswith("/*0")))
        print("----")
