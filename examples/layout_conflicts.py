"""Three programs whose operators want different register layouts for one tile, which tilex settles itself
(layout inference inserts the conversion and says so in a LayoutConversionWarning), each beside the way a user
writes it by hand to avoid the conflict:

* ``register_transpose``: a tile loaded coalesced into registers, read transposed by a T.Parallel loop. tilex
  converts it through a swizzled shared tile; by hand, the tile goes through shared memory with a swizzle written
  as a layout annotation.
* ``split_probabilities``: attention's two GEMMs with two warpgroups on 64 rows: the first splits its accumulator
  S by columns over the warpgroups, the second needs the whole of P = cast(S) in each warpgroup's registers. tilex
  converts P through shared memory; by hand, P is written to a shared tile that the second GEMM reads.
* ``int4_gemm`` (mixed types): packed 4-bit weights (two per byte) copied into a uint8 fragment and dequantized
  into the fp16 register operand of a GEMM. tilex lays the packed fragment out from the operand's layout through
  the index map ``j // 2``; by hand, the packed tile goes through shared memory.

    python examples/layout_conflicts.py     # compile, check against torch and time both versions (GPU)
"""
import warnings

import tilex
import tilex.language as T


def register_transpose(M, N, b=64, threads=128, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, b), T.ceildiv(M, b), threads=threads) as (bx, by):
            A_f = T.alloc_fragment((b, b), dtype)
            B_f = T.alloc_fragment((b, b), dtype)
            T.copy(A[by * b, bx * b], A_f)
            for i, j in T.Parallel(b, b):
                B_f[i, j] = A_f[j, i]
            T.copy(B_f, B[bx * b, by * b])

    return main


def register_transpose_by_hand(M, N, b=64, threads=128, dtype="float32"):
    vec = 4 if dtype == "float32" else 8  # elements of a 16-byte chunk

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, b), T.ceildiv(M, b), threads=threads) as (bx, by):
            A_s = T.alloc_shared((b, b), dtype)
            B_f = T.alloc_fragment((b, b), dtype)
            # 16-byte chunks of a row permuted by the row: a column read spreads over the banks
            T.annotate_layout({A_s: T.Layout((b, b), lambda i, j: [i, ((j // vec) ^ (i % (b // vec))) * vec
                                                                    + j % vec])})
            T.copy(A[by * b, bx * b], A_s)
            for i, j in T.Parallel(b, b):
                B_f[i, j] = A_s[j, i]
            T.copy(B_f, B[bx * b, by * b])

    return main


def split_probabilities(M, N, D=64, bm=64, bn=128, threads=256):
    """O = sum over key tiles of cast(Q @ K_tile^T) @ V_tile (attention's two GEMMs without the softmax)."""

    @T.prim_func
    def main(Q: T.Tensor((M, D), "float16"), K: T.Tensor((N, D), "float16"), V: T.Tensor((N, D), "float16"),
             O: T.Tensor((M, D), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            Q_s = T.alloc_shared((bm, D), "float16")
            K_s = T.alloc_shared((bn, D), "float16")
            V_s = T.alloc_shared((bn, D), "float16")
            S = T.alloc_fragment((bm, bn), "float32")
            P = T.alloc_fragment((bm, bn), "float16")
            O_l = T.alloc_fragment((bm, D), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.clear(O_l)
            for j in T.serial(T.ceildiv(N, bn)):
                T.copy(K[j * bn, 0], K_s)
                T.copy(V[j * bn, 0], V_s)
                T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True)
                for r, c in T.Parallel(bm, bn):
                    P[r, c] = T.Cast("float16", S[r, c])
                T.gemm(P, V_s, O_l)
            T.copy(O_l, O[bx * bm, 0])

    return main


def split_probabilities_by_hand(M, N, D=64, bm=64, bn=128, threads=256):
    @T.prim_func
    def main(Q: T.Tensor((M, D), "float16"), K: T.Tensor((N, D), "float16"), V: T.Tensor((N, D), "float16"),
             O: T.Tensor((M, D), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            Q_s = T.alloc_shared((bm, D), "float16")
            K_s = T.alloc_shared((bn, D), "float16")
            V_s = T.alloc_shared((bn, D), "float16")
            P_s = T.alloc_shared((bm, bn), "float16")
            S = T.alloc_fragment((bm, bn), "float32")
            O_l = T.alloc_fragment((bm, D), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.clear(O_l)
            for j in T.serial(T.ceildiv(N, bn)):
                T.copy(K[j * bn, 0], K_s)
                T.copy(V[j * bn, 0], V_s)
                T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True)
                for r, c in T.Parallel(bm, bn):
                    P_s[r, c] = T.Cast("float16", S[r, c])
                T.gemm(P_s, V_s, O_l)
            T.copy(O_l, O[bx * bm, 0])

    return main


def _int4(w, j):
    """The signed 4-bit weight j of a row from its packed byte `w` (low nibble first), as fp16."""
    return T.Cast("float16", T.Cast("int32", (w >> T.Cast("uint8", 4 * (j % 2))) & T.uint8(15)) - 8)


def int4_gemm(M, N, K, bm=64, bn=128, bk=64, threads=128, num_stages=2):
    """C = W @ X^T with W (M, K) in signed 4-bit values packed two per byte along K."""

    @T.prim_func
    def main(Wq: T.Tensor((M, K // 2), "uint8"), X: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            Wq_f = T.alloc_fragment((bm, bk // 2), "uint8")
            W_f = T.alloc_fragment((bm, bk), "float16")
            X_s = T.alloc_shared((bn, bk), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                T.copy(Wq[by * bm, k * bk // 2], Wq_f)
                T.copy(X[bx * bn, k * bk], X_s)
                for i, j in T.Parallel(bm, bk):
                    W_f[i, j] = _int4(Wq_f[i, j // 2], j)
                T.gemm(W_f, X_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def int4_gemm_by_hand(M, N, K, bm=64, bn=128, bk=64, threads=128, num_stages=2):
    @T.prim_func
    def main(Wq: T.Tensor((M, K // 2), "uint8"), X: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            Wq_s = T.alloc_shared((bm, bk // 2), "uint8")
            W_f = T.alloc_fragment((bm, bk), "float16")
            X_s = T.alloc_shared((bn, bk), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                T.copy(Wq[by * bm, k * bk // 2], Wq_s)
                T.copy(X[bx * bn, k * bk], X_s)
                for i, j in T.Parallel(bm, bk):
                    W_f[i, j] = _int4(Wq_s[i, j // 2], j)
                T.gemm(W_f, X_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def unpack_int4(wq):
    """torch reference: (M, K // 2) uint8 -> (M, K) fp16 signed 4-bit values, low nibble first."""
    import torch

    lo, hi = (wq & 15).to(torch.int16) - 8, (wq >> 4).to(torch.int16) - 8
    return torch.stack([lo, hi], dim=-1).reshape(wq.shape[0], -1).to(torch.float16)


def cases(size=4096):
    """(name, tilex's program, the hand-written one, make inputs, torch reference)."""
    import torch

    def dev(*shape, dtype=torch.float16):
        return torch.randn(*shape, device="cuda").to(dtype)

    m = size
    return [
        ("register transpose", register_transpose(m, m), register_transpose_by_hand(m, m),
         lambda: [dev(m, m, dtype=torch.float32), torch.empty(m, m, device="cuda")],
         lambda a, _: a.t()),
        ("split probabilities", split_probabilities(m, m), split_probabilities_by_hand(m, m),
         lambda: [dev(m, 64) / 8, dev(m, 64) / 8, dev(m, 64) / 8, torch.empty(m, 64, device="cuda")],
         lambda q, k, v, _: (q.float() @ k.float().t()).half().float() @ v.float()),
        ("int4 gemm", int4_gemm(m, m, m), int4_gemm_by_hand(m, m, m),
         lambda: [torch.randint(0, 256, (m, m // 2), device="cuda", dtype=torch.uint8), dev(m, m) / 16,
                  torch.empty(m, m, device="cuda")],
         lambda wq, x, _: unpack_int4(wq).float() @ x.float().t()),
    ]


def main():
    import torch

    if not torch.cuda.is_available():
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", tilex.LayoutConversionWarning)
            tilex.compile(register_transpose(1024, 1024), target="sm_90a")
        print("\n".join(str(n.message) for n in notes))
        return
    from tilex.autotuner import do_bench

    for name, prog, hand, make, ref in cases():
        args = make()
        k, kh = tilex.compile(prog), tilex.compile(hand)
        want = ref(*args)
        for kern in (k, kh):
            kern(*args)
            torch.testing.assert_close(args[-1], want, rtol=2e-2, atol=2e-2)
        t, th = do_bench(lambda: k(*args)), do_bench(lambda: kh(*args))
        print(f"{name}: correct; hand-written / tilex-converted time = {th / t:.3f}")


if __name__ == "__main__":
    main()
