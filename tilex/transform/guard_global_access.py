"""GuardGlobalAccess: every read or write of a global tensor that the analyzer cannot prove inside the tensor is
guarded, as TileLang guards them: an out-of-bounds read gives 0 (``T.annotate_safe_value``'s value), an
out-of-bounds write does not happen.

Consumes: per-thread TIR after LowerTileOps (global tensors still N-d, loops and launch scopes in place).
Produces: the same program where each global load whose indices are not provably within the tensor's shape reads
``if_then_else(in_bounds, load, 0)`` and each such store sits under ``if (in_bounds)``.

Why: a T.Parallel loop (or a serial loop a user writes) indexes global tensors directly, with indices the
program computes: a gather through an index tensor whose padding entries are -1 or the sequence length (sparse
attention), or a ragged edge of a ``T.ceildiv`` grid. Unguarded, such a read returns whatever lies beyond the
tensor (NaN bits, which a zero probability does not cancel: 0 * NaN = NaN) and such a write corrupts memory.
Tile operators guard their own accesses (T.copy's ragged-edge conditions); those guards are read as constraints
here, so their accesses are proven and left alone, and a program whose accesses are all provably inside its
tensors compiles to the same code as before.

The proof uses the enclosing loops' ranges, the thread and block extents, ``if`` conditions (the then-branch
under the condition, the else-branch under its negation) and let bindings. Loads under ``address_of`` (the
source of an asynchronous copy) are left alone: their copies are guarded where they are issued.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir import intrin
from tilex.ir.visit import BufferLoadNode, dtype_of, map_nodes, walk

_ADDRESS_OPS = ("tirx.address_of", "tirx.tvm_access_ptr")


def _is_global(buf) -> bool:
    return str(buf.scope()) in ("global", "")


def _is_int_scalar(var) -> bool:
    try:
        dtype = dtype_of(var)
    except AttributeError:  # a handle (a pointer variable) has no dtype
        return False
    return "int" in dtype and "x" not in dtype


def _index_span(index):
    """(first, last) element index a (scalar or Ramp) index covers, or None for a Broadcast of a scalar."""
    if isinstance(index, tirx.Ramp):
        return index.base, index.base + index.stride * (index.lanes - 1)
    if isinstance(index, tirx.Broadcast):
        return index.value, index.value
    return index, index


def _single_writes(body):
    """{buffer: value} of the one-element local buffers (``T.alloc_var``) the program writes exactly once: a read
    of one stands for that value in a bounds proof (a block index kept in a variable)."""
    stores = {}

    def on_store(st):
        buf = st.buffer
        if str(buf.scope()) == "local" and [int(e) for e in buf.shape] == [1]:
            stores.setdefault(buf, []).append(st.value)

    walk(body, (tirx.BufferStore, on_store))
    return {b: vals[0] for b, vals in stores.items() if len(vals) == 1}


class _Guard:
    def __init__(self, single_writes=None):
        self.analyzer = tvm.sym.Analyzer()
        self.guarded = 0
        self.single_writes = single_writes or {}

    def _provable(self, cond):
        if self.analyzer.can_prove(cond):
            return True
        if not self.single_writes:
            return False

        def on_load(load):
            for buf, value in self.single_writes.items():
                if load.source.same_as(buf):
                    return value
            return load

        seen = map_nodes(cond, (BufferLoadNode, on_load))
        return not seen.same_as(cond) and self.analyzer.can_prove(seen)

    # -- the condition under which an access is inside its tensor (None: proven)
    def bounds(self, buf, indices):
        conds = []
        for index, extent in zip(indices, buf.shape):
            lo, hi = _index_span(index)
            if "int" not in dtype_of(lo):
                return None
            extent = tirx.Cast(dtype_of(lo), extent) if dtype_of(extent) != dtype_of(lo) else extent
            for c in (lo >= tirx.const(0, dtype_of(lo)), hi < extent):
                if not self._provable(c):
                    conds.append(c)
        if not conds:
            return None
        cond = conds[0]
        for c in conds[1:]:
            cond = tirx.And(cond, c)
        return cond

    # -- expressions
    def expr(self, e):
        if not tvm.ir.is_prim_expr(e):
            return e
        skip = []

        def note_address(call):
            if isinstance(call.op, tvm.ir.Op) and call.op.name in _ADDRESS_OPS:
                walk(call, (BufferLoadNode, skip.append))

        walk(e, (tvm.ir.Call, note_address))

        def on_load(load):
            buf = load.source
            if not _is_global(buf) or any(load.same_as(s) for s in skip):
                return load
            cond = self.bounds(buf, list(load.indices))
            if cond is None:
                return load
            self.guarded += 1
            zero = tirx.const(0, dtype_of(load))
            if "x" in dtype_of(load):  # a vector load: a vector of zeros
                zero = tirx.Broadcast(tirx.const(0, dtype_of(load).split("x")[0]),
                                      int(dtype_of(load).split("x")[1]))
            return tirx.if_then_else(cond, load, zero)

        return map_nodes(e, (BufferLoadNode, on_load))

    # -- statements
    def stmt(self, s):
        a = self.analyzer
        if isinstance(s, tirx.SeqStmt):
            items = [self.stmt(x) for x in s.seq]
            return s if all(x.same_as(y) for x, y in zip(items, s.seq)) else tirx.SeqStmt(items)
        if isinstance(s, tirx.For):
            a.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, s.extent), allow_override=True)
            body = self.stmt(s.body)
            if body.same_as(s.body):
                return s
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding, s.annotations,
                            step=getattr(s, "step", None), span=s.span)
        if isinstance(s, tirx.AttrStmt):
            if s.attr_key == "thread_extent":
                iv = s.node
                a.bind(iv.var, tvm.ir.Range.from_min_extent(0, s.value), allow_override=True)
            body = self.stmt(s.body)
            return s if body.same_as(s.body) else tirx.AttrStmt(s.node, s.attr_key, s.value, body, span=s.span)
        if isinstance(s, tirx.IfThenElse):
            cond = self.expr(s.condition)
            with a.constraint_scope(a.simplify(cond)):  # (a constraint is matched in its simplified form)
                then = self.stmt(s.then_case)
            other = s.else_case
            if other is not None:
                with a.constraint_scope(a.simplify(tirx.Not(cond))):
                    other = self.stmt(other)
            if cond.same_as(s.condition) and then.same_as(s.then_case) and (other is None
                                                                              or other.same_as(s.else_case)):
                return s
            return tirx.IfThenElse(cond, then, other, span=s.span)
        if isinstance(s, tirx.Bind):
            value = self.expr(s.value)
            if _is_int_scalar(s.var):
                a.bind(s.var, value, allow_override=True)
            return s if value.same_as(s.value) else tirx.Bind(s.var, value, span=s.span)
        if isinstance(s, tirx.BufferStore):
            value = self.expr(s.value)
            indices = [self.expr(i) for i in s.indices]
            new = s
            if not value.same_as(s.value) or any(not x.same_as(y) for x, y in zip(indices, s.indices)):
                new = tirx.BufferStore(s.buffer, value, indices, span=s.span)
            if _is_global(s.buffer):
                cond = self.bounds(s.buffer, indices)
                if cond is not None:
                    self.guarded += 1
                    return tirx.IfThenElse(cond, new, None, span=s.span)
            return new
        if isinstance(s, tirx.While):
            body = self.stmt(s.body)
            return s if body.same_as(s.body) else tirx.While(s.condition, body, span=s.span)
        if isinstance(s, tirx.Evaluate) and intrin.is_atomic(s.value):
            return self.atomic(s)
        return s  # Evaluate (intrinsic calls: their operands are the operators' business), allocations, asserts

    def atomic(self, s):
        """An element atomic on global memory (``T.atomic_add(C[i, j], v)``, ``T.atomic_addx4``) whose address
        may leave its tensor runs under the bounds condition (the vector forms: every element they add to)."""
        call = s.value
        ptr = call.args[1] if len(call.args) > 1 else None
        if not (isinstance(ptr, tvm.ir.Call) and isinstance(ptr.op, tvm.ir.Op) and ptr.op.name == "tirx.address_of"):
            return s
        load = ptr.args[0]
        if not isinstance(load, BufferLoadNode) or not _is_global(load.source):
            return s
        indices = list(load.indices)
        width = len(call.args) - 2 if intrin.is_vector_atomic(call) else 1
        if width > 1 and indices:
            last = indices[-1]
            indices[-1] = tirx.Ramp(last, tirx.const(1, dtype_of(last)), width)
        cond = self.bounds(load.source, indices)
        if cond is None:
            return s
        self.guarded += 1
        return tirx.IfThenElse(cond, s, None, span=s.span)


def guard_global_access(func):
    """`func` with its global accesses guarded where they may leave their tensors (see the module docstring)."""
    g = _Guard(_single_writes(func.body))
    body = g.stmt(func.body)
    return func if body.same_as(func.body) else func.with_body(body)
