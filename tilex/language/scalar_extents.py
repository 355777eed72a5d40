"""Tile extents written through scalars: ``H0 = by * 64; H1 = H0 + 64; T.copy(Q[H0:H1, :], Q_s)``.

TVMScript turns a scalar assignment in a kernel body into a one-element ``local`` buffer written once (``H1[0] =
H0[0] + 64``) and a slice ``H0:H1`` into a region of extent ``H1[0] - H0[0]``, which tile operators cannot size
(they need compile-time extents). `fold_scalar_extents` rewrites each such extent into the constant it always
equals, by expanding the scalars into the values they were assigned:

* a *definition* is a one-element local buffer stored to by exactly one statement and used only by loads
  (no tile operator region, no address taken), or a ``Bind`` variable; its value is its one stored value, with
  the definitions it reads expanded in turn;
* any other load in a value (``cnt[0]``, ``Indices[...]``) stands for an unknown of its own, one per load: two
  reads of memory are never assumed equal, since the program may write it between them;
* an extent (of a tile-operator region or a ``T.Parallel`` loop) is replaced only when its expansion simplifies
  to a constant; otherwise it is left as written, and the operator still reports it as not a compile-time
  constant (a truly dynamic extent, ``T.min(start + 64, n) - start``).

A store dominates every load of its scalar within the scalar's scope (TVMScript allocates the buffer at the
assignment, and the scope is the rest of the enclosing block), so the relation between two definitions that the
expansion uses holds wherever an extent reads them.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.names import REGION_OP
from tilex.ir.visit import BufferLoadNode, buffers_written, dtype_of, is_op_call, map_nodes, walk

__all__ = ["fold_scalar_extents"]


def _is_scalar(buf):
    return str(buf.scope()) == "local" and all(isinstance(d, tirx.IntImm) and d.value == 1 for d in buf.shape)


class _Definitions:
    """The single-assignment scalars and Bind variables of a body, expanded on demand."""

    def __init__(self, body):
        allocated, stores, in_regions, binds = [], {}, set(), {}

        def on_alloc(n):
            if _is_scalar(n.buffer):
                allocated.append(n.buffer)

        def on_store(n):
            stores.setdefault(n.buffer, []).append(n.value)

        def on_call(n):
            if is_op_call(n, REGION_OP) and isinstance(n.args[0], BufferLoadNode):
                in_regions.add(n.args[0].source)

        walk(body, [(tirx.AllocBuffer, on_alloc), (tirx.BufferStore, on_store), (tvm.ir.Call, on_call),
                    (tirx.Bind, lambda n: binds.__setitem__(n.var, n.value))])
        # written by anything but its one store (a call taking its address, a tile operator): not a definition
        others = {b for b in buffers_written(body) if b not in stores} | in_regions
        self.values = {b: stores[b][0] for b in allocated
                       if len(stores.get(b, [])) == 1 and b not in others}
        self.binds = binds
        self._expanded = {}
        self._busy = set()

    def expand(self, expr):
        """`expr` with every definition replaced by its expanded value and every other load by a fresh unknown."""

        def on_load(n):
            src = n.source
            if src in self.values:
                return self._of(src, self.values[src])
            return tirx.Var(f"{src.name}_read", n.ty)  # memory read here: equal to no other read

        def on_var(v):
            if v in self.binds:
                return self._of(v, self.binds[v])
            return v

        return map_nodes(expr, [(BufferLoadNode, on_load), (tvm.ir.Var, on_var)], order="post")

    def _of(self, key, value):
        if key not in self._expanded:
            if key in self._busy:  # a value reading itself: leave it unknown
                return tirx.Var("cycle", value.ty)
            self._busy.add(key)
            self._expanded[key] = self.expand(value)
            self._busy.discard(key)
        return self._expanded[key]


def _folded(extent, defs, analyzer):
    """The constant `extent` always equals, or None."""
    if isinstance(extent, tirx.IntImm) or not tvm.ir.is_prim_expr(extent):
        return None
    value = analyzer.simplify(defs.expand(extent))
    return tirx.const(int(value.value), dtype_of(extent)) if isinstance(value, tirx.IntImm) else None


def fold_scalar_extents(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with each tile-region or T.Parallel extent that reads scalars replaced by the constant it equals (see
    the module docstring)."""
    found = []
    walk(func.body, [(tvm.ir.Call, lambda n: found.append(n) if is_op_call(n, REGION_OP) else None),
                     (tirx.For, lambda n: found.append(n) if n.kind == tirx.ForKind.PARALLEL else None)])
    if not any(not isinstance(e, tirx.IntImm) for n in found
               for e in (n.args[2:] if isinstance(n, tvm.ir.Call) else [n.extent])):
        return func
    defs = _Definitions(func.body)
    analyzer = tvm.sym.Analyzer()

    def on_call(n):
        if not is_op_call(n, REGION_OP):
            return n
        extents = list(n.args[2:])
        folded = [_folded(e, defs, analyzer) for e in extents]
        if all(f is None for f in folded):
            return n
        new = [e if f is None else f for e, f in zip(extents, folded)]
        return tirx.call_intrin("handle", REGION_OP, *n.args[:2], *new)

    def on_for(n):
        if n.kind != tirx.ForKind.PARALLEL:
            return n
        f = _folded(n.extent, defs, analyzer)
        if f is None:
            return n
        return tirx.For(n.loop_var, n.min, f, n.kind, n.body, n.thread_binding, n.annotations, span=n.span)

    body = map_nodes(func.body, [(tvm.ir.Call, on_call), (tirx.For, on_for)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)
