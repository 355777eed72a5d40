"""`T.gemm_sp`: ``C += A @ B`` with A given 2:4 structured-sparse (TileLang's sparse GEMM): `A_sparse` holds the
kept values of A, `E` the metadata saying where they sit.

The format (TileLang's "natural" metadata, as its examples' compressors write it): along K, A's row m is cut into
groups of 4 elements (2 for 32-bit elements) of which 2 (1) are kept, in order, in ``A_sparse[m, :]``, so A_sparse
is (M, K / 2). Each group has a 4-bit metadata code, ``E`` element ``E[m, k // e_factor]`` holding ``q = bits(E) /
4`` of them, group ``g`` in bits ``4 * (g % q)`` up: for 8/16-bit elements bits 0-1 give the position (0..3) of
the first kept value in its group, bits 2-3 the second's; for 32-bit elements the position is ``(code & 3) >> 1``
(codes 0b0100 and 0b1110). ``e_factor = q * group`` elements of A share one E element (16 for float16 with int16
metadata). transpose_A / transpose_E: A_sparse is stored (K / 2, M), E (K / e_factor, M).

Lowering (`GemmSpOp.lower`): the dense A is rebuilt in registers, each thread decoding the elements it holds of
the A operand fragment T.gemm gives a register A (mma.sync's or wgmma's A layout) from A_sparse and E (read where
they are: shared or global memory), then the dense gemm runs with A from those registers (`tilex.op.gemm`). The
results are those of the dense product; the sparse tensor-core instructions (mma.sp / wgmma.sp, twice the MMA
rate) are not used.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.op.base import InferContext, InferLevel, TileOp, TileOpError, is_fragment
from tilex.op.gemm import GemmOp, GemmWarpPolicy
from tilex.op.partition import analyzer_scope, static_shape
from tilex.op.region import READ, READ_WRITE, Region, to_region
from tilex.op.registry import register_tile_op

#: element bits -> (elements kept, group size) of the structured sparsity
GROUPS = {8: (2, 4), 16: (2, 4), 32: (1, 2)}
#: metadata dtypes (bits 8, 16, 32; signed or not)
META_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32")
#: metadata bits per group
CODE_BITS = 4


def gemm_sp_call(A_sparse, E, B, C, transpose_A=False, transpose_E=False, transpose_B=False,
                 policy=GemmWarpPolicy.Square, clear_accum=False):
    """The ``tilex.gemm_sp`` call."""
    return tirx.call_intrin("handle", "tilex.gemm_sp", to_region(A_sparse).to_call(READ), to_region(E).to_call(READ),
                            to_region(B).to_call(READ), to_region(C).to_call(READ_WRITE), int(bool(transpose_A)),
                            int(bool(transpose_E)), int(bool(transpose_B)), int(policy), int(bool(clear_accum)))


def e_factor(a_dtype, e_dtype) -> int:
    """How many elements of A one metadata element describes (``bits(E) / 4`` groups)."""
    bits_a = tvm.DataType(str(a_dtype)).bits
    return tvm.DataType(str(e_dtype)).bits // CODE_BITS * GROUPS[bits_a][1]


@register_tile_op("tilex.gemm_sp")
class GemmSpOp(TileOp):
    """``C += A @ B`` with A from its 2:4-compressed values and metadata (see the module docstring). `gemm` is the
    dense T.gemm it runs: A a stand-in (M, K) fragment (`dense`) whose registers `lower` fills."""

    def __init__(self, A: Region, E: Region, B: Region, C: Region, trans_a=False, trans_e=False, trans_b=False,
                 policy=0, clear_accum=False):
        self.A, self.E, self.B, self.C = A, E, B, C
        self.trans_a, self.trans_e, self.trans_b = bool(trans_a), bool(trans_e), bool(trans_b)
        a_dt, e_dt, b_dt = str(A.buffer.dtype), str(E.buffer.dtype), str(B.buffer.dtype)
        bits = tvm.DataType(a_dt).bits
        if bits not in GROUPS or a_dt != b_dt:
            raise TileOpError(f"{self.describe()}: A and B must have one dtype of 8, 16 or 32 bits (2:4 sparsity; "
                              f"1:2 for 32-bit), got A={a_dt}, B={b_dt}")
        if e_dt not in META_DTYPES:
            raise TileOpError(f"{self.describe()}: the metadata E must be one of {', '.join(META_DTYPES)}, got {e_dt}")
        a = static_shape(A.shape, "T.gemm_sp A_sparse")
        e = static_shape(E.shape, "T.gemm_sp E")
        c = static_shape(C.shape, "T.gemm_sp C")
        if len(a) != 2 or len(e) != 2 or len(c) != 2:
            raise TileOpError(f"{self.describe()}: expects 2-d tiles, got A_sparse{a} E{e} C{c}")
        self.M, half = (a[1], a[0]) if self.trans_a else (a[0], a[1])
        self.K = 2 * half
        self.kept, self.group = GROUPS[bits]
        self.codes_per_e = tvm.DataType(e_dt).bits // CODE_BITS
        ef = self.codes_per_e * self.group
        want_e = [self.K // ef, self.M] if self.trans_e else [self.M, self.K // ef]
        if self.K % ef or e != want_e:
            raise TileOpError(f"{self.describe()}: for A_sparse{a} ({'(K/2, M)' if self.trans_a else '(M, K/2)'}: "
                              f"M={self.M}, K={self.K}) the {e_dt} metadata E must be "
                              f"{'(K/%d, M)' % ef if self.trans_e else '(M, K/%d)' % ef} = {tuple(want_e)}, got "
                              f"{tuple(e)}")
        for r, what in ((A, "A_sparse"), (E, "E")):
            if is_fragment(r.buffer):
                raise TileOpError(f"{self.describe()}: {what} ('{r.buffer.name}') in registers is not supported; put "
                                  f"it in shared memory (T.alloc_shared) or read it from global memory")
        self.dense = tirx.decl_buffer((self.M, self.K), a_dt, f"{A.buffer.name}_dense", scope="local.fragment")
        try:
            self.gemm = GemmOp(Region.full(self.dense), B, C, False, trans_b, policy, clear_accum)
        except TileOpError as err:
            raise TileOpError(f"{self.describe()}: {err}") from None

    @classmethod
    def from_call(cls, call):
        r = [Region.from_call(x) for x in call.args[:4]]
        flags = [int(x.value) for x in call.args[4:9]]
        return cls(*r, *flags)

    def buffers(self):
        return [self.A.buffer, self.E.buffer, self.B.buffer, self.C.buffer]

    def reads_writes(self, buffer):
        if buffer.same_as(self.C.buffer):
            return True, True
        return True, False

    def takes_shared(self, buffer):
        return not buffer.same_as(self.C.buffer)

    def describe(self):
        return f"T.gemm_sp({self.A}, {self.E}, {self.B}, {self.C})"

    def infer_layout(self, ctx, level):
        if level != InferLevel.STRICT:
            return {}
        out = self._dense_layouts(ctx)
        out.pop(self.dense, None)
        return out

    def _dense_layouts(self, ctx):
        try:
            return self.gemm.infer_layout(ctx, InferLevel.STRICT)
        except TileOpError as err:
            raise TileOpError(f"{self.describe()}: {err}") from None

    def lower(self, ctx):
        frag = self._dense_layouts(InferContext(ctx.layout_map, ctx.threads, ctx.target, ctx.analyzer))[self.dense]
        if len(frag.local_shape) != 1:
            raise TileOpError(f"{self.describe()}: the A operand layout {frag} is not a flat register array")
        regs = tirx.decl_buffer((frag.local_size,), str(self.dense.dtype), self.dense.name, scope="local")
        ctx.layout_map[self.dense] = frag
        ctx.remap[self.dense] = regs
        t = ctx.thread_var
        lv = tirx.Var("sp_l", "int32")
        with analyzer_scope(ctx.analyzer, {t: tvm.ir.Range(0, ctx.threads), lv: tvm.ir.Range(0, frag.local_size)}):
            m, k = (ctx.analyzer.simplify(x) for x in frag.inverse().map([t, lv])[:2])
            value = self._decode(ctx, m, k)
        fill = tirx.For(lv, 0, frag.local_size, tirx.ForKind.UNROLLED, tirx.BufferStore(regs, value, [lv]))
        return tirx.SeqStmt([tirx.AllocBuffer(regs), fill, self.gemm.lower(ctx)])

    def _decode(self, ctx, m, k):
        """A[m, k] of the dense A: its group's metadata code picks the kept value, or 0."""
        g = tirx.floordiv(k, self.group)
        pos = tirx.floormod(k, self.group)
        q = self.codes_per_e
        e_at = [tirx.floordiv(g, q), m] if self.trans_e else [m, tirx.floordiv(g, q)]
        word = tirx.Cast("int32", ctx.load(self.E.buffer, self.E.index(e_at)))
        code = tirx.bitwise_and(tirx.shift_right(word, tirx.floormod(g, q) * CODE_BITS), 0xF)
        zero = tirx.const(0, str(self.dense.dtype))

        def kept(slot):
            col = g * self.kept + slot
            return ctx.load(self.A.buffer, self.A.index([col, m] if self.trans_a else [m, col]))

        if self.kept == 1:  # 32-bit elements: 1 of 2, position (code & 3) >> 1
            where = tirx.shift_right(tirx.bitwise_and(code, 3), 1)
            return tirx.Select(pos == where, kept(0), zero)
        first = tirx.bitwise_and(code, 3)
        second = tirx.bitwise_and(tirx.shift_right(code, 2), 3)
        return tirx.Select(pos == first, kept(0), tirx.Select(pos == second, kept(1), zero))
