"""SubByteAccesses: elements of 1, 2 or 4 bits (int4, uint4, float4_e2m1fn, int2, uint1, ...) stored and widened
through whole bytes and 32-bit words.

Consumes: flat TIR (after FlattenBuffer and LegalVectorWidths), before TVM's VectorizeLoop: buffers whose element
type has fewer than 8 bits (``8 / bits`` elements a byte, the first in the low bits), read and written element by
element -- by T.Parallel, T.copy through registers or the program's own loops, often in T.vectorized loops.
Produces: the same program where every store to such a buffer, and every load of one that a cast widens, goes
through uint8 / uint16 / uint32 views of the buffer's memory (DeclBuffers right after the buffer's declaration):

* a vectorized loop of L lanes whose body is one store (under conditions free of the lane) of element
  ``base + lane``, with ``base`` a multiple of L and L * bits one of 8, 16, 32, 64, 128, becomes one store of the
  packed lanes: a copy of the same words when the value is a load of the same kind, else the lanes' codes shifted
  into place and or-ed together;
* any other store is a read-modify-write of the element's bits: in registers directly, in shared or global memory
  by ``tilex::store_code`` (atomic on the 32-bit word: other threads may be storing the codes beside it); a
  vectorized loop holding one runs unrolled, as does one that reads such elements;
* a cast of an element to a wider type decodes its code (lowbit.h's ``decode_one_f32`` for a float, a sign
  extension for a signed integer).

A value's code: an element's bits for a load; for a cast to a sub-byte float, ``tilex::encode_float_code`` of the
value as float32 (nearest, ties to even, saturated to the largest finite magnitude: the conversion CUDA's
``__nv_fp4_e2m1`` makes); for a cast to a sub-byte integer, the value's low bits as an int32. A store whose value
is none of these (arithmetic on sub-byte values) is a NotImplementedError naming the buffer. Loads elsewhere (the
address of an element for cp.async, ``T.address_of(A_s[i])``) are left as they are.

Why: TVM's CUDA code generator addresses such buffers in whole bytes: its scalar store writes the whole byte,
clobbering the neighbouring element, and a vector of more than four elements has no CUDA type (an internal error).
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.tirx import op as tirx_op

from tilex import dtypes
from tilex.ir import intrin
from tilex.ir.source import keep_pass_error
from tilex.ir.visit import BufferLoadNode, is_op_call, map_nodes, mutate, seq, substitute, walk

#: the widths (bits) of the stores a vectorized loop of sub-byte elements is packed into
_PACKED_BITS = (8, 16, 32, 64, 128)


def is_sub_byte(dtype) -> bool:
    """Whether `dtype` is a scalar type of 1, 2 or 4 bits (bool, stored as a byte, is not)."""
    name = str(dtype)
    if name == "bool":
        return False
    t = tvm.DataType(name)
    return t.lanes == 1 and t.bits in (1, 2, 4)


def _bits(buf) -> int:
    return tvm.DataType(str(buf.dtype)).bits


def _mask(bits) -> tirx.PrimExpr:
    return tirx.const((1 << bits) - 1, "uint32")


def _u32(expr):
    return expr if str(expr.dtype) == "uint32" else tirx.Cast("uint32", expr)


class _Rewriter:
    def __init__(self, tiles):
        self.tiles = tiles  # the sub-byte buffers the body loads or stores
        self.ana = tvm.sym.Analyzer()
        self.views = {}  # (buffer, bits) -> view

    # -- views
    def view(self, buf, width):
        """The uint`width` view of `buf`'s memory."""
        key = (buf, width)
        if key not in self.views:
            elems = buf.shape[0]
            words = (elems * _bits(buf) + (width - 1)) // width
            self.views[key] = tirx.decl_buffer((words,), f"uint{width}", f"{buf.name}_u{width}", data=buf.data,
                                               scope=buf.scope())
        return self.views[key]

    # -- codes
    def extract(self, buf, index):
        """The code of element `index` of `buf` (uint32)."""
        bits = _bits(buf)
        per = 8 // bits
        byte = self.ana.simplify(tirx.floordiv(index, per))
        shift = self.ana.simplify(tirx.floormod(index, per) * bits)
        word = _u32(tirx.BufferLoad(self.view(buf, 8), [byte]))
        return tirx.bitwise_and(tirx.shift_right(word, _u32(shift)), _mask(bits))

    def encode(self, value, dtype):
        """The code (uint32) of the (wider) `value` cast to the sub-byte `dtype`."""
        t = dtypes.lookup(str(dtype))
        if t.is_float:
            x = value if str(value.dtype) == "float32" else tirx.Cast("float32", value)
            return intrin.encode_float_code(t.exponent, t.mantissa, x)
        x = value if str(value.dtype) == "int32" else tirx.Cast("int32", value)
        return tirx.bitwise_and(tirx.Cast("uint32", x), _mask(t.bits))

    def decode(self, code, dtype):
        """The value of the sub-byte `dtype` whose code is `code`: float32 for a float, int32 for an integer."""
        t = dtypes.lookup(str(dtype))
        if t.is_float:
            return intrin.decode_one("float", t.bits, t.exponent, t.mantissa, code)
        if t.kind == "uint":
            return tirx.Cast("int32", code)
        up = tirx.const(32 - t.bits, "int32")
        return tirx.shift_right(tirx.Cast("int32", tirx.shift_left(code, tirx.const(32 - t.bits, "uint32"))), up)

    def code_of(self, value):
        """The code (uint32) of a sub-byte-typed scalar expression, or None for one this pass does not read."""
        if isinstance(value, BufferLoadNode) and value.source in self.tiles and len(value.indices) == 1 \
                and str(value.dtype) == str(value.source.dtype):
            return self.extract(value.source, value.indices[0])
        if isinstance(value, tirx.Cast) and is_sub_byte(value.dtype):
            x = value.value
            if is_sub_byte(x.dtype):
                code = self.code_of(x)
                if code is None:
                    return None
                x = self.decode(code, x.dtype)
            return self.encode(x, value.dtype)
        if isinstance(value, tirx.Select):
            a, b = self.code_of(value.true_value), self.code_of(value.false_value)
            return None if a is None or b is None else tirx.Select(value.condition, a, b)
        if is_op_call(value, "tirx.if_then_else"):
            a, b = self.code_of(value.args[1]), self.code_of(value.args[2])
            return None if a is None or b is None else tirx.if_then_else(value.args[0], a, b)
        if isinstance(value, (tirx.IntImm, tirx.FloatImm)) and is_sub_byte(value.dtype):
            return tirx.const(constant_code(value), "uint32")
        return None

    # -- stores
    def lane_base(self, index, lane, lanes):
        """`base` when `index` is ``base + lane`` with `base` a multiple of `lanes`, else None."""
        base = self.ana.simplify(substitute(index, {lane: tirx.const(0, lane.dtype)}))
        if not self.ana.can_prove_equal(index - base, lane):
            return None
        if not self.ana.can_prove_equal(tirx.floormod(base, lanes), 0):
            return None
        return base

    def packed_loop(self, loop):
        """The statement storing a vectorized loop's lanes as packed words, or None (module docstring)."""
        if not isinstance(loop.extent, tirx.IntImm):
            return None
        lanes, lane = int(loop.extent.value), loop.loop_var
        conds, stmt = [], loop.body
        while isinstance(stmt, tirx.IfThenElse) and stmt.else_case is None and not _uses(stmt.condition, lane):
            conds.append(stmt.condition)
            stmt = stmt.then_case
        if not (isinstance(stmt, tirx.BufferStore) and stmt.buffer in self.tiles and len(stmt.indices) == 1):
            return None
        buf, bits = stmt.buffer, _bits(stmt.buffer)
        width = lanes * bits
        if width not in _PACKED_BITS:
            return None
        base = self.lane_base(stmt.indices[0], lane, lanes)
        if base is None:
            return None
        value = stmt.value
        stores = None
        if isinstance(value, BufferLoadNode) and value.source in self.tiles and len(value.indices) == 1 \
                and str(value.dtype) == str(buf.dtype) == str(value.source.dtype):
            src_base = self.lane_base(value.indices[0], lane, lanes)
            if src_base is not None:
                stores = self.copy_words(buf, base, value.source, src_base, lanes, width)
        if stores is None:
            codes = [self.code_of(substitute(value, {lane: tirx.const(k, lane.dtype)})) for k in range(lanes)]
            if any(c is None for c in codes):
                return None
            stores = self.pack_words(buf, base, codes, lanes, width)
        body = seq(stores)
        for cond in reversed(conds):
            body = tirx.IfThenElse(cond, body, None)
        return body

    def copy_words(self, dst, dst_base, src, src_base, lanes, width):
        if width <= 32:
            load = tirx.BufferLoad(self.view(src, width), [self.ana.simplify(tirx.floordiv(src_base, lanes))])
            return [tirx.BufferStore(self.view(dst, width), load,
                                     [self.ana.simplify(tirx.floordiv(dst_base, lanes))])]
        per_word, words = 32 // _bits(dst), width // 32

        def ramp(base):
            return tirx.Ramp(self.ana.simplify(tirx.floordiv(base, per_word)), 1, words)

        load = tirx.BufferLoad(self.view(src, 32), [ramp(src_base)])
        return [tirx.BufferStore(self.view(dst, 32), load, [ramp(dst_base)])]

    def pack_words(self, buf, base, codes, lanes, width):
        bits = _bits(buf)
        per_word = min(lanes, 32 // bits)
        words = []
        for w in range(0, lanes, per_word):
            word = None
            for k in range(per_word):
                part = tirx.bitwise_and(codes[w + k], _mask(bits))
                if k:
                    part = tirx.shift_left(part, tirx.const(k * bits, "uint32"))
                word = part if word is None else tirx.bitwise_or(word, part)
            words.append(word)
        if width <= 32:
            index = self.ana.simplify(tirx.floordiv(base, lanes))
            return [tirx.BufferStore(self.view(buf, width), tirx.Cast(f"uint{width}", words[0]), [index])]
        first = self.ana.simplify(tirx.floordiv(base, per_word))
        return [tirx.BufferStore(self.view(buf, 32), word, [self.ana.simplify(first + j)])
                for j, word in enumerate(words)]

    def element_store(self, store):
        """A store of one element: its bits replaced in its byte (registers) or word (shared / global memory)."""
        buf = store.buffer
        if len(store.indices) != 1 or tvm.DataType(str(store.value.dtype)).lanes != 1:
            raise keep_pass_error(NotImplementedError(
                f"tilex: a vector store into the {buf.dtype} buffer '{buf.name}' other than whole bytes of "
                f"consecutive elements: {store}"))
        code = self.code_of(store.value)
        if code is None:
            raise keep_pass_error(NotImplementedError(
                f"tilex: storing {store.value} into the {buf.dtype} buffer '{buf.name}': a {buf.dtype} value is "
                f"stored from a load of the same type or a cast to it (arithmetic on {buf.dtype} values is not "
                f"implemented: compute in a wider type and cast)"))
        bits, index = _bits(buf), store.indices[0]
        mask = _mask(bits)
        if str(buf.scope()).startswith("local"):
            per = 8 // bits
            byte = self.ana.simplify(tirx.floordiv(index, per))
            shift = _u32(self.ana.simplify(tirx.floormod(index, per) * bits))
            view = self.view(buf, 8)
            old = _u32(tirx.BufferLoad(view, [byte]))
            new = tirx.bitwise_or(tirx.bitwise_and(old, tirx.bitwise_not(tirx.shift_left(mask, shift))),
                                  tirx.shift_left(tirx.bitwise_and(code, mask), shift))
            return tirx.BufferStore(view, tirx.Cast("uint8", new), [byte])
        per = 32 // bits
        word = self.ana.simplify(tirx.floordiv(index, per))
        shift = _u32(self.ana.simplify(tirx.floormod(index, per) * bits))
        ptr = tirx_op.tvm_access_ptr(tirx_op.type_annotation("uint32"), self.view(buf, 32).data, word, 1, 3)
        return intrin.store_code(ptr, shift, mask, code)

    # -- traversal
    def touches(self, stmt) -> bool:
        found = []
        walk(stmt, [(BufferLoadNode, lambda n: found.append(n) if n.source in self.tiles else None),
                    (tirx.BufferStore, lambda n: found.append(n) if n.buffer in self.tiles else None)])
        return bool(found)

    def statements(self, body):
        def on_for(loop, m):
            self.ana.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent), allow_override=True)
            kind = loop.kind
            if kind == tirx.ForKind.VECTORIZED and self.touches(loop.body):
                packed = self.packed_loop(loop)
                if packed is not None:
                    return packed
                kind = tirx.ForKind.UNROLLED
            inner = m.mutate(loop.body)
            if inner.same_as(loop.body) and kind == loop.kind:
                return loop
            return tirx.For(loop.loop_var, loop.min, loop.extent, kind, inner, loop.thread_binding,
                            loop.annotations)

        def on_attr(node, m):
            if node.attr_key == "thread_extent" and isinstance(node.value, tirx.IntImm):
                self.ana.bind(node.node.var, tvm.ir.Range(0, node.value), allow_override=True)
            return m.default_mutate(node)

        def on_store(node, m):
            return self.element_store(node) if node.buffer in self.tiles else node

        return mutate(body, [(tirx.For, on_for), (tirx.AttrStmt, on_attr), (tirx.BufferStore, on_store)])

    def widening_casts(self, body):
        """Casts of sub-byte values to wider types: the values' codes decoded."""
        def on_cast(node):
            if is_sub_byte(node.dtype) or not is_sub_byte(node.value.dtype):
                return node
            code = self.code_of(node.value)
            if code is None:
                return node
            value = self.decode(code, node.value.dtype)
            return value if str(value.dtype) == str(node.dtype) else tirx.Cast(node.dtype, value)

        return map_nodes(body, (tirx.Cast, on_cast), order="post")

    def declare_views(self, body, params):
        """`body` with each view declared right after its buffer (a parameter's: at the start)."""
        by_buffer = {}
        for (buf, _), v in self.views.items():
            by_buffer.setdefault(buf, []).append(tirx.DeclBuffer(v, data=buf.data))
        declared = set()

        def on_seq(node):
            items = []
            for s in node.seq:
                items.append(s)
                if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)) and s.buffer in by_buffer:
                    declared.add(s.buffer)
                    items.extend(by_buffer[s.buffer])
            return node if len(items) == len(node.seq) else tirx.SeqStmt(items)

        body = map_nodes(body, (tirx.SeqStmt, on_seq), order="post")
        first = [d for p in params if p in by_buffer and p not in declared for d in by_buffer[p]]
        return seq(first + [body]) if first else body


def _uses(expr, var) -> bool:
    found = []
    walk(expr, (tvm.ir.Var, lambda v: found.append(v) if v.same_as(var) else None))
    return bool(found)


def constant_code(value) -> int:
    """The code of a sub-byte constant: a float's nearest magnitude (ties to the even code, saturated, NaN the
    largest) with its sign; an integer's low bits."""
    t = dtypes.lookup(str(value.dtype))
    if not t.is_float:
        return int(value.value) & ((1 << t.bits) - 1)
    x = float(value.value)
    half = 1 << (t.bits - 1)
    a = abs(x)
    magnitudes = t.values()[:half]
    code = half - 1 if a != a else min(range(half), key=lambda c: (abs(magnitudes[c] - a), c & 1))
    return code | (half if math.copysign(1.0, x) < 0 else 0)


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.SubByteAccesses")
def SubByteAccesses(func, mod, ctx):  # noqa: N802
    tiles = set()
    walk(func.body, [(BufferLoadNode, lambda n: tiles.add(n.source) if is_sub_byte(n.source.dtype) else None),
                     (tirx.BufferStore, lambda n: tiles.add(n.buffer) if is_sub_byte(n.buffer.dtype) else None)])
    if not tiles:
        return func
    rw = _Rewriter(tiles)
    body = rw.statements(func.body)
    body = rw.widening_casts(body)
    if not rw.views:
        return func if body.same_as(func.body) else func.with_body(body)
    return func.with_body(rw.declare_views(body, list(func.params)))
