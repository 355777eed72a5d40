"""Probe: cuBLAS time / tilex time of GEMM variants (tile config x pass configs), alternated in one process.

usage: variant_probe.py SHAPES DTYPE 'label=bm,bn,bk,st,th,sw[,split[,stagec]]@k=v,k=v' ..."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import torch  # noqa: E402
from bench_gemm import program, runner  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import tilex  # noqa: E402


def parse(spec):
    label, rest = spec.split("=", 1)
    cfg, _, opts = rest.partition("@")
    pc = {}
    for item in filter(None, opts.split(",")):
        k, v = item.split(":")
        pc["tilex." + k] = int(v)
    return label, tuple(int(x) for x in cfg.split(",")), pc


shapes, dtype, specs = sys.argv[1].split(","), sys.argv[2], [parse(s) for s in sys.argv[3:]]
for shape in shapes:
    M, N, K = map(int, shape.split("x"))
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=tdt)
    b = torch.randn(K, N, device="cuda", dtype=tdt)
    c = torch.empty(M, N, device="cuda", dtype=tdt)
    ref = a @ b
    runs = {"cublas": lambda: a @ b}
    for label, cfg, pc in specs:
        try:
            kern = tilex.compile(program(M, N, K, dtype, cfg), pass_configs=pc)
            run = runner(kern, cfg, a, b, c)
            out = run()
            torch.testing.assert_close(out.float() / K ** 0.5, ref.float() / K ** 0.5, atol=1e-2, rtol=1e-2)
            runs[label] = run
        except Exception as e:  # noqa: BLE001
            print(f"{shape} {label}: failed {str(e).splitlines()[0][:200]}")
    best = {k: float("inf") for k in runs}
    for _ in range(3):
        for k, fn in runs.items():
            best[k] = min(best[k], do_bench(fn, warmup=25, rep=150))
    print(f"{shape} {dtype}: " + "  ".join(f"{k} {best['cublas'] / v:.3f}" for k, v in best.items() if k != "cublas"),
          flush=True)
