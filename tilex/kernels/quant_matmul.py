"""A16Wx GEMM: Y = X @ W^T for float16/bfloat16 activations X (M, K) and a low-bit weight W (N, K) (any
`tilex.dtypes` type, 1 to 8 bits) with per-group scales and optional zero-points.

Each block computes a (bn x bm) tile of Y^T = W X^T, so the weight is the A operand of the tensor-core MMA and can
be decoded straight into registers: per k-tile it stages the packed words of its (bn x bk) weight tile, the scales
(and zeros) of that tile and a (bm x bk) tile of X in shared memory (pipelined copies), decodes the words into a
float16/bfloat16 fragment laid out as T.gemm's A operand (`T.dequantize`), and multiplies. The packed weight is
prepared once (`prepack_weight` with torch, or the tile program `prepack_program`): the codes of every (bn x bk)
tile in the order the decoding threads read them, so each thread loads its words with 16-byte vectors.
`tilex.ops.quant` wraps these programs for torch tensors (`pack_weight`, `quant_matmul`).

Layouts of the prepared tensors: ``Wp`` (ceil(N / bn), ceil(K / bk), words // 32, 32) int32 with
words = bn * bk * bits // 32 (ragged N and K padded with code 0); scales and zeros (ceil(K / g), N) in the
activation dtype (one row per group of g consecutive k).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import tilex.language as T
from tilex import dtypes, env
from tilex.ir.hardware import num_sms
from tilex.ir.lowbit_chunk import plane_offsets
from tilex.quant.chunks import pack_chunks
from tilex.op.dequantize import packed_order, word_vector, words_per_thread
from tilex.op.gemm import GemmWarpPolicy, a_fragment_layout


@dataclass(frozen=True)
class QuantTiles:
    """Block tile of the A16Wx kernel: bn weight rows (output columns), bm activation rows, bk of K."""

    bn: int = 128
    bm: int = 16
    bk: int = 128
    threads: int = 128
    num_stages: int = 4


def weight_fragment(tiles: QuantTiles, target, act="float16"):
    """The register layout the kernel decodes a (bn x bk) weight tile into (T.gemm's A operand)."""
    return a_fragment_layout(tiles.bn, tiles.bm, tiles.bk, tiles.threads, target, GemmWarpPolicy.FullRow, act)


def quant_matmul(M, N, K, wtype, group_size, tiles: QuantTiles = QuantTiles(), act="float16", zero_point=False,
                 split_k=1, offset=False, split_reduce="atomic", prescaled=False):
    """The tile program: X (M, K) act, Wp (packed, see the module doc), S / Z (K // g, N) act -> Y (M, N) act.
    With `split_k` > 1 the k tiles are shared out among `split_k` blocks per output tile (grid z), which add their
    partial sums into a float32 Y that must hold zeros on entry (for grids much smaller than the GPU). With
    `offset` (and `zero_point`, groups shorter than K) Z holds -(zero * scale) instead of the zeros: the weight is
    code * scale + Z, one fma per decoded pair. With `prescaled` (float types, groups shorter than K, no zeros or
    `offset`) S holds scale * 2^k (`tilex.quant.raw_scale_exponent`): the codes decode raw, one fma per pair fewer.

    `split_reduce` = "last_block" (split_k > 1) takes a float32 workspace Ws (M, N) and counters Cnt
    (ceil(M / bm), N tiles) that hold zeros on entry, and gives Y in the activation dtype: every split adds into
    Ws, the last one of a tile to arrive (an acq_rel counter) writes Y and leaves Ws and Cnt at zero again, so
    no kernel runs before or after this one."""
    wt = dtypes.lookup(str(wtype))
    bn, bm, bk = tiles.bn, tiles.bm, tiles.bk
    g = group_size
    check_group(g, K, bk)
    n_tiles, k_tiles = -(-N // bn), -(-K // bk)  # ragged N, K: the packed weight is padded with code 0
    words = bn * bk * wt.bits // 32
    if words % 32:
        raise ValueError(f"quant_matmul: a ({bn}, {bk}) tile of {wt.bits}-bit codes is {words} words, not whole "
                         f"128-byte rows; use a larger tile")
    gpt = max(bk // g, 1)  # scale rows per k-tile (rows past the last group read as zero)
    groups = -(-K // g)
    z_rows = groups if zero_point else 1
    per_channel = g >= K
    if split_k < 1:
        raise ValueError(f"quant_matmul: split_k must be >= 1, got {split_k}")
    check_split_reduce(split_reduce)
    if prescaled and (per_channel or (zero_point and not offset)):
        raise ValueError("quant_matmul: prescaled scales need groups shorter than K and no zeros (or an offset)")
    k_per = -(-k_tiles // split_k)  # k tiles per split (tiles past the end read as zeros)
    out_dtype = "float32" if split_k > 1 else act

    @T.macro
    def accumulate(X: T.Tensor((M, K), act), Wp: T.Tensor((n_tiles, k_tiles, words // 32, 32), "int32"),
                   S: T.Tensor((groups, N), act), Z: T.Tensor((z_rows, N), act),
                   C_f: T.FragmentBuffer((bn, bm), "float32"), bx: T.int32, by: T.int32, bz: T.int32):
        """C_f = this block's (bn x bm) tile of W X^T over its share of K (scales applied)."""
        X_s = T.alloc_shared((bm, bk), act)
        W_s = T.alloc_shared((words // 32, 32), "int32")  # 128-byte rows: one TMA tile on sm90
        S_s = T.alloc_shared((gpt, bn), act)
        Z_s = T.alloc_shared((gpt, bn), act)
        W_f = T.alloc_fragment((bn, bk), act)
        T.clear(C_f)
        for kk in T.Pipelined(k_per, num_stages=tiles.num_stages):
            T.copy(X[by * bm, (bz * k_per + kk) * bk], X_s)
            T.copy(Wp[bx, bz * k_per + kk, 0:words // 32, 0:32], W_s)
            if per_channel:  # one scale per row: applied to the sums in the epilogue
                if zero_point:
                    T.copy(Z[0, bx * bn], Z_s)
                    T.dequantize(W_s, W_f, wt, zero=Z_s, group_size=g)
                else:
                    T.dequantize(W_s, W_f, wt)
            else:
                T.copy(S[((bz * k_per + kk) * bk) // g, bx * bn], S_s)
                if zero_point:
                    T.copy(Z[((bz * k_per + kk) * bk) // g, bx * bn], Z_s)
                    if offset:
                        T.dequantize(W_s, W_f, wt, scale=S_s, offset=Z_s, group_size=g, prescaled=prescaled)
                    else:
                        T.dequantize(W_s, W_f, wt, scale=S_s, zero=Z_s, group_size=g)
                else:
                    T.dequantize(W_s, W_f, wt, scale=S_s, group_size=g, prescaled=prescaled)
            T.gemm(W_f, X_s, C_f, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
        if per_channel:
            for i, j in T.Parallel(bn, bm):
                C_f[i, j] = C_f[i, j] * T.cast(S[0, T.min(bx * bn + i, N - 1)], "float32")

    if split_k > 1 and split_reduce == "last_block":
        @T.prim_func
        def last_block(X: T.Tensor((M, K), act), Wp: T.Tensor((n_tiles, k_tiles, words // 32, 32), "int32"),
                       S: T.Tensor((groups, N), act), Z: T.Tensor((z_rows, N), act), Ws: T.Tensor((M, N), "float32"),
                       Cnt: T.Tensor((T.ceildiv(M, bm), n_tiles), "int32"), Y: T.Tensor((M, N), act)):
            with T.Kernel(n_tiles, T.ceildiv(M, bm), split_k, threads=tiles.threads) as (bx, by, bz):
                C_f = T.alloc_fragment((bn, bm), "float32")
                arrived = T.alloc_shared((1,), "int32")
                accumulate(X, Wp, S, Z, C_f, bx, by, bz)
                for i, j in T.Parallel(bn, bm):
                    if by * bm + j < M and bx * bn + i < N:
                        T.atomic_add(Ws[by * bm + j, bx * bn + i], C_f[i, j])
                T.sync_threads()  # every thread's sums are added before the count below releases them
                if T.get_thread_binding() == 0:
                    arrived[0] = T.atomic_add(Cnt[by, bx], 1, memory_order="acq_rel", return_prev=True)
                T.sync_threads()
                if arrived[0] == split_k - 1:  # the last split of this tile: write Y, leave Ws and Cnt at zero
                    for j, i in T.Parallel(bm, bn):
                        if by * bm + j < M and bx * bn + i < N:
                            Y[by * bm + j, bx * bn + i] = T.cast(Ws[by * bm + j, bx * bn + i], act)
                            Ws[by * bm + j, bx * bn + i] = T.float32(0)
                    if T.get_thread_binding() == 0:
                        Cnt[by, bx] = 0

        return last_block

    @T.prim_func
    def main(X: T.Tensor((M, K), act), Wp: T.Tensor((n_tiles, k_tiles, words // 32, 32), "int32"),
             S: T.Tensor((groups, N), act), Z: T.Tensor((z_rows, N), act), Y: T.Tensor((M, N), out_dtype)):
        with T.Kernel(n_tiles, T.ceildiv(M, bm), split_k, threads=tiles.threads) as (bx, by, bz):
            C_f = T.alloc_fragment((bn, bm), "float32")
            accumulate(X, Wp, S, Z, C_f, bx, by, bz)
            for i, j in T.Parallel(bn, bm):
                if by * bm + j < M and bx * bn + i < N:
                    if split_k > 1:
                        T.atomic_add(Y[by * bm + j, bx * bn + i], C_f[i, j])
                    else:
                        Y[by * bm + j, bx * bn + i] = T.cast(C_f[i, j], act)

    return main


#: how split-K partial sums meet: atomically in a zeroed float32 Y, or in a workspace the last block reads
SPLIT_REDUCES = ("atomic", "last_block")


def check_split_reduce(split_reduce):
    """ValueError unless `split_reduce` is one of :data:`SPLIT_REDUCES`."""
    if split_reduce not in SPLIT_REDUCES:
        raise ValueError(f"quant_matmul: split_reduce is 'atomic' or 'last_block', got {split_reduce!r}")


def check_group(g, K, bk):
    """ValueError unless scale groups of `g` along K suit k tiles of `bk`: one group per row (g >= K), or g
    dividing K and dividing or being a multiple of bk."""
    if g >= K:
        return
    if g <= 0 or K % g or (g % bk and bk % g):
        raise ValueError(f"quant_matmul: group size {g} must divide K = {K} and divide or be a multiple of the k "
                         f"tile {bk} (or cover all of K)")


def prepack_weight(codes, wtype, tiles: QuantTiles, target, act="float16"):
    """(N, K) codes (uint8, unpacked) -> Wp (ceil(N / bn), ceil(K / bk), words) int32 for `quant_matmul` (padded
    with code 0, which decodes to a finite value: padded columns meet zero activations)."""
    wt = dtypes.lookup(str(wtype))
    bn, bk = tiles.bn, tiles.bk
    n0, k0 = codes.shape
    N, K = -(-n0 // bn) * bn, -(-k0 // bk) * bk
    if (N, K) != (n0, k0):
        codes = torch.nn.functional.pad(codes, (0, K - k0, 0, N - n0))
    frag = weight_fragment(tiles, target, act)
    order = torch.as_tensor(packed_order(frag), device=codes.device)  # (owners, L) flat (bn, bk) indices
    t = codes.reshape(N // bn, bn, K // bk, bk).permute(0, 2, 1, 3).reshape(N // bn, K // bk, bn * bk)
    per_thread = t[:, :, order.reshape(-1)].reshape(N // bn, K // bk, order.shape[0], -1, 32)
    words = pack_chunks(per_thread, wt.bits)  # (.., owners, chunks, bits)
    wpt = words_per_thread(frag, wt.bits)
    vec = word_vector(wpt)
    words = words.reshape(N // bn, K // bk, order.shape[0], wpt // vec, vec).transpose(2, 3)  # interleave threads
    return words.reshape(N // bn, K // bk, -1, 32).contiguous()


def chunk_bit_table(bits):
    """(bits, 32) int32: for bit b of word w of a packed chunk (`tilex.ir.lowbit_chunk`), 8 * (code slot) + (bit
    of that code) it holds, or -1 for a bit no code uses."""
    table = torch.full((bits, 32), -1, dtype=torch.int32)
    for p, o, first in plane_offsets(bits):
        per_word = 16 // p
        for j in range(16):
            q, i = divmod(j, per_word)
            for half in range(2):
                for x in range(p):
                    table[first + q, 16 * half + p * i + x] = 8 * (2 * j + half) + o + x
    return table


def prepack_program(N, K, wtype, tiles: QuantTiles, target, act="float16"):
    """The pre-packing as a tile program: codes (N, K) uint8, the tile order (`packed_order`, (owners, L) int32)
    and the chunk bit table (`chunk_bit_table`) -> Wp of `quant_matmul`. One block per (bn, bk) tile, one thread
    per owner thread of the weight fragment, writing exactly the words that thread will read."""
    wt = dtypes.lookup(str(wtype))
    bits, bn, bk = wt.bits, tiles.bn, tiles.bk
    frag = weight_fragment(tiles, target, act)
    owners = frag.thread_extent // int(frag.replicate)
    L = frag.local_size
    wpt = words_per_thread(frag, bits)
    vec = word_vector(wpt)
    n_tiles, k_tiles = -(-N // bn), -(-K // bk)
    words = bn * bk * bits // 32

    @T.prim_func
    def prepack(C: T.Tensor((N, K), "uint8"), O: T.Tensor((owners, L), "int32"), B: T.Tensor((bits, 32), "int32"),
                W: T.Tensor((n_tiles, k_tiles, words // 32, 32), "int32")):
        with T.Kernel(n_tiles, k_tiles, threads=owners) as (bx, by):
            t = T.get_thread_binding()
            codes = T.alloc_local((32,), "int32")
            word = T.alloc_local((1,), "int32")
            for c in T.serial(L // 32):
                for s in T.unroll(32):
                    r = bx * bn + O[t, c * 32 + s] // bk
                    col = by * bk + O[t, c * 32 + s] % bk
                    codes[s] = T.if_then_else(r < N and col < K, T.cast(C[T.min(r, N - 1), T.min(col, K - 1)],
                                                                       "int32"), 0)
                for wi in T.serial(bits):
                    word[0] = 0
                    for b in T.unroll(32):
                        e = B[wi, b]
                        if e >= 0:
                            word[0] = word[0] | (((codes[e // 8] >> (e % 8)) & 1) << b)
                    w = c * bits + wi
                    flat = ((w // vec) * owners + t) * vec + w % vec
                    W[bx, by, flat // 32, flat % 32] = word[0]

    return prepack


def default_tiles(n, k, group_size, target):
    """The block tile `pack_weight` packs an (n, k) weight for: 256 k per block, and 128 weight rows when that
    still gives every multiprocessor two blocks, else 64 (an 8192-row weight: 128 blocks). On an H100 these were
    the fastest of the tiles tried for A16W4 at M = 16 (benchmarks/README.md). K below 256, or groups that do
    not tile 256, take the 128 x 128 tile."""
    fits = k >= 256 and (group_size >= k or 256 % group_size == 0 or group_size % 256 == 0)
    if not fits:
        return QuantTiles()
    if -(-n // 128) >= 2 * num_sms(env.normalize_arch(str(target))):
        return QuantTiles(bn=128, bk=256, threads=128, num_stages=3)
    return QuantTiles(bn=64, bk=256, threads=128, num_stages=4)
