"""`T.dequantize`: decode a tile of packed low-bit codes (`tilex.dtypes`: int1..8, uint1..8, float eXmY) into a
float16/bfloat16 register fragment, with optional per-group scales and zero-points:
``out[i, j] = (value(code[i, j]) - zero[j // g, i]) * scale[j // g, i]`` (scale and zero tiles are (groups, rows),
like the (K // g, N) tensors they come from), or with an offset instead of a zero:
``value(code[i, j]) * scale[j // g, i] + offset[j // g, i]``. With `prescaled`, a float type's scales already
carry the power of two 2^k its decode would multiply by (`tilex.ir.lowbit_chunk.raw_scale_exponent`): the codes
are decoded raw (value * 2^-k) and the scale multiply restores the value, one fma per pair fewer.

The codes are packed for the fragment they decode into: thread t's elements, in the fragment's local order, come
as consecutive 32-code *chunks* (`tilex.ir.lowbit_chunk`), b 32-bit words each; `packed` (a shared or global
buffer of 32-bit words) holds every thread's words interleaved by 16-byte vectors (`word_vector`); threads that
hold replicas of the same elements read the same words. `packed_order` gives that order for a
fragment layout, so a weight can be packed once on the host (`tilex.kernels.quant_matmul`). Each thread loads its
words with 16-byte vectors and turns every chunk into 16 registers of 16-bit pairs with LOP3/PRMT bit tricks
(`intrin.decode_chunk`), then scales pairs that share a scale with one ``hmul2`` (a ``hsub2`` first for a zero).

The fragment's layout comes from its consumer (T.gemm pins an A-operand fragment, whose locals hold (k, k+1)
pairs); elements 2m and 2m+1 of a thread must share their row and group.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx

from tilex import dtypes
from tilex.ir import intrin
from tilex.ir.visit import dtype_of
from tilex.ir.lowbit_chunk import CODES, raw_scale_exponent
from tilex.layout import Fragment
from tilex.op.base import TileOp, TileOpError, is_fragment, is_global, is_shared
from tilex.op.partition import static_shape
from tilex.op.region import READ, WRITE, Region, to_region
from tilex.op.registry import register_tile_op

def dequantize_call(packed, out, dtype, scale=None, zero=None, group_size=0, offset=None, prescaled=False):
    t = dtypes.lookup(str(dtype))
    regions = [to_region(packed).to_call(READ), to_region(out).to_call(WRITE)]
    args = [intrin.LOWBIT_KINDS[t.kind], t.bits, t.exponent, t.mantissa, int(group_size)]
    for r in (scale, zero):
        regions.append(to_region(r).to_call(READ) if r is not None else tirx.const(0, "int32"))
    tail = [to_region(offset).to_call(READ) if offset is not None else tirx.const(0, "int32"),
            tirx.const(int(bool(prescaled)), "int32")]
    return tirx.call_intrin("handle", "tilex.dequantize", *regions, *args, *tail)


def words_per_thread(frag: Fragment, bits: int) -> int:
    """32-bit words of packed codes each thread of `frag` reads."""
    return frag.local_size * bits // 32


def word_vector(wpt: int) -> int:
    """Words one load of a thread moves (16 bytes when its word count allows). The packed words interleave the
    threads by such vectors: vector v of owner thread t is at words ``(v * owners + t) * vec``, so that the
    threads of a warp read consecutive 16-byte vectors (no shared-memory bank conflicts)."""
    return 4 if wpt % 4 == 0 else 2 if wpt % 2 == 0 else 1


def packed_order(frag: Fragment) -> np.ndarray:
    """(threads // replicate, local_size) array: the row-major flat index into the fragment's tile of the element
    each (owner thread, local) holds, in the order `T.dequantize` reads packed codes: owner thread by owner
    thread, each thread's elements in local order (chunk after chunk)."""
    shape = [int(s) for s in frag.input_shape]
    grid = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    flat_ix = [g.reshape(-1) for g in grid]
    thread, local = frag.map_numpy(*flat_ix, rep=0)
    local = local[0] if len(local) == 1 else np.ravel_multi_index(local, frag.local_shape)
    owners = frag.thread_extent // int(frag.replicate)
    order = np.full((owners, frag.local_size), -1, dtype=np.int64)
    owner = np.broadcast_to(thread, flat_ix[0].shape)
    if owner.max() >= owners:  # replica 0 of every element lives in the first threads (as tilex's fragments do)
        raise TileOpError(f"T.dequantize: replica 0 of fragment {frag} is not held by threads 0..{owners - 1}")
    order[owner, np.broadcast_to(local, flat_ix[0].shape)] = np.arange(flat_ix[0].size)
    if (order < 0).any():
        raise TileOpError(f"T.dequantize: fragment {frag} does not give every (thread, local) one element")
    return order


@register_tile_op("tilex.dequantize")
class DequantizeOp(TileOp):
    def __init__(self, packed: Region, out: Region, kind, bits, exponent, mantissa, group_size, scale=None,
                 zero=None, offset=None, prescaled=False):
        self.packed, self.out, self.scale, self.zero, self.offset = packed, out, scale, zero, offset
        self.prescaled = bool(prescaled)
        kind_name = intrin.LOWBIT_KIND_NAMES[int(kind)]
        if kind_name == "float":
            self.dtype = dtypes.float_type(int(exponent), int(mantissa))
        else:
            self.dtype = dtypes.int_type(int(bits), signed=kind_name == "int")
        self.kind, self.group_size = int(kind), int(group_size)

    @classmethod
    def from_call(cls, call):
        a = call.args
        scale = Region.from_call(a[2]) if isinstance(a[2], tvm.ir.Call) else None
        zero = Region.from_call(a[3]) if isinstance(a[3], tvm.ir.Call) else None
        offset = Region.from_call(a[9]) if isinstance(a[9], tvm.ir.Call) else None
        return cls(Region.from_call(a[0]), Region.from_call(a[1]), *[int(x.value) for x in a[4:9]], scale, zero,
                   offset, bool(int(a[10].value)))

    def buffers(self):
        # the written operand last, as every tile operator lists them (the pipeliner reads it so)
        return [r.buffer for r in (self.packed, self.scale, self.zero, self.offset, self.out) if r is not None]

    def describe(self):
        return f"T.dequantize({self.packed}, {self.out}, {self.dtype})"

    def _check(self, frag):
        out, packed = self.out.buffer, self.packed.buffer
        if not is_fragment(out):
            raise TileOpError(f"{self.describe()}: the output must be a register fragment (T.alloc_fragment), "
                              f"'{out.name}' is in '{out.scope()}'")
        if str(out.dtype) not in ("float16", "bfloat16"):
            raise TileOpError(f"{self.describe()}: decodes into float16 or bfloat16, not {out.dtype}")
        if static_shape(self.out.extents, "T.dequantize") != [int(s) for s in out.shape]:
            raise TileOpError(f"{self.describe()}: the output fragment must be used whole")
        if not (is_shared(packed) or is_global(packed)) or tvm.DataType(str(packed.dtype)).bits != 32:
            raise TileOpError(f"{self.describe()}: packed codes are 32-bit words (uint32/int32) in shared or "
                              f"global memory, got {packed.dtype} in '{packed.scope()}'")
        if frag is None:
            raise TileOpError(f"{self.describe()}: '{out.name}' has no layout; decode into a fragment that an "
                              f"operator such as T.gemm lays out")
        if frag.local_size % CODES:
            raise TileOpError(f"{self.describe()}: each thread holds {frag.local_size} elements of '{out.name}', "
                              f"not a multiple of {CODES} (one packed chunk); use a larger tile")
        if str(out.dtype) == "float16" and not self.dtype.exact_in("float16"):
            raise TileOpError(f"{self.describe()}: {self.dtype} does not fit float16 exactly; decode into "
                              f"bfloat16")
        if self.offset is not None and (self.scale is None or self.zero is not None):
            raise TileOpError(f"{self.describe()}: an offset goes with a scale and without a zero")
        if self.prescaled:
            k = raw_scale_exponent(self.dtype.kind, self.dtype.exponent, self.dtype.mantissa, str(out.dtype))
            if k is None:
                raise TileOpError(f"{self.describe()}: prescaled scales are for float types whose {out.dtype} decode "
                                  f"multiplies by a power of two; {self.dtype} has none")
            if self.scale is None or self.zero is not None:
                raise TileOpError(f"{self.describe()}: prescaled scales (carrying 2^{k}) need a scale and no zero "
                                  f"(an offset is fine)")
        rows, cols = (int(x) for x in out.shape)
        for name, r in (("scale", self.scale), ("zero", self.zero), ("offset", self.offset)):
            if r is None:
                continue
            if self.group_size <= 0:
                raise TileOpError(f"{self.describe()}: a {name} needs group_size > 0")
            groups = -(-cols // self.group_size) if self.group_size < cols else 1
            ext = static_shape(r.extents, f"T.dequantize {name}")
            if len(ext) < 2 or ext[-1] != rows or ext[-2] < groups:
                raise TileOpError(f"{self.describe()}: the {name} tile must be (groups, rows) = ({groups}, {rows}) "
                                  f"for a {rows}x{cols} output with group_size {self.group_size}, got {ext}")

    def lower(self, ctx):
        frag = ctx.layout_map.get(self.out.buffer)
        self._check(frag)
        t = ctx.thread_var
        bits = self.dtype.bits
        wpt = words_per_thread(frag, bits)
        owner = self._owner_thread(frag, t, ctx.analyzer)
        words = tirx.decl_buffer((wpt,), "uint32", "packed_words", scope="local")
        owners = frag.thread_extent // int(frag.replicate)
        stmts = [tirx.AllocBuffer(words), self._load_words(ctx, words, owner, owners, wpt)]
        out_loc = ctx.remap[self.out.buffer]
        pair_keys = self._pair_groups(frag, t, ctx.analyzer)  # empty without a scale, zero or offset
        cached = {}
        scale_regs = []
        # codes of at most 4 bits with scales and zeros, in float16: (x - z) * s as one fma, x * s + (-(z * s));
        # an offset is that shift given
        act = str(self.out.buffer.dtype)
        fused = self.scale is not None and self.zero is not None and bits <= 4 and act == "float16"
        shift = fused or self.offset is not None  # one fma per pair: x * scale + (the second register)
        second = self.offset if self.offset is not None else self.zero
        for c in range(frag.local_size // CODES):
            stmts.append(intrin.decode_chunk(act, self.kind, bits, self.dtype.exponent,
                                             self.dtype.mantissa, words.access_ptr("r", offset=c * bits,
                                                                                   extent=bits),
                                             out_loc.access_ptr("w", offset=c * CODES, extent=CODES),
                                             raw=self.prescaled))
            for local in range(c * CODES, (c + 1) * CODES, 2) if pair_keys else ():
                key, (row, grp) = pair_keys[local]
                if key not in cached:
                    regs, loaded = [], []
                    for r in (self.scale, second):
                        if r is None:
                            regs.append(None)
                            continue
                        v = tirx.Var(f"dq_{'s' if r is self.scale else 'z'}{len(cached)}", act)
                        # (groups, rows) tiles, like the (K // g, N) scale tensors they come from
                        m = list(r.mins)
                        value = ctx.load(r.buffer, m[:-2] + [m[-2] + grp, m[-1] + row])
                        if fused and r is self.zero:
                            # the zero register holds -(zero * scale), computed in float32 and rounded once
                            value = -(tirx.Cast("float32", loaded[0]) * tirx.Cast("float32", value))
                        scale_regs.append((v, value))
                        regs.append(v)
                        loaded.append(value)
                    cached[key] = regs
                s, z = cached[key]
                ptr = out_loc.access_ptr("rw", offset=local, extent=2)
                if shift:
                    stmts.append(intrin.scale_shift_pair(act, ptr, s, z))
                else:
                    stmts.append(intrin.scale_pair(act, ptr, s, z))
        # scale / zero loads first: a few registers, read before the words they scale are decoded
        binds = [tirx.Bind(v, _cast(value, act)) for v, value in scale_regs]
        return tirx.SeqStmt(stmts[:2] + binds + stmts[2:])

    def _owner_thread(self, frag, t, analyzer):
        """The thread whose words thread `t` reads: itself, or replica 0 of its elements."""
        if int(frag.replicate) == 1:
            return t
        inv = frag.inverse()  # (thread, *local) -> (*index, rep)
        ix = inv.map([t] + [0] * len(frag.local_shape))
        return analyzer.simplify(frag.map_thread(ix[:-1], rep=0))

    def _pair_groups(self, frag, t, analyzer):
        """local -> (key, (row, group index)) of each even local: the scale / zero coordinates of the pair it
        starts (elements 2m, 2m+1 must share them; `key` is equal for pairs with the same coordinates)."""
        if self.scale is None and self.zero is None and self.offset is None:
            return {}
        inv = frag.inverse()
        g = self.group_size
        cols = int(self.out.buffer.shape[-1])
        out = {}
        keys = []
        for local in range(0, frag.local_size, 2):
            coords = []
            for lo in (local, local + 1):
                lix = np.unravel_index(lo, frag.local_shape) if len(frag.local_shape) > 1 else (lo,)
                i, j = (analyzer.simplify(e) for e in inv.map([t] + [int(x) for x in lix])[:2])
                grp = analyzer.simplify(tirx.floordiv(j, g)) if g < cols else tirx.const(0, "int32")
                coords.append((i, grp))
            (i0, g0), (i1, g1) = coords
            if not (analyzer.can_prove_equal(i0, i1) and analyzer.can_prove_equal(g0, g1)):
                raise TileOpError(f"{self.describe()}: elements {local} and {local + 1} of a thread do not share "
                                  f"a row and scale group in the layout of '{self.out.buffer.name}'")
            for k, (ki, kg) in enumerate(keys):
                if analyzer.can_prove_equal(ki, i0) and analyzer.can_prove_equal(kg, g0):
                    key = k
                    break
            else:
                key = len(keys)
                keys.append((i0, g0))
            out[local] = (key, (i0, g0))
        return out

    def _load_words(self, ctx, words, owner, owners, wpt):
        """words[0:wpt] = the thread's packed words, vector by vector (`word_vector`). The packed region may have
        any shape (its elements in row-major order are the words) and layout: a vector of up to 4 words is 16-byte
        aligned, so it stays contiguous under a swizzle and is addressed by its first word."""
        vec = word_vector(wpt)
        w, lane = tirx.Var("w", "int32"), tirx.Var("v", "int32")
        flat = (w * owners + owner) * vec
        idx, rest = [], flat
        for m, e in reversed(list(zip(self.packed.mins, self.packed.extents))):
            idx.append(m + tirx.floormod(rest, e))
            rest = tirx.floordiv(rest, e)
        phys, off = ctx.physical_index(self.packed.buffer, list(reversed(idx)))
        at = ctx.analyzer.simplify(off[0]) + (lane if vec > 1 else 0)
        src = tirx.BufferLoad(phys, [at])
        if dtype_of(src) != "uint32":
            src = tirx.reinterpret("uint32", src)
        body = tirx.BufferStore(words, src, [w * vec + lane] if vec > 1 else [w])
        if vec > 1:
            body = tirx.For(lane, 0, vec, tirx.ForKind.VECTORIZED, body)
        return tirx.For(w, 0, wpt // vec, tirx.ForKind.UNROLLED, body)


def _cast(value, dtype):
    return value if dtype_of(value) == dtype else tirx.Cast(dtype, value)
