"""Dequantizing GEMM (A16W4) two ways: written by hand the way TileLang's examples write one, and through the
library call `tilex.ops.quant_matmul`.

The hand-written program keeps two 4-bit codes per byte of a (N, K // 2) uint8 weight (low nibble first), decodes a
tile of them with shifts and masks in a T.Parallel loop into a shared float16 tile (``(code - 8) * scale``, one
scale per group of `group` k), and multiplies with T.gemm. The library call decodes the weight straight into the
MMA's registers from a pre-packed layout (see tilex/kernels/quant_matmul.py).
"""
import tilex
import tilex.language as T


def dequant_gemm_kernel(M, N, K, group=128, bm=16, bn=128, bk=128, stages=3, threads=128):
    """Y (M, N) = X (M, K) @ W^T, W[n, k] = (nibble(k) of B[n, k // 2] - 8) * S[n, k // group]."""

    @T.prim_func
    def dequant_gemm(X: T.Tensor((M, K), "float16"), B: T.Tensor((N, K // 2), "uint8"),
                     S: T.Tensor((N, K // group), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            X_s = T.alloc_shared((bm, bk), "float16")
            B_packed = T.alloc_shared((bn, bk // 2), "uint8")
            B_s = T.alloc_shared((bn, bk), "float16")
            C = T.alloc_fragment((bm, bn), "float32")
            T.clear(C)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(X[by * bm, k * bk], X_s)
                T.copy(B[bx * bn, k * bk // 2], B_packed)
                for i, j in T.Parallel(bn, bk):
                    code = (B_packed[i, j // 2] >> ((j % 2) * 4)) & T.uint8(15)
                    scale = S[bx * bn + i, (k * bk + j) // group]
                    B_s[i, j] = (T.cast(code, "float16") - T.float16(8)) * scale
                T.gemm(X_s, B_s, C, transpose_B=True)
            T.copy(C, Y[by * bm, bx * bn])

    return dequant_gemm


def tile_for(M):
    """A block tile for M rows of X: narrow weight tiles and a long k step for decode (many blocks, short MMAs),
    256 x 128 with two warpgroups for prefill."""
    if M <= 64:
        return dict(bm=16 if M <= 16 else (32 if M <= 32 else 64), bn=32, bk=256, stages=4, threads=128)
    return dict(bm=256, bn=128, bk=128, stages=2, threads=256)


def pack_nibbles(codes):
    """(N, K) uint8 codes < 16 -> (N, K // 2) bytes, the even k in the low nibble."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()


def main(M=16, N=8192, K=8192, group=128):
    import torch

    from tilex import ops, quant

    tile = tile_for(M)
    kernel = tilex.compile(dequant_gemm_kernel(M, N, K, group, **tile), out_idx=-1)
    if not torch.cuda.is_available():
        print(kernel.get_kernel_source())
        return
    w = torch.randn(N, K, device="cuda") / K ** 0.5
    qw = quant.quantize(w, "uint4", group_size=group)  # symmetric: codes around the implicit zero 8
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    ref = x.float() @ quant.dequantize(qw).float().T
    b, s = pack_nibbles(qw.codes), qw.scales.half()
    y = kernel(x, b, s)
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
    pw = ops.pack_weight(qw)
    torch.testing.assert_close(ops.quant_matmul(x, pw).float(), ref, atol=2e-2, rtol=2e-2)

    from tilex.autotuner import do_bench

    w16 = torch.randn(N, K, device="cuda", dtype=torch.float16)
    t16 = do_bench(lambda: torch.nn.functional.linear(x, w16))
    t_hand = do_bench(lambda: kernel(x, b, s))
    t_lib = do_bench(lambda: ops.quant_matmul(x, pw))
    print(f"A16W4 {M}x{N}x{K}, tile {tile}: correct; cuBLAS fp16 / hand-written = {t16 / t_hand:.2f}, "
          f"cuBLAS fp16 / tilex.ops.quant_matmul = {t16 / t_lib:.2f}")


if __name__ == "__main__":
    main()
