"""The sm90 half of T.gemm: warpgroup MMA (``wgmma.mma_async``), B read from shared memory, A from shared memory
or from a register fragment (the "rs" form).

Selected by `GemmOp` on targets with wgmma (sm_90a only) when the block is whole warpgroups and the tiles fit
(see `plan`; `refusal` says why not). Each warpgroup owns a (wm, wn) slab of C; per k step it issues one
``m64nNk16`` (16-bit inputs: float32 or, for float16 inputs, float16 accumulators) or ``m64nNk32`` (8-bit inputs,
K-major only: `tilex.op.mma_types`) per 64 rows (N <= 256 per instruction). Shared operand buffers get the
canonical swizzled layouts (`tilex.layout.wgmma`) of their two trailing dimensions, whatever part of them a gemm
reads; K-major or MN-major (transposed in the instruction) as the program stores them; an A fragment gets the
wgmma A register layout (`make_wgmma_a_fragment`, replicated over the warpgroups that split N), transposed for a
(K, M) fragment with transpose_A (GemmOp.infer_layout): the registers hold the K-major operand the instruction
reads either way.

An operand may be any box of its buffer's two trailing dimensions (a stage ``KV[s]`` of a multi-buffered tile, a
column slice ``KV[:, 64:128]``): its descriptors start at the physical address of the box's element under the
buffer's layout. That is a valid descriptor start where the box keeps the swizzle atoms whole: rows from a
multiple of 8, and along the contiguous dimension from a multiple of the k step (K-major) or of one swizzle row
(MN-major, whose instructions read whole atom rows); `refusal` names any other box.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx

from tilex import config
from tilex.ir import intrin
from tilex.ir.hardware import WGMMA, supports
from tilex.ir.names import (ASYNC_MMA_CP_ASYNC, ASYNC_MMA_CP_ASYNC_SYNC, ASYNC_MMA_FENCED_DEFER, ASYNC_MMA_WS,
                            ASYNC_MMA_WS_DEFER, ASYNC_MMA_WS_SYNC)
from tilex.ir.visit import storage_sync
from tilex.layout import (make_wgmma_a_fragment, make_wgmma_accumulator_fragment, make_wgmma_operand_layout,
                          wgmma_swizzle_bytes)
from tilex.op.base import is_fragment, is_shared
from tilex.op.mma_types import mma_types
from tilex.op.region import Region

#: N of one integer wgmma (PTX ISA: multiples of 8 up to 32, then of 16 up to 256); other families take every
#: multiple of 8 up to 256
_I8_N = frozenset([8, 16, 24, 32] + list(range(48, 257, 16)))


@dataclass
class WgmmaPlan:
    wg_m: int
    wg_n: int
    wm: int
    wn: int
    n_inst: int  # N of one instruction (wn split into wn // n_inst instructions)


def plan(op, threads, target):
    """A WgmmaPlan if T.gemm `op` can run on wgmma for this block/target, else None (mma.sync is used). wgmma
    exists on sm_90a only (`tilex.ir.hardware.WGMMA`): sm_90 without 'a' and Blackwell (sm_100a, sm_120a, ...)
    take the mma.sync path."""
    return _plan(op, threads, target)[0]


def refusal(op, threads, target) -> str | None:
    """Why T.gemm `op` cannot run on wgmma for this block/target (None if it can)."""
    return _plan(op, threads, target)[1]


def _plan(op, threads, target):
    """(WgmmaPlan, None) or (None, the reason there is none)."""
    if not supports(target, WGMMA):
        return None, f"the target {target} has no warpgroup MMA (sm_90a only)"
    if config.get("disable_wgmma", False):
        return None, "tilex.disable_wgmma is set"
    if getattr(op, "swapped", False):
        return _plan(op.transposed(), threads, target)  # the MMAs it runs (GemmOp.swapped)
    a, b = op.A.buffer, op.B.buffer
    if not is_shared(b):
        return None, f"B ('{b.name}') is in {b.scope()}, not in shared memory"
    if not (is_shared(a) or is_fragment(a)):
        return None, f"A ('{a.name}') must be in shared memory or a register fragment, it is in {a.scope()}"
    if threads % 128:
        return None, f"it runs on {threads} threads, not whole warpgroups of 128"
    ty = mma_types(a.dtype, b.dtype, op.C.buffer.dtype)
    if ty is None or not ty.has_wgmma:
        return None, f"no warpgroup MMA takes {a.dtype} x {b.dtype} -> {op.C.buffer.dtype}"
    if ty.k_major_only and ((op.trans_a and not is_fragment(a)) or not op.trans_b):
        return None, f"{a.dtype} operands must be K-major (transpose_A=False, transpose_B=True)"
    if is_fragment(a) and [int(s) for s in a.shape[-2:]] != [int(e) for e in op.A.extents[-2:]]:
        return None, f"an A fragment ('{a.name}') must be used whole"
    groups = threads // 128
    options = []
    for wg_m in range(groups, 0, -1):
        if groups % wg_m:
            continue
        wg_n = groups // wg_m
        if op.M % (64 * wg_m) == 0 and op.N % (8 * wg_n) == 0:
            options.append((wg_m, wg_n))
    if not options:
        return None, (f"M={op.M}, N={op.N} cannot be split over {groups} warpgroup(s) (M a multiple of 64 per "
                      f"warpgroup row, N of 8 per warpgroup column)")
    if op.K % ty.k_step:
        return None, f"K={op.K} is not a multiple of {ty.k_step}"
    wg_m, wg_n = options[0]
    wm, wn = op.M // wg_m, op.N // wg_n
    n_inst = wn
    while n_inst > 0 and (n_inst > 256 or wn % n_inst or (ty.family == "i8" and n_inst not in _I8_N)):
        n_inst -= 8
    if n_inst <= 0:
        return None, f"no instruction N divides the {wn} columns of a warpgroup"
    for t in _smem_operands(op):
        problem = _operand_problem(t, ty)
        if problem is not None:
            return None, problem
    return WgmmaPlan(wg_m, wg_n, wm, wn, n_inst), None


@dataclass(frozen=True)
class OperandTile:
    """A shared operand as the descriptors see it: its box `region` of a buffer whose two trailing dimensions
    (`rows`, `cols`: `cols` contiguous) carry the swizzled layout, `k_major` (K is the contiguous dimension) and
    the swizzle of that layout in bytes (0: none fits)."""

    region: Region
    rows: int
    cols: int
    k_major: bool
    swizzle: int

    @property
    def buffer(self):
        return self.region.buffer

    @property
    def bits(self):
        return tvm.DataType(str(self.buffer.dtype)).bits


def _operand_dims(op):
    """[(region, k_major)] of A and B; an operand's `cols` (its buffer's last dimension) is contiguous."""
    return [(op.A, not op.trans_a), (op.B, op.trans_b)]


def _operand_tile(region, k_major):
    shape = [int(s) for s in region.buffer.shape]
    rows, cols = shape[-2], shape[-1]
    bits = tvm.DataType(str(region.buffer.dtype)).bits
    return OperandTile(region, rows, cols, k_major, wgmma_swizzle_bytes(rows, cols, bits))


def _smem_operands(op):
    """The OperandTiles of the operands read from shared memory (B, and A unless it is a fragment)."""
    return [_operand_tile(r, k) for r, k in _operand_dims(op) if is_shared(r.buffer)]


def _operand_problem(t: OperandTile, ty) -> str | None:
    """Why shared operand `t` cannot be read by wgmma descriptors (None if it can)."""
    name = t.buffer.name
    if t.swizzle == 0:
        return (f"the shared tile '{name}' ({t.rows} x {t.cols} {t.buffer.dtype}) has no wgmma swizzle layout (its "
                f"rows must be a multiple of 8 and a row a multiple of 32 bytes)")
    region = t.region
    lead = region.extents[:-2]
    if len(region.extents) < 2 or any(_const(e) != 1 for e in lead):
        return f"the operand {region} must be a box of the two trailing dimensions of '{name}'"
    r0, c0 = region.mins[-2], region.mins[-1]
    er, ec = _const(region.extents[-2]), _const(region.extents[-1])
    whole = er == t.rows and ec == t.cols and _const(r0) == 0 and _const(c0) == 0
    atom_row = t.swizzle * 8 // t.bits  # elements of one swizzle row
    if whole:
        return None
    step = ty.k_step if t.k_major else atom_row
    what = "the k step" if t.k_major else "one swizzle row (an MN-major operand is read in whole atom rows)"
    if er is None or ec is None or er % 8 or not _divides(8, r0) or not _divides(step, c0) or \
            (not t.k_major and ec % atom_row):
        return (f"the operand {region} breaks the {t.swizzle}-byte swizzle atoms of '{name}': its rows must start "
                f"at a multiple of 8, and its columns start{'' if t.k_major else ' and extend'} in multiples of "
                f"{step} elements ({what})")
    return None


def _const(x):
    if isinstance(x, int):
        return x
    return int(x.value) if isinstance(x, tirx.IntImm) else None


def _divides(n, expr) -> bool:
    """Whether `expr` (an int or a PrimExpr) is provably a multiple of `n`."""
    if isinstance(expr, int):
        return expr % n == 0
    return bool(tvm.sym.Analyzer().can_prove(tirx.floormod(expr, n) == 0))


def operand_layouts(op):
    """{shared operand buffer: the wgmma swizzled layout of its two trailing dimensions (repeated over the
    leading ones)}."""
    out = {}
    for t in _smem_operands(op):
        lay = make_wgmma_operand_layout(t.rows, t.cols, t.bits)
        shape = [int(s) for s in t.buffer.shape]
        if len(shape) > 2:
            lay = lay.expand(shape[:-2])
        out[t.buffer] = lay
    return out


def accumulator_layout(op, p: WgmmaPlan):
    return make_wgmma_accumulator_fragment(op.M, op.N, p.wg_m, p.wg_n)


def a_fragment_layout(op, p: WgmmaPlan):
    """Register layout of an A fragment: the rows of each warpgroup row slab, held by that slab's wg_n warpgroups."""
    return make_wgmma_a_fragment(op.M, op.K, p.wg_m, p.wg_n, tvm.DataType(str(op.A.buffer.dtype)).bits)


def lower(op, ctx, p: WgmmaPlan):
    t = ctx.thread_var
    g = tirx.floordiv(t, 128)
    row0 = tirx.floordiv(g, p.wg_n) * p.wm
    col0 = tirx.floormod(g, p.wg_n) * p.wn
    bits = tvm.DataType(str(op.A.buffer.dtype)).bits
    ty = mma_types(op.A.buffer.dtype, op.B.buffer.dtype, op.C.buffer.dtype)
    kstep = ty.k_step
    (_, a_kmaj), (_, b_kmaj) = _operand_dims(op)
    a_in_regs = is_fragment(op.A.buffer)
    c_loc = ctx.remap[op.C.buffer]
    ki, mb, nb = (tirx.Var(n, "int32") for n in ("wk", "wm", "wn"))

    def desc(t: OperandTile, coord):
        """The descriptor of operand `t` starting at its tile element `coord` (see the module docstring)."""
        buf, idx = ctx.physical_index(t.buffer, t.region.index(coord))
        # a warp-specialized consumer reads stages that only TMA writes (ordered by mbarriers): its pointer must not
        # count as a generic read, or TVM's ThreadSync wants barriers inside the consumer's branch
        mask = 0 if ctx.async_mma in (ASYNC_MMA_WS, ASYNC_MMA_WS_SYNC, ASYNC_MMA_WS_DEFER) else "r"
        ptr = buf.access_ptr(mask, offset=ctx.analyzer.simplify(idx[0]), extent=1)
        swz = t.swizzle
        lbo = 16 if t.k_major else t.rows * swz  # MN-major: the next plane of the contiguous dimension
        return intrin.wgmma_desc(ptr, lbo, 8 * swz, swz)

    m_at = row0 + mb * 64
    n_at = col0 + nb * p.n_inst
    b_coord = [ki * kstep, n_at] if not b_kmaj else [n_at, ki * kstep]
    db = desc(_operand_tile(op.B, b_kmaj), b_coord)
    acc = c_loc.access_ptr("rw", offset=mb * (p.wn // 2) + nb * (p.n_inst // 2), extent=p.n_inst // 2)
    acc16 = ty.half_acc
    if a_in_regs:
        # this thread's four registers of A for (64-row block mb, k-step ki): see make_wgmma_a_fragment
        per = 128 // bits
        a_ptr = ctx.remap[op.A.buffer].access_ptr("r", offset=(mb * (op.K // kstep) + ki) * per, extent=per)
        if ty.eight_bit:
            inst = intrin.wgmma_rs_8bit(p.n_inst, ty.family, ty.ta, ty.tb, acc, a_ptr, db, 1)
        else:
            inst = intrin.wgmma_rs(p.n_inst, ty.family, not b_kmaj, acc, a_ptr, db, 1, half_acc=acc16)
    else:
        a_coord = [m_at, ki * kstep] if a_kmaj else [ki * kstep, m_at]
        da = desc(_operand_tile(op.A, a_kmaj), a_coord)
        if ty.eight_bit:  # K-major only (plan): no transpose immediates
            inst = intrin.wgmma_ss_8bit(p.n_inst, ty.family, ty.ta, ty.tb, acc, da, db, 1)
        else:
            inst = intrin.wgmma_ss(p.n_inst, ty.family, not a_kmaj, not b_kmaj, acc, da, db, 1, half_acc=acc16)
    body = tirx.For(nb, 0, p.wn // p.n_inst, tirx.ForKind.UNROLLED, inst)
    body = tirx.For(mb, 0, p.wm // 64, tirx.ForKind.UNROLLED, body)
    body = tirx.For(ki, 0, op.K // kstep, tirx.ForKind.UNROLLED, body)
    sync = storage_sync("shared")
    if ctx.async_mma in (ASYNC_MMA_WS_SYNC, ASYNC_MMA_WS_DEFER):
        # operands ordered by the stage's mbarrier or by the barrier before the loop: no barrier here, so the
        # consumer warpgroups run independently (one's softmax overlaps another's MMAs); a deferred gemm is
        # completed by the wait of the next gemm (transform.hopper.ws_groups)
        wait = [intrin.wgmma_wait(0)] if ctx.async_mma == ASYNC_MMA_WS_SYNC else []
        return [intrin.wgmma_fence(), body, intrin.wgmma_commit(), *wait]
    if ctx.async_mma == ASYNC_MMA_CP_ASYNC_SYNC:  # the pipeline fenced and synchronized its landed stage
        return [intrin.wgmma_fence(), body, intrin.wgmma_commit(), intrin.wgmma_wait(0)]
    if ctx.async_mma == ASYNC_MMA_FENCED_DEFER:
        return [intrin.fence_proxy_async(), sync, intrin.wgmma_fence(), body, intrin.wgmma_commit()]
    if ctx.async_mma:
        # in a software pipeline that fenced and synchronized the landed stage already: leave this k-tile's MMAs
        # in flight and wait for the previous one only; with several warpgroups, a barrier makes sure every
        # warpgroup finished reading the stage the pipeline refills next. Not with A in registers: the next
        # iteration rewrites them, which the PTX ISA allows only once the wgmma reading them has completed.
        tail = [intrin.wgmma_commit(), intrin.wgmma_wait(0 if a_in_regs else 1)]
        if ctx.threads > 128 and ctx.async_mma == ASYNC_MMA_CP_ASYNC:  # (warp-specialized loops release stages per warp instead)
            tail.append(sync)
        return [intrin.wgmma_fence(), body] + tail
    # smem written by st.shared / cp.async must be fenced into the async proxy before the barrier wgmma waits on;
    # wgmma_fence orders this thread's register writes (accumulator, A fragment) before the wgmma reads them
    return [intrin.fence_proxy_async(), sync, intrin.wgmma_fence(), body, intrin.wgmma_commit(),
            intrin.wgmma_wait(0)]
