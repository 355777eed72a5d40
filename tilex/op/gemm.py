"""`T.gemm`: C += A @ B on tensor cores, for A and B each in shared memory or in a register fragment
(T.alloc_fragment: A "rs", B "sr", both "rr"), and C in a register fragment.

sm90 (sm_90a) path: warpgroup MMA, see gemm_wgmma.py (B in shared memory; the dtypes `tilex.op.mma_types` gives a
wgmma). sm80+ path (every target without wgmma, Blackwell included: `tilex.ir.hardware.ARCH_FEATURES`, and on sm90
what wgmma does not take: a B fragment, float32 / int4 operands, blocks that are not whole warpgroups): each warp
owns a (wm, wn) sub-tile of C; per k step it loads A and B with ``ldmatrix`` from swizzled shared memory (float32
operands stored MN-major element by element; a fragment operand is used in place) and issues ``mma.sync.m16n8k16``
(fp16/bf16 in, fp32 or, for fp16 in, fp16 accumulate), ``m16n8k8`` (float32 in as tf32, fp32 accumulate),
``m16n8k32`` (8-bit in: int8/uint8 -> int32, float8 -> fp32) or ``m16n8k64`` (int4/uint4 -> int32). Layout
inference pins the swizzled shared layouts of the shared operands, the instruction's register layouts of fragment
operands and the accumulator fragment of C at the strict level; copies and T.Parallel loops that fill a fragment
operand then follow its layout. An A fragment used with transpose_A is stored (K, M): it gets the transpose of the
A register layout (element (k, m) in the register that holds (m, k) of the (M, K) operand), so the instruction
reads it exactly as an untransposed one, whatever the dtype.
"""
from __future__ import annotations

import enum

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.visit import bits
from tilex.ir.hardware import LDMATRIX, MMA_SYNC, MMA_SYNC_FP8, supports, unsupported_message
from tilex.layout import (Fragment, make_mma_a_fragment, make_mma_accumulator_fragment, make_mma_b_fragment,
                          make_swizzled_layout)
from tilex.op import gemm_wgmma
from tilex.op.mma_types import SUPPORTED, mma_types
from tilex.op.base import InferLevel, TileOp, TileOpError, is_fragment, is_shared
from tilex.op.partition import analyzer_scope, static_shape
from tilex.op.region import READ, READ_WRITE, Region, to_region
from tilex.op.registry import register_tile_op


class GemmWarpPolicy(enum.IntEnum):
    """How the warps of a block split the C tile (as in TileLang)."""

    Square = 0
    FullRow = 1
    FullCol = 2


def gemm_call(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False,
              k_pack=1, wg_wait=0, swapped=False):
    """The ``tilex.gemm`` call. `swapped` (set by transform.register_operand, not by programs): B is a register
    fragment and the tensor cores compute C^T = B^T-side x A^T (see GemmOp.swapped)."""
    if k_pack != 1:
        raise NotImplementedError(f"T.gemm(k_pack={k_pack!r}) is not supported by tilex (ROCm only)")
    if wg_wait != 0:
        raise NotImplementedError(f"T.gemm(wg_wait={wg_wait!r}) is not supported by tilex: it waits for its "
                                  f"warpgroup MMAs itself")
    return tirx.call_intrin("handle", "tilex.gemm", to_region(A).to_call(READ), to_region(B).to_call(READ),
                            to_region(C).to_call(READ_WRITE), int(bool(transpose_A)), int(bool(transpose_B)),
                            int(policy), int(bool(clear_accum)), int(bool(swapped)))


def partition_warps(m, n, num_warps, policy=GemmWarpPolicy.Square):
    """(warps along M, warps along N) for an (m, n) C tile: each warp tile must be a multiple of 16 x 8."""
    options = []
    for wm in range(1, num_warps + 1):
        if num_warps % wm:
            continue
        wn = num_warps // wm
        if m % (16 * wm) == 0 and n % (8 * wn) == 0:
            options.append((wm, wn))
    if not options:
        raise TileOpError(f"T.gemm: a {m}x{n} C tile cannot be split over {num_warps} warps "
                          f"(each warp needs a multiple of 16x8); change the tile or thread count")
    if policy == GemmWarpPolicy.FullRow:
        return max(options, key=lambda o: o[0])
    if policy == GemmWarpPolicy.FullCol:
        return max(options, key=lambda o: o[1])
    # Square: most balanced warp tile, ties to more warps along M
    return min(options, key=lambda o: (abs(m // o[0] - n // o[1]), -o[0]))


def a_fragment_layout(m, n, k, threads, target, policy=GemmWarpPolicy.Square, dtype="float16",
                      transpose_B=True):
    """The Fragment T.gemm gives an (m, k) A operand held in registers, for an (m, n) C tile computed by `threads`
    threads on `target` (B of shape (n, k) with `transpose_B`, else (k, n), in shared memory): what a program that
    fills such a fragment itself (T.dequantize's packed weights) must lay its data out for."""
    a = tirx.decl_buffer((m, k), dtype, "A", scope="local.fragment")
    b = tirx.decl_buffer((n, k) if transpose_B else (k, n), dtype, "B", scope="shared.dyn")
    c = tirx.decl_buffer((m, n), "float32", "C", scope="local.fragment")
    op = GemmOp(to_region(a), to_region(b), to_region(c), False, transpose_B, policy)
    wm, wn = op._check(threads)
    wg = gemm_wgmma.plan(op, threads, target)
    if wg is not None:
        return gemm_wgmma.a_fragment_layout(op, wg)
    return make_mma_a_fragment(m, k, wm, wn, bits(a.dtype))


@register_tile_op("tilex.gemm")
class GemmOp(TileOp):
    """``C += A @ B``. A B fragment the program writes is the mma.sync B operand in registers
    (`make_mma_b_fragment`, as TileLang's "sr" gemm). `swapped`: B is a register fragment (N, K) (transpose_B) that
    transform.register_operand made of a shared tile, and A a shared (M, K) tile; the MMAs compute C^T (N x M) =
    B A^T on wgmma with B as their register operand, and C's layout is the transposed accumulator, so C[i, j] is
    the register the instruction writes for (j, i)."""

    def __init__(self, A: Region, B: Region, C: Region, trans_a=False, trans_b=False, policy=0, clear_accum=False,
                 swapped=False):
        self.A, self.B, self.C = A, B, C
        self.trans_a, self.trans_b = bool(trans_a), bool(trans_b)
        self.policy = GemmWarpPolicy(policy)
        self.clear_accum = bool(clear_accum)
        self.swapped = bool(swapped)
        a = static_shape(A.shape, "T.gemm A")
        b = static_shape(B.shape, "T.gemm B")
        c = static_shape(C.shape, "T.gemm C")
        if len(a) != 2 or len(b) != 2 or len(c) != 2:
            raise TileOpError(f"T.gemm expects 2-d tiles, got A{a} B{b} C{c}")
        self.M, self.K = (a[1], a[0]) if self.trans_a else (a[0], a[1])
        kb, self.N = (b[1], b[0]) if self.trans_b else (b[0], b[1])
        if kb != self.K or c != [self.M, self.N]:
            raise TileOpError(
                f"T.gemm shape mismatch: A{a}{'^T' if self.trans_a else ''} x B{b}{'^T' if self.trans_b else ''} "
                f"-> C{c} (M={self.M}, N={self.N}, K={self.K}, B gives K={kb})")

    @classmethod
    def from_call(cls, call):
        r = [Region.from_call(x) for x in call.args[:3]]
        flags = [int(x.value) for x in call.args[3:8]]
        return cls(*r, *flags)

    def transposed(self):
        """The gemm the tensor cores run for a swapped one: A' = B (a fragment, M' x K), B' = A (shared, N' x K,
        transpose_B), C' (M' x N') a stand-in fragment sharing C's registers."""
        if not (self.trans_b and not self.trans_a):
            raise TileOpError(f"{self.describe()}: a swapped gemm needs transpose_B=True and transpose_A=False")
        c = self.C.buffer
        ct = tirx.decl_buffer((self.N, self.M), str(c.dtype), f"{c.name}_T", scope=str(c.scope()))
        return GemmOp(self.B, self.A, Region.full(ct), False, True, self.policy, self.clear_accum)

    def buffers(self):
        return [self.A.buffer, self.B.buffer, self.C.buffer]

    def reads_writes(self, buffer):
        if buffer.same_as(self.C.buffer):
            return True, True  # accumulates (a cleared accumulator may still be a block of C)
        return True, False

    def takes_shared(self, buffer):
        return not buffer.same_as(self.C.buffer) and not self.swapped

    def describe(self):
        return f"T.gemm({self.A}, {self.B}, {self.C})"

    def _check(self, threads):
        a, b, c = self.A.buffer, self.B.buffer, self.C.buffer
        if not is_fragment(c):
            raise TileOpError(f"T.gemm: C ('{c.name}') must be a fragment (T.alloc_fragment), got scope {c.scope()}")
        if is_fragment(b):
            b_shape = [self.N, self.K] if self.trans_b else [self.K, self.N]
            if [int(s) for s in b.shape] != b_shape:
                raise TileOpError(f"T.gemm: a B fragment must be used whole as a {b_shape[0]}x{b_shape[1]} tile, "
                                  f"got {b.name}{list(b.shape)}")
        elif not is_shared(b):
            raise TileOpError(f"T.gemm: B ('{b.name}') in scope '{b.scope()}' is not supported; put it in shared "
                              f"memory (T.alloc_shared) or a register fragment (T.alloc_fragment)")
        if is_fragment(a):
            a_shape = [self.K, self.M] if self.trans_a else [self.M, self.K]
            if [int(s) for s in a.shape] != a_shape:
                raise TileOpError(f"T.gemm: an A fragment must be used whole as a {a_shape[0]}x{a_shape[1]} tile, "
                                  f"got {a.name}{list(a.shape)}")
        elif not is_shared(a):
            raise TileOpError(f"T.gemm: A ('{a.name}') in scope '{a.scope()}' is not supported; put it in shared "
                              f"memory (T.alloc_shared) or a register fragment (T.alloc_fragment)")
        ty = self.types()
        if ty.k_major_only:
            # a transposed A fragment is only a register layout (a_operand_fragment): the registers hold the
            # instruction's K-major operand either way
            if (self.trans_a and not is_fragment(a)) or not self.trans_b:
                raise TileOpError(
                    f"{self.describe()}: {bits(a.dtype)}-bit operands ({a.dtype} x {b.dtype}) must be K-major: "
                    f"store A as (M, K) = ({self.M}, {self.K}) and B as (N, K) = ({self.N}, {self.K}) with "
                    f"transpose_B=True (the tensor cores cannot transpose {bits(a.dtype)}-bit operands); got "
                    f"transpose_A={self.trans_a}, transpose_B={self.trans_b}")
        if self.K % ty.k_step:
            raise TileOpError(f"T.gemm: K tile {self.K} must be a multiple of {ty.k_step} for {a.dtype} inputs")
        if threads % 32:
            raise TileOpError(f"T.gemm needs whole warps, the kernel has {threads} threads")
        return partition_warps(self.M, self.N, threads // 32, self.policy)

    def types(self):
        """The instruction family of the operand/accumulator dtypes (`tilex.op.mma_types`); TileOpError if none."""
        a, b, c = self.A.buffer, self.B.buffer, self.C.buffer
        ty = mma_types(a.dtype, b.dtype, c.dtype)
        if ty is None:
            raise TileOpError(f"T.gemm: unsupported dtypes A={a.dtype}, B={b.dtype}, C={c.dtype}; "
                              f"supported: {SUPPORTED}")
        return ty

    def infer_layout(self, ctx, level):
        if level != InferLevel.STRICT:
            return {}
        if self.swapped:
            return self._infer_swapped(ctx, level)
        wm, wn = self._check(ctx.threads)
        c = self.C.buffer
        if [int(s) for s in c.shape] != [self.M, self.N]:
            raise TileOpError(f"T.gemm: C must be a whole {self.M}x{self.N} fragment, got {c.name}{list(c.shape)}")
        a_frag = is_fragment(self.A.buffer)
        wg = gemm_wgmma.plan(self, ctx.threads, ctx.target)
        if wg is not None:
            out = gemm_wgmma.operand_layouts(self)
            out[c] = gemm_wgmma.accumulator_layout(self, wg)
            if a_frag:
                a_lay = gemm_wgmma.a_fragment_layout(self, wg)
                out[self.A.buffer] = transpose_fragment(a_lay) if self.trans_a else a_lay
            return out
        self._require_mma_sync(ctx.target)
        out = {}
        if a_frag:
            a_lay = make_mma_a_fragment(self.M, self.K, wm, wn, bits(self.A.buffer.dtype))
            out[self.A.buffer] = transpose_fragment(a_lay) if self.trans_a else a_lay
        if is_fragment(self.B.buffer):
            b_lay = make_mma_b_fragment(self.K, self.N, wm, wn, bits(self.B.buffer.dtype))
            out[self.B.buffer] = transpose_fragment(b_lay) if self.trans_b else b_lay
        for r in (self.A, self.B):
            buf = r.buffer
            if is_shared(buf) and ctx.layout_map.get(buf) is None and buf not in out:
                shape = [int(s) for s in buf.shape]
                lay = make_swizzled_layout(shape[-2], shape[-1], tvm.DataType(str(buf.dtype)).bits)
                if len(shape) > 2:
                    lay = lay.expand(shape[:-2])
                out[buf] = lay
        out[c] = make_mma_accumulator_fragment(self.M, self.N, wm, wn)
        return out

    def _infer_swapped(self, ctx, level):
        t = self.transposed()
        if gemm_wgmma.plan(t, ctx.threads, ctx.target) is None:
            raise TileOpError(f"{self.describe()}: a swapped gemm runs on warpgroup MMAs only")
        out = t.infer_layout(ctx, level)
        acc = out.pop(t.C.buffer)
        out[self.C.buffer] = transpose_fragment(acc)
        return out

    def lower(self, ctx):
        if self.swapped:
            t = self.transposed()
            wg = gemm_wgmma.plan(t, ctx.threads, ctx.target)
            # the stand-in C' is C's register array under the accumulator layout
            ctx.layout_map[t.C.buffer] = gemm_wgmma.accumulator_layout(t, wg)
            ctx.remap[t.C.buffer] = ctx.remap[self.C.buffer]
            return t.lower(ctx)
        wm_n, wn_n = self._check(ctx.threads)
        wg = gemm_wgmma.plan(self, ctx.threads, ctx.target)
        if wg is not None:
            return tirx.SeqStmt(self._clear(ctx) + gemm_wgmma.lower(self, ctx, wg))
        self._require_mma_sync(ctx.target)
        return self._lower_mma(ctx, wm_n, wn_n)

    def _require_mma_sync(self, target):
        """The path without wgmma needs mma.sync and ldmatrix (sm_80+; also sm_90 without 'a' and Blackwell, whose
        native tcgen05 MMA tilex does not emit)."""
        features = (MMA_SYNC, LDMATRIX) + ((MMA_SYNC_FP8,) if self.types().family == "f8" else ())
        for feature in features:
            if not supports(target, feature):
                raise TileOpError(unsupported_message(target, feature, self.describe()))

    def _clear(self, ctx):
        if not self.clear_accum:
            return []
        z = tirx.Var("z", "int32")
        frag = ctx.layout_map[self.C.buffer]
        return [tirx.For(z, 0, frag.local_size, tirx.ForKind.UNROLLED,
                         tirx.BufferStore(ctx.remap[self.C.buffer], tirx.const(0, str(self.C.buffer.dtype)), [z]))]

    def _lower_mma(self, ctx, wm_n, wn_n):
        """sm80 path: ldmatrix from swizzled shared memory + mma.sync per warp (a fragment operand already holds
        the instruction's registers: make_mma_a_fragment / make_mma_b_fragment). In bytes, one k step of 8-bit
        (k32) or tf32 (k8) operands is laid out like one of 16-bit operands (k16): the same ldmatrix addresses, `vec`
        elements per 16-byte row. ldmatrix.trans moves 16-bit elements: tf32 operands stored MN-major are read
        element by element instead."""
        wm, wn = self.M // wm_n, self.N // wn_n
        mi_n, ni_n = wm // 16, wn // 8
        ty = self.types()
        # elements of one ldmatrix row (16 bytes) = a thread's A registers of one m16 x k-step tile (4 x 32 bits);
        # its B registers of one n8 tile are half that
        vec = 128 // bits(self.A.buffer.dtype)
        kstep = ty.k_step
        t = ctx.thread_var
        lane = tirx.floormod(t, 32)
        warp = tirx.floordiv(t, 32)
        wi = tirx.floordiv(warp, wn_n)
        wj = tirx.floormod(warp, wn_n)
        a_in_regs = is_fragment(self.A.buffer)
        b_in_regs = is_fragment(self.B.buffer)
        by_element = ty.family == "tf32"  # 32-bit elements: no transposing ldmatrix
        a_frag = tirx.decl_buffer((mi_n * vec,), self.A.buffer.dtype, "A_frag", scope="local")
        b_frag = tirx.decl_buffer((ni_n * vec // 2,), self.B.buffer.dtype, "B_frag", scope="local")
        c_loc = ctx.remap[self.C.buffer]
        ki, mi, ni, nj = (tirx.Var(n, "int32") for n in ("ki", "mi", "ni", "nj"))
        grp = tirx.floordiv(lane, 8)
        r8 = tirx.floormod(lane, 8)

        def smem_ptr(region, row, col):
            buf, idx = ctx.physical_index(region.buffer, region.index([row, col]))
            with analyzer_scope(ctx.analyzer, {t: tvm.ir.Range(0, ctx.threads)}):
                off = ctx.analyzer.simplify(idx[0])
            return buf.access_ptr("r", offset=off, extent=vec)

        def frag_ptr(buf, off):
            return buf.access_ptr("w", offset=off, extent=1)

        def element_loads(dst, count, per, index, region):
            """dst[i*per + x] = region[index(i, x)] for tile i < count, register x < per (tf32, one element a
            register: lane = 4*g + t holds row/column g and k t (+4))."""
            i, x = tirx.Var("ei", "int32"), tirx.Var("ex", "int32")
            load = ctx.load(region.buffer, region.index(index(i, x)))
            store = tirx.BufferStore(dst, load, [i * per + x])
            return tirx.For(i, 0, count, tirx.ForKind.UNROLLED, tirx.For(x, 0, per, tirx.ForKind.UNROLLED, store))

        g4, t4 = tirx.floordiv(lane, 4), tirx.floormod(lane, 4)
        # A: rows m, cols k (or the transpose in memory)
        m_base = wi * wm + mi * 16
        if a_in_regs:
            load_a = None
        elif self.trans_a and by_element:  # a0..a3 = (g, t), (g+8, t), (g, t+4), (g+8, t+4) of each m16 x k8 tile
            load_a = element_loads(a_frag, mi_n, vec, lambda i, x: [
                ki * kstep + t4 + tirx.floordiv(x, 2) * 4, wi * wm + i * 16 + g4 + tirx.floormod(x, 2) * 8], self.A)
        else:
            if not self.trans_a:
                a_ptr = smem_ptr(self.A, m_base + tirx.floormod(lane, 16),
                                 ki * kstep + tirx.floordiv(lane, 16) * vec)
                load_a = intrin.ldmatrix(4, False, frag_ptr(a_frag, mi * vec), a_ptr)
            else:
                a_ptr = smem_ptr(self.A, ki * 16 + r8 + tirx.floordiv(grp, 2) * 8,
                                 m_base + tirx.floormod(grp, 2) * 8)
                load_a = intrin.ldmatrix(4, True, frag_ptr(a_frag, mi * 8), a_ptr)
            load_a = tirx.For(mi, 0, mi_n, tirx.ForKind.UNROLLED, load_a)

        # B: two n8 tiles per ldmatrix.x4; an odd last tile uses ldmatrix.x2
        def load_b(n_base, x4, dst):
            g = grp if x4 else tirx.floormod(grp, 2)
            if not self.trans_b:
                ptr = smem_ptr(self.B, ki * 16 + r8 + tirx.floormod(g, 2) * 8, n_base + tirx.floordiv(g, 2) * 8)
            else:
                ptr = smem_ptr(self.B, n_base + r8 + tirx.floordiv(g, 2) * 8, ki * kstep + tirx.floormod(g, 2) * vec)
            return intrin.ldmatrix(4 if x4 else 2, not self.trans_b, dst, ptr)

        stmts = [] if load_a is None else [load_a]
        if b_in_regs:
            pass
        elif by_element and not self.trans_b:  # b0, b1 = (k t, n g), (k t+4, n g) of each k8 x n8 tile
            stmts.append(element_loads(b_frag, ni_n, vec // 2, lambda i, x: [
                ki * kstep + t4 + x * 4, wj * wn + i * 8 + g4], self.B))
        else:
            if ni_n // 2:
                stmts.append(tirx.For(nj, 0, ni_n // 2, tirx.ForKind.UNROLLED,
                                      load_b(wj * wn + nj * 16, True, frag_ptr(b_frag, nj * vec))))
            if ni_n % 2:
                stmts.append(load_b(wj * wn + (ni_n - 1) * 8, False, frag_ptr(b_frag, (ni_n - 1) * vec // 2)))
        if a_in_regs:  # registers of m16 tile mi, k-step ki in the fragment's local order
            a_regs = ctx.remap[self.A.buffer].access_ptr("r", offset=(mi * (self.K // kstep) + ki) * vec,
                                                         extent=vec)
        else:
            a_regs = a_frag.access_ptr("r", offset=mi * vec, extent=vec)
        c_ptr = c_loc.access_ptr("rw", offset=(mi * ni_n + ni) * 4, extent=4)
        if b_in_regs:  # registers of k-step ki, n8 tile ni in the fragment's local order (make_mma_b_fragment)
            b_regs = ctx.remap[self.B.buffer].access_ptr("r", offset=(ki * ni_n + ni) * (vec // 2),
                                                         extent=vec // 2)
        else:
            b_regs = b_frag.access_ptr("r", offset=ni * vec // 2, extent=vec // 2)
        if ty.family == "tf32":
            mma = intrin.mma_m16n8k8_tf32(c_ptr, a_regs, b_regs)
        elif ty.family == "i4":
            mma = intrin.mma_m16n8k64_i4(ty.ta, ty.tb, c_ptr, a_regs, b_regs)
        elif ty.eight_bit:
            mma = intrin.mma_m16n8k32(ty.family, ty.ta, ty.tb, c_ptr, a_regs, b_regs)
        else:
            mma = intrin.mma_m16n8k16(ty.family, c_ptr, a_regs, b_regs, half_acc=ty.half_acc)
        stmts.append(tirx.For(mi, 0, mi_n, tirx.ForKind.UNROLLED, tirx.For(ni, 0, ni_n, tirx.ForKind.UNROLLED, mma)))
        step = tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]  # both operands in registers: the MMAs
        body = tirx.For(ki, 0, self.K // kstep, tirx.ForKind.UNROLLED, step)
        allocs = ([] if a_in_regs else [tirx.AllocBuffer(a_frag)]) + ([] if b_in_regs else [tirx.AllocBuffer(b_frag)])
        out = allocs + self._clear(ctx) + [body]
        return tirx.SeqStmt(out) if len(out) > 1 else body


def transpose_fragment(frag):
    """The Fragment of a 2-d tile's transpose: element (i, j) lives where `frag` keeps (j, i)."""
    if frag.ndim != 2:
        raise TileOpError(f"transpose_fragment: a 2-d fragment is needed, got {frag}")
    rows, cols = frag.input_shape
    rep = int(frag.replicate)
    if rep > 1:
        return Fragment((cols, rows), lambda i, j, r: frag.map_thread([j, i], rep=r), lambda i, j: frag.map_index([j, i]),
                        replicate=rep)
    return Fragment((cols, rows), lambda i, j: frag.map_thread([j, i]), lambda i, j: frag.map_index([j, i]))
