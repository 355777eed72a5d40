"""The sm90 half of T.gemm: warpgroup MMA (``wgmma.mma_async``), B read from shared memory, A from shared memory
or from a register fragment (the "rs" form).

Selected by `GemmOp` on targets with wgmma (sm_90a only) when the block is whole warpgroups and the tiles fit
(see `plan`). Each warpgroup owns a (wm, wn) slab of C; per k step it issues one ``m64nNk16`` (16-bit inputs) or
``m64nNk32`` (8-bit inputs, K-major only: `tilex.op.mma_types`) per 64 rows (N <= 256 per instruction). Shared operand tiles get the canonical swizzled layouts (`tilex.layout.wgmma`), K-major or MN-major
(transposed in the instruction) as the program stores them; an A fragment gets the wgmma A register layout
(`make_wgmma_a_fragment`, replicated over the warpgroups that split N).
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
    if not supports(target, WGMMA) or config.get("disable_wgmma", False):
        return None
    if getattr(op, "swapped", False):
        return plan(op.transposed(), threads, target)  # the MMAs it runs (GemmOp.swapped)
    a_ok = is_shared(op.A.buffer) or (is_fragment(op.A.buffer) and not op.trans_a)
    ty = mma_types(op.A.buffer.dtype, op.B.buffer.dtype, op.C.buffer.dtype)
    if threads % 128 or ty is None or not (a_ok and is_shared(op.B.buffer)):
        return None
    if ty.eight_bit and (op.trans_a or not op.trans_b):
        return None
    for r in (op.A, op.B):  # operands must be whole 2-d (trailing) tiles of their buffers
        if [int(s) for s in r.buffer.shape[-2:]] != [int(e) for e in r.extents[-2:]]:
            return None
    groups = threads // 128
    options = []
    for wg_m in range(groups, 0, -1):
        if groups % wg_m:
            continue
        wg_n = groups // wg_m
        if op.M % (64 * wg_m) == 0 and op.N % (8 * wg_n) == 0:
            options.append((wg_m, wg_n))
    if not options or op.K % ty.k_step:
        return None
    wg_m, wg_n = options[0]
    wm, wn = op.M // wg_m, op.N // wg_n
    n_inst = wn
    while n_inst > 0 and (n_inst > 256 or wn % n_inst or (ty.family == "i8" and n_inst not in _I8_N)):
        n_inst -= 8
    if not _operand_ok(op) or n_inst <= 0:
        return None
    return WgmmaPlan(wg_m, wg_n, wm, wn, n_inst)


def _operand_dims(op):
    """[(region, rows, cols, k_major)] with `cols` the contiguous dimension of each operand tile."""
    a_rows, a_cols = (op.K, op.M) if op.trans_a else (op.M, op.K)
    b_rows, b_cols = (op.N, op.K) if op.trans_b else (op.K, op.N)
    return [(op.A, a_rows, a_cols, not op.trans_a), (op.B, b_rows, b_cols, op.trans_b)]


def _smem_operands(op):
    """The `_operand_dims` entries of the operands read from shared memory (B, and A unless it is a fragment)."""
    return [d for d in _operand_dims(op) if is_shared(d[0].buffer)]


def _operand_ok(op):
    for region, rows, cols, k_major in _smem_operands(op):
        s = wgmma_swizzle_bytes(rows, cols, tvm.DataType(str(region.buffer.dtype)).bits)
        if s == 0:
            return False
        if not k_major and cols % (s // 2) and cols > s // 2:
            return False
    return True


def operand_layouts(op):
    out = {}
    for region, rows, cols, _ in _smem_operands(op):
        buf = region.buffer
        lay = make_wgmma_operand_layout(rows, cols, tvm.DataType(str(buf.dtype)).bits)
        shape = [int(s) for s in buf.shape]
        if len(shape) > 2:
            lay = lay.expand(shape[:-2])
        out[buf] = lay
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
    (a_reg, a_rows, a_cols, a_kmaj), (b_reg, b_rows, b_cols, b_kmaj) = _operand_dims(op)
    a_in_regs = is_fragment(op.A.buffer)
    sb = wgmma_swizzle_bytes(b_rows, b_cols, bits)
    c_loc = ctx.remap[op.C.buffer]
    ki, mb, nb = (tirx.Var(n, "int32") for n in ("wk", "wm", "wn"))

    def desc(region, swz, k_major, rows, coord):
        buf, idx = ctx.physical_index(region.buffer, region.index(coord))
        # a warp-specialized consumer reads stages that only TMA writes (ordered by mbarriers): its pointer must not
        # count as a generic read, or TVM's ThreadSync wants barriers inside the consumer's branch
        mask = 0 if ctx.async_mma in (ASYNC_MMA_WS, ASYNC_MMA_WS_SYNC, ASYNC_MMA_WS_DEFER) else "r"
        ptr = buf.access_ptr(mask, offset=ctx.analyzer.simplify(idx[0]), extent=1)
        lbo = 16 if k_major else rows * swz  # MN-major: the next plane of the contiguous dimension
        return intrin.wgmma_desc(ptr, lbo, 8 * swz, swz)

    m_at = row0 + mb * 64
    n_at = col0 + nb * p.n_inst
    b_coord = [ki * kstep, n_at] if not b_kmaj else [n_at, ki * kstep]
    db = desc(op.B, sb, b_kmaj, b_rows, b_coord)
    acc = c_loc.access_ptr("rw", offset=mb * (p.wn // 2) + nb * (p.n_inst // 2), extent=p.n_inst // 2)
    if a_in_regs:
        # this thread's four registers of A for (64-row block mb, k-step ki): see make_wgmma_a_fragment
        per = 128 // bits
        a_ptr = ctx.remap[op.A.buffer].access_ptr("r", offset=(mb * (op.K // kstep) + ki) * per, extent=per)
        if ty.eight_bit:
            inst = intrin.wgmma_rs_8bit(p.n_inst, ty.family, ty.ta, ty.tb, acc, a_ptr, db, 1)
        else:
            inst = intrin.wgmma_rs(p.n_inst, ty.family, not b_kmaj, acc, a_ptr, db, 1)
    else:
        sa = wgmma_swizzle_bytes(a_rows, a_cols, bits)
        a_coord = [m_at, ki * kstep] if a_kmaj else [ki * kstep, m_at]
        da = desc(op.A, sa, a_kmaj, a_rows, a_coord)
        if ty.eight_bit:  # K-major only (plan): no transpose immediates
            inst = intrin.wgmma_ss_8bit(p.n_inst, ty.family, ty.ta, ty.tb, acc, da, db, 1)
        else:
            inst = intrin.wgmma_ss(p.n_inst, ty.family, not a_kmaj, not b_kmaj, acc, da, db, 1)
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
