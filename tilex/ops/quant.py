"""`tilex.ops.quant_matmul`: Y = x @ W^T with a low-bit weight W (any 1-8-bit type of `tilex.dtypes`, group-wise
scales, optional zero-points), decoded in registers by the A16Wx program of :mod:`tilex.kernels.quant_matmul`.

    qw = tilex.quant.quantize(weight, "int4", group_size=128)      # weight (N, K), as nn.Linear stores it
    pw = tilex.ops.pack_weight(qw)                                 # once: pre-packed for the kernel
    y = tilex.ops.quant_matmul(x, pw)                              # x (M, K) float16 / bfloat16

Kernels are compiled per (M tile, weight, split) on first use and kept in this module.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tilex import dtypes, env, quant
from tilex.autotuner.smem import shared_memory_bytes
from tilex.ir.hardware import block_shared_memory_limit, compute_capability
from tilex.jit import compile as compile_kernel
from tilex.kernels.quant_matmul import (QuantTiles, check_group, check_split_reduce, chunk_bit_table, default_tiles,
                                        prepack_program, prepack_weight, quant_matmul as quant_matmul_program,
                                        weight_fragment)
from tilex.op.dequantize import packed_order

__all__ = ["PackedWeight", "pack_weight", "quant_matmul", "auto_split_k", "prepack_weight_kernel"]


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


@dataclass
class PackedWeight:
    """A low-bit weight (N, K) ready for `quant_matmul`: pre-packed words, scales and zeros as (K // g, N)
    tensors of the activation dtype, and the block tile the words were packed for. With `offsets`, `zeros` holds
    -(zero * scale) (computed in float32, rounded once: what the kernel would compute per group) instead. With
    `prescaled`, `scales` hold scale * 2^k for a float type whose kernel decode then skips its power-of-two multiply
    (`tilex.quant.raw_scale_exponent`; chosen where no scale overflows)."""

    words: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    dtype: dtypes.LowBitType
    group_size: int
    shape: tuple
    tiles: QuantTiles
    act: str
    target: str
    offsets: bool = False
    prescaled: bool = False

    @property
    def nbytes(self) -> int:
        return self.words.numel() * 4 + self.scales.numel() * 2 + (0 if self.zeros is None else self.zeros.numel() * 2)


_TORCH_ACTS = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def pack_weight(qw, act="float16", tiles: QuantTiles | None = None, target="sm_90a") -> PackedWeight:
    """A `tilex.quant.QuantizedWeight` (codes (N, K), scales / zeros (N, K // g)) -> a PackedWeight for
    activations of `act` on `target`, packed for `tiles` (default `default_tiles`).

    The packing fixes the weight tile of every later call. The default suits decode (M up to 64: long k steps);
    a weight used mostly for prefill (M in the thousands) runs fastest packed with
    ``QuantTiles(bn=128, bk=64, threads=256, num_stages=3)``: 256 rows of x per block then fit beside it
    (1.05x cuBLAS fp16 at M = 4096, N = 57344, K = 8192 on an H100)."""
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
    scales = qw.scales.T.to(tdt).contiguous()
    # codes of at most 4 bits in float16 decode as code * s + (-(z * s)) (one fma, op/dequantize.py): that shift
    # is computed here once instead of per group in every block (per-channel scales are applied after the sums)
    offsets = zeros is not None and wt.bits <= 4 and act == "float16" and g < k
    if offsets:
        zeros = (-(scales.float() * zeros.T.to(tdt).float())).to(tdt).contiguous()
    elif zeros is not None:
        zeros = zeros.T.to(tdt).contiguous()
    # a float type decodes raw (value * 2^-e, one fma per pair fewer) when its scales can carry 2^e: exact (a power
    # of two) unless a scale overflows
    e = quant.raw_scale_exponent(wt, act)
    prescaled = False
    if e is not None and g < k and (zeros is None or offsets):
        big = (scales.float() * 2.0 ** e).to(tdt)
        if bool(torch.isfinite(big).all()):
            scales, prescaled = big.contiguous(), True
    return PackedWeight(words, scales, zeros, wt, g, (n, k), tiles, act, target, offsets, prescaled)


def m_tile(m):
    """Rows of X per block: the smallest MMA-friendly tile holding M; 128 up to M = 511, then 256 (prefill: each
    decoded weight tile then feeds twice the MMA work, measured 1.05x cuBLAS fp16 at M = 4096 against 0.76x with
    128)."""
    for bm in (16, 32, 64):
        if m <= bm:
            return bm
    return 128 if m < 512 else 256


_KERNELS: dict = {}


def _program(m, pw: PackedWeight, tiles, split_k, split_reduce="atomic"):
    return quant_matmul_program(m, pw.shape[0], pw.shape[1], pw.dtype, pw.group_size, tiles, pw.act,
                                zero_point=pw.zeros is not None, split_k=split_k, offset=pw.offsets,
                                split_reduce=split_reduce, prescaled=pw.prescaled)


def block_tiles(m, pw: PackedWeight, split_k):
    """The block tile for M rows of x: the packing's (bn, bk, threads) with the most activation rows up to
    `m_tile(m)` and the most pipeline stages that fit in shared memory (a packing made for decode shapes, with a
    long k step, leaves less room for rows of x)."""
    t = pw.tiles
    target = env.resolve_target(pw.target)
    limit = block_shared_memory_limit(compute_capability(target)[0])
    top = m_tile(m)
    for bm in [b for b in (256, 128, 64, 32, 16) if b <= top]:
        # registers per thread: the float32 accumulator, the decoded weight tile (16-bit pairs), addresses and
        # temporaries; past ~240 ptxas serializes the warpgroup MMAs
        if bm > 16 and t.bn * bm // t.threads + t.bn * t.bk // (2 * t.threads) + 48 > 240:
            continue
        for stages in ((t.num_stages,) if bm <= 32 else ()) + (3, 2):
            tiles = QuantTiles(t.bn, bm, t.bk, t.threads, stages)
            if shared_memory_bytes(_program(m, pw, tiles, split_k), target) <= limit:
                return tiles
    raise ValueError(f"quant_matmul: no block tile of the packing {t} fits in shared memory; pack the weight with "
                     f"smaller tiles")


def _kernel(m, pw: PackedWeight, split_k=1, split_reduce="atomic"):
    """The compiled program and its block tile for M rows."""
    t = pw.tiles
    bm = m_tile(m)
    key = (m, pw.shape, str(pw.dtype), pw.group_size, pw.zeros is not None, pw.offsets, pw.prescaled, pw.act, t, bm,
           pw.target, split_k, split_reduce)
    if key not in _KERNELS:
        tiles = block_tiles(m, pw, split_k)
        prog = _program(m, pw, tiles, split_k, split_reduce)
        # atomic split-K adds into a zeroed float32 Y the caller passes; otherwise Y is allocated and returned
        atomic = split_k > 1 and split_reduce == "atomic"
        _KERNELS[key] = (compile_kernel(prog, out_idx=None if atomic else -1, target=pw.target), tiles)
    return _KERNELS[key]


_WORKSPACES: dict = {}


def _workspace(x, n, tiles: QuantTiles):
    """The last-block split-K's float32 sums (M, N) and arrival counters (M tiles, N tiles), zeroed once and kept
    per (device, stream, shape): every launch leaves them at zero again. Launches on one stream run in order, so
    they never share it concurrently; a launch on another stream gets its own."""
    m = x.shape[0]
    stream = torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0
    key = (x.device, stream, m, n, tiles.bm, tiles.bn)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = (torch.zeros(m, n, device=x.device, dtype=torch.float32),
                            torch.zeros(-(-m // tiles.bm), -(-n // tiles.bn), device=x.device, dtype=torch.int32))
    return _WORKSPACES[key]


def auto_split_k(m, pw: PackedWeight, device) -> int:
    """Blocks per output tile for M rows: 1 when the output tiles fill the GPU's multiprocessors, else enough
    splits of K to (about) fill them, at most 4 and at least 2 k tiles each (measured on an H100 at N = K = 8192:
    int4 M = 1 from 2.3x to 2.5x cuBLAS fp16)."""
    tiles = -(-pw.shape[0] // pw.tiles.bn) * -(-m // m_tile(m))
    sms = _multiprocessors(device)
    if tiles >= sms:
        return 1
    return max(1, min(4, -(-sms // tiles), -(-pw.shape[1] // pw.tiles.bk) // 2))


_SMS: dict = {}


def _multiprocessors(device) -> int:
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device]


def quant_matmul(x, pw: PackedWeight, split_k=None, split_reduce="last_block"):
    """Y = x @ W^T for x (M, K) and a PackedWeight W (N, K): Y (M, N) in x's dtype. `split_k` > 1 shares each
    output tile's K among that many blocks, for problems with fewer output tiles than the GPU has
    multiprocessors (None: `auto_split_k` chooses). Their float32 partial sums meet in a workspace kept by this
    module, and the last block of each tile writes Y (`split_reduce="last_block"`: one kernel), or they are added
    atomically into a zeroed float32 Y that is cast afterwards (`"atomic"`: three kernels)."""
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
    if split_k is None:
        split_k = auto_split_k(x.shape[0], pw, x.device) if x.is_cuda else 1
    if not isinstance(split_k, int) or split_k < 1:
        raise ValueError(f"quant_matmul: split_k must be a positive int, got {split_k!r}")
    check_split_reduce(split_reduce)  # before any compilation
    x = x.contiguous()
    zeros = pw.zeros if pw.zeros is not None else pw.scales[:1]
    kernel, tiles = _kernel(x.shape[0], pw, split_k, split_reduce)
    if split_k == 1:
        return kernel(x, pw.words, pw.scales, zeros)
    if split_reduce == "last_block":
        return kernel(x, pw.words, pw.scales, zeros, *_workspace(x, n, tiles))
    y = torch.zeros(x.shape[0], n, device=x.device, dtype=torch.float32)
    kernel(x, pw.words, pw.scales, zeros, y)
    return y.to(x.dtype)
