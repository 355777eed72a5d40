"""FlashAttention forward (BHSD) written the way TileLang's own examples write it: the steps of one key block
as `@T.macro` functions (MMA0: scores Q·Kᵀ with the causal mask folded into the accumulator's initial value;
Softmax: the online-softmax update in base 2; Rescale: scale the running output; MMA1: P·V) called from a
pipelined loop over the key blocks.

Nothing here is tilex-specific: on sm_90a tilex turns the loop into a TMA producer warpgroup feeding wgmma
consumer warpgroups by itself. On a GPU, `main()` checks the output against torch's
scaled_dot_product_attention (causal and not) and prints TFLOP/s and the SDPA/tilex time ratio; without a GPU
it prints the generated CUDA. The library version (GQA, BSHD, ragged lengths, LSE) is
tilex/kernels/attention/forward.py.
"""
import math

import tilex
import tilex.language as T


def flashattn(batch, heads, seq_len, dim, is_causal, block_M=128, block_N=128, num_stages=2, threads=256):
    scale = (1.0 / math.sqrt(dim)) * 1.44269504  # softmax in base 2: exp(x / sqrt(d)) = 2^(x * scale)
    shape = [batch, heads, seq_len, dim]
    dtype = "float16"
    accum_dtype = "float"

    @T.macro
    def MMA0(K: T.Tensor(shape, dtype), Q_shared: T.SharedBuffer([block_M, dim], dtype),
             K_shared: T.SharedBuffer([block_N, dim], dtype), acc_s: T.FragmentBuffer([block_M, block_N], accum_dtype),
             k: T.int32, bx: T.int32, by: T.int32, bz: T.int32):
        T.copy(K[bz, by, k * block_N:(k + 1) * block_N, :], K_shared)
        if is_causal:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, 0, -T.infinity(acc_s.dtype))
        else:
            T.clear(acc_s)
        T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def MMA1(V: T.Tensor(shape, dtype), V_shared: T.SharedBuffer([block_N, dim], dtype),
             acc_s_cast: T.FragmentBuffer([block_M, block_N], dtype),
             acc_o: T.FragmentBuffer([block_M, dim], accum_dtype), k: T.int32, by: T.int32, bz: T.int32):
        T.copy(V[bz, by, k * block_N:(k + 1) * block_N, :], V_shared)
        T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def Softmax(acc_s: T.FragmentBuffer([block_M, block_N], accum_dtype),
                acc_s_cast: T.FragmentBuffer([block_M, block_N], dtype),
                scores_max: T.FragmentBuffer([block_M], accum_dtype),
                scores_max_prev: T.FragmentBuffer([block_M], accum_dtype),
                scores_scale: T.FragmentBuffer([block_M], accum_dtype),
                scores_sum: T.FragmentBuffer([block_M], accum_dtype),
                logsum: T.FragmentBuffer([block_M], accum_dtype)):
        T.copy(scores_max, scores_max_prev)
        T.fill(scores_max, -T.infinity(accum_dtype))
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)
        # keep the running maximum: a fully masked row of this block must not lower it
        for i in T.Parallel(block_M):
            scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
        for i in T.Parallel(block_M):
            scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
        for i, j in T.Parallel(block_M, block_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(block_M):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)

    @T.macro
    def Rescale(acc_o: T.FragmentBuffer([block_M, dim], accum_dtype),
                scores_scale: T.FragmentBuffer([block_M], accum_dtype)):
        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] *= scores_scale[i]

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             Output: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            O_shared = T.alloc_shared([block_M, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, by, bx * block_M:(bx + 1) * block_M, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            # causal: key blocks past this query block's last row are fully masked, skip them
            loop_range = (T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                          if is_causal else T.ceildiv(seq_len, block_N))
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                MMA0(K, Q_shared, K_shared, acc_s, k, bx, by, bz)
                Softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum, logsum)
                Rescale(acc_o, scores_scale)
                MMA1(V, V_shared, acc_s_cast, acc_o, k, by, bz)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, by, bx * block_M:(bx + 1) * block_M, :])

    return main


def main(batch=8, heads=32, seq_len=4096, dim=128):
    import torch

    if not torch.cuda.is_available():
        print(tilex.compile(flashattn(batch, heads, seq_len, dim, False), out_idx=[3]).get_kernel_source())
        return
    from tilex.autotuner import do_bench

    shape = (batch, heads, seq_len, dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    for is_causal in (False, True):
        kernel = tilex.compile(flashattn(batch, heads, seq_len, dim, is_causal), out_idx=[3])

        def sdpa():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

        torch.testing.assert_close(kernel(q, k, v), sdpa(), atol=1e-2, rtol=1e-2)
        t = do_bench(lambda: kernel(q, k, v))
        t_ref = do_bench(sdpa)
        flops = 4 * batch * heads * seq_len * seq_len * dim * (0.5 if is_causal else 1.0)
        print(f"mha fwd b={batch} h={heads} s={seq_len} d={dim} causal={is_causal} fp16: correct; "
              f"{flops / t * 1e-9:.0f} TFLOP/s; sdpa/tilex = {t_ref / t:.2f}")


if __name__ == "__main__":
    main()
