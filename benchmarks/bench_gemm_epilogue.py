"""GEMM with a fused bias + activation epilogue (examples/gemm_epilogue.py, a T.Parallel nest) against PyTorch.

The program as the example writes it (128x128x64 blocks of 128 threads), compiled as is (CoarsenBlocks pairs its
blocks into 128x256 blocks of two warpgroups) and pinned (``tilex.disable_block_coarsening``); PyTorch runs
``act(a @ b + bias)`` eagerly, and cuBLAS's bare ``a @ b`` is the floor no fused kernel has to beat. Ratios are
torch time / tilex time timed call by call in turn (bench_gemm.alternate: medians), after a 3 s warm-up.
"""
import argparse
import os
import sys

import tilex

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from gemm_epilogue import gemm_bias_act_kernel, reference  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192")
    args = p.parse_args()
    import torch
    from bench_gemm import alternate, warm_up

    print(f"device: {torch.cuda.get_device_name()}")
    warm_up()
    for shape in args.shapes.split(","):
        M, N, K = map(int, shape.split("x"))
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16) / K ** 0.5
        bias = torch.randn(N, device="cuda", dtype=torch.float16)
        c = torch.empty(M, N, device="cuda", dtype=torch.float16)
        for act in ("relu", "gelu"):
            fn = torch.relu if act == "relu" else (lambda y: torch.nn.functional.gelu(y, approximate="tanh"))
            runs = {"torch": lambda: fn(a @ b + bias), "cublas a@b": lambda: a @ b}
            for name, cfg in (("coarsened", {}), ("as written", {"tilex.disable_block_coarsening": True})):
                k = tilex.compile(gemm_bias_act_kernel(M, N, K, act), pass_configs=cfg)
                k(a, b, bias, c)
                torch.testing.assert_close(c.float(), reference(a, b, bias, act), atol=2e-2, rtol=2e-2)
                runs[name] = (lambda k=k: k(a, b, bias, c))
            best = alternate(runs)
            print(f"{shape} {act}: torch / coarsened {best['torch'] / best['coarsened']:.3f}, torch / as written "
                  f"{best['torch'] / best['as written']:.3f}, cuBLAS a@b alone / coarsened "
                  f"{best['cublas a@b'] / best['coarsened']:.3f}", flush=True)


if __name__ == "__main__":
    main()
