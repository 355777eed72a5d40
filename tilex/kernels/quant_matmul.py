"""A16Wx GEMM: Y = X @ W^T for float16/bfloat16 activations X (M, K) and a low-bit weight W (N, K) (any
`tilex.dtypes` type, 1 to 8 bits) with per-group scales and optional zero-points.

Each block computes a (bn x bm) tile of Y^T = W X^T, so the weight is the A operand of the tensor-core MMA and can
be decoded straight into registers: per k-tile it stages the packed words of its (bn x bk) weight tile, the scales
(and zeros) of that tile and a (bm x bk) tile of X in shared memory (pipelined copies), decodes the words into a
float16/bfloat16 fragment laid out as T.gemm's A operand (`T.dequantize`), and multiplies. The packed weight is
prepared once on the host (`prepack_weight`): the codes of every (bn x bk) tile in the order the decoding threads
read them, so each thread loads its words with 16-byte vectors.

Layouts of the prepared tensors: ``Wp`` (ceil(N / bn), ceil(K / bk), words // 32, 32) int32 with
words = bn * bk * bits // 32
(ragged N and K padded with code 0); scales and zeros (ceil(K / g), N) in the activation dtype (one row per group
of g consecutive k).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import tilex.language as T
from tilex import dtypes, env
from tilex.ir.hardware import num_sms
from tilex.jit import compile as compile_kernel
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
                 target=None, split_k=1):
    """The tile program: X (M, K) act, Wp (packed, see the module doc), S / Z (K // g, N) act -> Y (M, N) act.
    With `split_k` > 1 the k tiles are shared out among `split_k` blocks per output tile (grid z), which add their
    partial sums into a float32 Y that must hold zeros on entry (for grids much smaller than the GPU)."""
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
    k_per = -(-k_tiles // split_k)  # k tiles per split (tiles past the end read as zeros)
    out_dtype = "float32" if split_k > 1 else act

    @T.prim_func
    def main(X: T.Tensor((M, K), act), Wp: T.Tensor((n_tiles, k_tiles, words // 32, 32), "int32"),
             S: T.Tensor((groups, N), act), Z: T.Tensor((z_rows, N), act), Y: T.Tensor((M, N), out_dtype)):
        with T.Kernel(n_tiles, T.ceildiv(M, bm), split_k, threads=tiles.threads) as (bx, by, bz):
            X_s = T.alloc_shared((bm, bk), act)
            W_s = T.alloc_shared((words // 32, 32), "int32")  # 128-byte rows: one TMA tile on sm90
            S_s = T.alloc_shared((gpt, bn), act)
            Z_s = T.alloc_shared((gpt, bn), act)
            W_f = T.alloc_fragment((bn, bk), act)
            C_f = T.alloc_fragment((bn, bm), "float32")
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
                        T.dequantize(W_s, W_f, wt, scale=S_s, zero=Z_s, group_size=g)
                    else:
                        T.dequantize(W_s, W_f, wt, scale=S_s, group_size=g)
                T.gemm(W_f, X_s, C_f, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            if per_channel:
                for i, j in T.Parallel(bn, bm):
                    C_f[i, j] = C_f[i, j] * T.cast(S[0, T.min(bx * bn + i, N - 1)], "float32")
            for i, j in T.Parallel(bn, bm):
                if by * bm + j < M and bx * bn + i < N:
                    if split_k > 1:
                        T.atomic_add(Y[by * bm + j, bx * bn + i], C_f[i, j])
                    else:
                        Y[by * bm + j, bx * bn + i] = T.cast(C_f[i, j], act)

    return main


def check_group(g, K, bk):
    """ValueError unless scale groups of `g` along K suit k tiles of `bk`: one group per row (g >= K), or g
    dividing K and dividing or being a multiple of bk."""
    if g >= K:
        return
    if g <= 0 or K % g or (g % bk and bk % g):
        raise ValueError(f"quant_matmul: group size {g} must divide K = {K} and divide or be a multiple of the k "
                         f"tile {bk} (or cover all of K)")


def prepack_weight_kernel(codes, wtype, tiles: QuantTiles, target, act="float16"):
    """`prepack_weight` on the GPU, by the tile program of `prepack_program` (codes: a CUDA tensor)."""
    n, k = codes.shape
    key = ("prepack", n, k, str(wtype), tiles, target, act)
    if key not in _KERNELS:
        _KERNELS[key] = compile_kernel(prepack_program(n, k, wtype, tiles, target, act), out_idx=-1, target=target)
    bits = dtypes.lookup(str(wtype)).bits
    order = torch.as_tensor(packed_order(weight_fragment(tiles, target, act)), dtype=torch.int32,
                            device=codes.device)
    return _KERNELS[key](codes.contiguous(), order, chunk_bit_table(bits).to(codes.device))


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


@dataclass
class PackedWeight:
    """A low-bit weight (N, K) ready for `quant_matmul_torch`: pre-packed words, scales and zeros as (K // g, N)
    tensors of the activation dtype, and the block tile the words were packed for."""

    words: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    dtype: dtypes.LowBitType
    group_size: int
    shape: tuple
    tiles: QuantTiles
    act: str
    target: str

    @property
    def nbytes(self) -> int:
        return self.words.numel() * 4 + self.scales.numel() * 2 + (0 if self.zeros is None else self.zeros.numel() * 2)


_TORCH_ACTS = {"float16": torch.float16, "bfloat16": torch.bfloat16}


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


def pack_weight(qw, act="float16", tiles: QuantTiles | None = None, target="sm_90a") -> PackedWeight:
    """A `tilex.quant.QuantizedWeight` (codes (N, K), scales / zeros (N, K // g)) -> a PackedWeight for
    activations of `act` on `target`, packed for `tiles` (default `default_tiles`)."""
    if act not in _TORCH_ACTS:
        raise ValueError(f"pack_weight: activations are float16 or bfloat16, got {act!r}")
    if tiles is None:
        tiles = default_tiles(*qw.codes.shape, qw.group_size, target)
    n, k = qw.codes.shape
    g = qw.group_size
    check_group(g, k, tiles.bk)
    if not qw.dtype.exact_in(act):
        raise ValueError(f"pack_weight: {qw.dtype} values do not all fit {act}; use bfloat16 activations")
    tdt = _TORCH_ACTS[act]
    codes, wt, zeros = qw.codes, qw.dtype, qw.zeros
    if wt.kind == "uint" and zeros is not None and bool((zeros == 2 ** (wt.bits - 1)).all()):
        # offset binary around the middle code is the signed type with the top bit flipped: decode it as such
        # and skip the zero-point subtraction (exact: code - 2^(b-1) == two's complement of code ^ 2^(b-1))
        codes, wt, zeros = codes ^ (1 << (wt.bits - 1)), dtypes.int_type(wt.bits, signed=True), None
    words = prepack_weight(codes, wt, tiles, target, act)
    zeros = None if zeros is None else zeros.T.to(tdt).contiguous()
    return PackedWeight(words, qw.scales.T.to(tdt).contiguous(), zeros, wt, g, (n, k), tiles, act, target)


def _m_tile(m):
    """Rows of X per block: the smallest MMA-friendly tile holding M, at most 128."""
    for bm in (16, 32, 64):
        if m <= bm:
            return bm
    return 128


_KERNELS: dict = {}


def _kernel(m, pw: PackedWeight, split_k=1):
    t = pw.tiles
    bm = _m_tile(m)
    key = (m, pw.shape, str(pw.dtype), pw.group_size, pw.zeros is not None, pw.act, t, bm, pw.target, split_k)
    if key not in _KERNELS:
        tiles = QuantTiles(t.bn, bm, t.bk, t.threads, t.num_stages if bm <= 32 else 3)
        prog = quant_matmul(m, pw.shape[0], pw.shape[1], pw.dtype, pw.group_size, tiles, pw.act,
                            zero_point=pw.zeros is not None, split_k=split_k)
        # split-K adds into a zeroed float32 Y the caller passes; otherwise Y is allocated and returned
        _KERNELS[key] = compile_kernel(prog, out_idx=-1 if split_k == 1 else None, target=pw.target)
    return _KERNELS[key]


def quant_matmul_torch(x, pw: PackedWeight, split_k=1):
    """Y = x @ W^T for x (M, K) and a PackedWeight W (N, K): Y (M, N) in x's dtype. `split_k` > 1 shares each
    output tile's K among that many blocks (float32 partial sums added atomically, then cast): for problems
    with fewer output tiles than the GPU has multiprocessors."""
    n, k = pw.shape
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"quant_matmul: x must be a 2-d torch tensor (M, K), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    if x.shape[1] != k:
        raise ValueError(f"quant_matmul: x has K = {x.shape[1]}, the weight has K = {k}")
    if x.dtype != _TORCH_ACTS[pw.act]:
        raise ValueError(f"quant_matmul: x is {x.dtype}, the weight was packed for {pw.act} activations")
    if x.device != pw.words.device:
        raise ValueError(f"quant_matmul: x is on {x.device}, the weight on {pw.words.device}")
    if not isinstance(split_k, int) or split_k < 1:
        raise ValueError(f"quant_matmul: split_k must be a positive int, got {split_k!r}")
    x = x.contiguous()
    zeros = pw.zeros if pw.zeros is not None else pw.scales[:1]
    kernel = _kernel(x.shape[0], pw, split_k)
    if split_k == 1:
        return kernel(x, pw.words, pw.scales, zeros)
    y = torch.zeros(x.shape[0], n, device=x.device, dtype=torch.float32)
    kernel(x, pw.words, pw.scales, zeros, y)
    return y.to(x.dtype)
