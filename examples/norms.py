"""RMSNorm and LayerNorm over the last dimension of an fp16 (M, N) matrix, fp32 math, one row per block.

The tile programs are `rmsnorm_kernel` and `layernorm_kernel` in tilex/kernels/norms.py. This script checks them
against torch and prints time vs torch on a GPU; without one it prints the generated CUDA of RMSNorm.
"""
import tilex
from tilex.kernels.norms import layernorm_kernel, rmsnorm_kernel


def main(M=4096, N=4096):
    import torch

    rms = tilex.compile(rmsnorm_kernel(M, N), out_idx=[2])
    ln = tilex.compile(layernorm_kernel(M, N), out_idx=[3])
    if not torch.cuda.is_available():
        print(rms.get_kernel_source())
        return
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    w = torch.randn(N, device="cuda", dtype=torch.float16)
    b = torch.randn(N, device="cuda", dtype=torch.float16)
    ref_rms = torch.nn.functional.rms_norm(x.float(), (N,), w.float(), eps=1e-6).half()
    ref_ln = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float(), eps=1e-5).half()
    torch.testing.assert_close(rms(x, w), ref_rms, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(ln(x, w, b), ref_ln, atol=1e-2, rtol=1e-2)
    from tilex.autotuner import do_bench

    for name, k, args, ref in [("rmsnorm", rms, (x, w), lambda: torch.nn.functional.rms_norm(x, (N,), w, eps=1e-6)),
                               ("layernorm", ln, (x, w, b),
                                lambda: torch.nn.functional.layer_norm(x, (N,), w, b, eps=1e-5))]:
        t = do_bench(lambda: k(*args))
        t_ref = do_bench(ref)
        print(f"{name} {M}x{N} fp16: correct; {2 * M * N * 2 / t * 1e-6:.0f} GB/s; torch/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
