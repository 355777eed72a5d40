"""GEMM with a fused epilogue: C = act(A @ B + bias), bias broadcast along rows through a register fragment."""
import tilex
import tilex.language as T


def gemm_bias_act_kernel(M, N, K, act="relu", bm=128, bn=128, bk=64, stages=3, threads=128, dtype="float16"):
    @T.prim_func
    def gemm_bias_act(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), Bias: T.Tensor((N,), dtype),
                      C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            bias = T.alloc_fragment((bn,), dtype)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(Bias[bx * bn], bias)
            for i, j in T.Parallel(bm, bn):
                if act == "relu":
                    C_l[i, j] = T.max(C_l[i, j] + T.Cast("float32", bias[j]), 0.0)
                else:  # gelu (tanh approximation)
                    C_l[i, j] = C_l[i, j] + T.Cast("float32", bias[j])
                    C_l[i, j] = 0.5 * C_l[i, j] * (1.0 + T.tanh(0.7978845608028654 * (
                        C_l[i, j] + 0.044715 * C_l[i, j] * C_l[i, j] * C_l[i, j])))
            T.copy(C_l, C[by * bm, bx * bn])

    return gemm_bias_act


def reference(a, b, bias, act):
    import torch

    y = a.float() @ b.float() + bias.float()
    return torch.relu(y) if act == "relu" else torch.nn.functional.gelu(y, approximate="tanh")


def main(M=4096, N=4096, K=4096):
    import torch

    kernels = {act: tilex.compile(gemm_bias_act_kernel(M, N, K, act), out_idx=[3]) for act in ("relu", "gelu")}
    if not torch.cuda.is_available():
        print(kernels["relu"].get_kernel_source())
        return
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16) / K ** 0.5
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    from tilex.autotuner import do_bench

    for act, k in kernels.items():
        torch.testing.assert_close(k(a, b, bias).float(), reference(a, b, bias, act), atol=2e-2, rtol=2e-2)
        fn = torch.relu if act == "relu" else (lambda y: torch.nn.functional.gelu(y, approximate="tanh"))
        t, t_ref = do_bench(lambda: k(a, b, bias)), do_bench(lambda: fn(a @ b + bias))
        print(f"gemm+bias+{act} {M}x{N}x{K}: correct; torch/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
