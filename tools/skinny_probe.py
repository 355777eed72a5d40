"""Probe: how close skinny GEMMs (memory-bound) get to the device's read bandwidth (GB/s of operand bytes)."""
import sys, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import torch
from triton.testing import do_bench
import tilex
from gemm_kernels import matmul, matmul_swap_ab

def gbps(nbytes, ms):
    return nbytes / ms * 1e-6

for K, N in ((8192, 8192), (16384, 8192), (8192, 16384)):
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    out = torch.empty(N, device="cuda", dtype=torch.float32)
    t_sum = do_bench(lambda: torch.sum(b, 0, dtype=torch.float32, out=out), warmup=25, rep=200)
    t_cp = do_bench(lambda: b.clone(), warmup=25, rep=200)
    print(f"B {K}x{N}: sum(0) {gbps(b.numel()*2, t_sum):.0f} GB/s, clone {gbps(2*b.numel()*2, t_cp):.0f} GB/s")
    for M, cfgs in ((16, [(16, 64, 128, 8, 128), (16, 64, 64, 16, 128), (16, 128, 64, 10, 128), (16, 128, 128, 6, 128),
                          (16, 32, 128, 12, 128), (16, 64, 256, 4, 128)]),
                    (128, [(128, 64, 64, 8, 256, "mm"), (128, 64, 64, 8, 128, "swap"), (128, 64, 128, 4, 128, "swap"),
                           (128, 128, 64, 6, 256, "mm"), (128, 32, 128, 8, 128, "mm")])):
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        c = torch.empty(M, N, device="cuda", dtype=torch.float16)
        ref = a @ b
        t_cb = do_bench(lambda: a @ b, warmup=25, rep=200)
        print(f"  M={M}: cuBLAS {t_cb*1e3:.1f} us {gbps(b.numel()*2, t_cb):.0f} GB/s")
        for cfg in cfgs:
            try:
                if len(cfg) == 5 or cfg[5] == "swap":
                    bm, bn, bk, st, th = cfg[:5]
                    prog = matmul_swap_ab(M, N, K, bm, bn, bk, st, th)
                else:
                    bm, bn, bk, st, th = cfg[:5]
                    prog = matmul(M, N, K, bm, bn, bk, st, th)
                kern = tilex.compile(prog)
                kern(a, b, c)
                torch.testing.assert_close(c.float() / K ** 0.5, ref.float() / K ** 0.5, atol=1e-2, rtol=1e-2)
                t = do_bench(lambda: kern(a, b, c), warmup=25, rep=200)
                print(f"    {cfg}: {t*1e3:.1f} us {gbps(b.numel()*2, t):.0f} GB/s ratio {t_cb/t:.3f}")
            except Exception as e:
                print(f"    {cfg}: failed {str(e).splitlines()[0][:150]}")
