"""Layout conversions that settle a layout conflict (part of LayoutInference, which calls it between rounds).

Consumes: a tile program and the conflicts one round of inference found: an operator that needs a register
fragment in another layout than the one the fragment already has (a gemm's register operand fed by a loop laid out
like another gemm's accumulator, a transposed or packed read, a reduction into a fragment laid out elsewhere).
Produces: the program with that operator working on a fresh fragment in the layout it needs (pinned for the next
round), and the cheapest conversion between the two: register moves when every element stays in its thread, else a
round trip through a shared tile (written under one layout, read under the other; SwizzleSharedTiles swizzles it).
A conversion goes before the operator when it reads the old values and after it when it writes them; one note per
conversion says what was inserted and why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import tirx

from tilex.ir.source import span_of
from tilex.ir.visit import map_nodes, seq, seq_items, substitute
from tilex.layout.convert import in_same_threads
from tilex.op.copy import copy_call


@dataclass
class Conflict:
    """`op` (statement `stmt`) needs fragment `buffer` laid out as `want`; it has `have`, given by `have_from`."""

    op: object
    stmt: object
    buffer: object
    have: object
    want: object
    have_from: str
    want_from: str

    @property
    def span(self):
        """Where the user wrote the operator (its call's span, else its statement's)."""
        return span_of(getattr(self.stmt, "value", None), self.stmt)

    def message(self) -> str:
        return (f"layout conflict on buffer '{self.buffer.name}': {self.have_from} requires {self.have}, but "
                f"{self.want_from} requires {self.want}")


def insert_conversions(body, conflicts):
    """(new body, {buffer: pinned layout}, [(note, its conflict)]) for `conflicts` (see the module docstring); an
    operator with several conflicts on one buffer is converted once."""
    todo, replaced, allocs, pins, notes = {}, {}, {}, {}, []
    for c in conflicts:
        todo.setdefault((c.stmt, c.buffer), c)
    count = {}
    for (stmt, buf), c in todo.items():
        n = count[buf] = count.get(buf, 0) + 1
        twin = tirx.decl_buffer(list(buf.shape), str(buf.dtype), f"{buf.name}_as{n}", scope="local.fragment")
        reads, writes = c.op.reads_writes(buf)
        stmt_now = replaced.get(stmt, stmt)
        exchange = None
        before, after = [], []
        if reads:
            before, exchange = _conversion(buf, c.have, twin, c.want, exchange)
        if writes:
            after, exchange = _conversion(twin, c.want, buf, c.have, exchange, buf.name)
        replaced[stmt] = seq(before + [substitute(stmt_now, {buf: twin})] + after)
        allocs.setdefault(buf, []).extend([twin] + ([exchange] if exchange is not None else []))
        # both ends keep their layouts in the next round (the conversion copies must not propagate one to the other)
        pins[twin], pins[buf] = c.want, c.have
        notes.append((_note(c, reads, writes, exchange), c))
    return _with_allocations(_replace(body, replaced), allocs), pins, notes


def _conversion(src, src_lay, dst, dst_lay, exchange, name=None):
    """(statements converting fragment `src` into `dst`, the shared tile they use: `exchange`, or a new one named
    after `name` (default `src`'s) when that is None and one is needed)."""
    if in_same_threads(dst_lay, src_lay):
        return [tirx.Evaluate(copy_call(src, dst))], exchange
    if exchange is None:
        # a one-element tile (a reduction's scalar result) in static shared memory: TVM 0.27's
        # MergeSharedMemoryAllocations fails on a one-element dynamic allocation beside others
        one = math.prod(int(d) for d in src.shape) == 1
        exchange = tirx.decl_buffer(list(src.shape), str(src.dtype), f"{name or src.name}_exchange",
                                    scope="shared" if one else "shared.dyn")
    return [tirx.Evaluate(copy_call(src, exchange)), tirx.Evaluate(copy_call(exchange, dst))], exchange


def _note(c, reads, writes, exchange):
    nbytes = math.prod(int(d) for d in c.buffer.shape) * tvm.DataType(str(c.buffer.dtype)).bits // 8
    how = (f"a round trip through the shared tile '{exchange.name}' ({nbytes} bytes)" if exchange is not None
           else "register moves (every element stays in its thread)")
    where = " and ".join(w for w, on in (("before", reads), ("after", writes)) if on)
    return (f"tilex: layout conflict on fragment '{c.buffer.name}': {c.want_from} needs {c.want}, but "
            f"{c.have_from} gives it {c.have}; converted {where} it by {how}")


def _replace(body, replaced):
    if not replaced:
        return body

    def on_stmt(node):
        for old, new in replaced.items():
            if node.same_as(old):
                return new
        return node

    return map_nodes(body, [(tirx.Evaluate, on_stmt), (tirx.For, on_stmt)], order="pre")


def _with_allocations(body, allocs):
    """`body` with an allocation of each new buffer right after the allocation of the fragment it stands in for."""
    placed = set()

    def on_seq(node):
        items = seq_items(node)
        out = []
        for st in items:
            out.append(st)
            if isinstance(st, tirx.AllocBuffer) and st.buffer in allocs:
                out.extend(tirx.AllocBuffer(b) for b in allocs[st.buffer])
                placed.add(st.buffer)
        return seq(out) if len(out) != len(items) else node

    body = map_nodes(body, (tirx.SeqStmt, on_seq))
    missing = [b.name for b in allocs if b not in placed]
    if missing:
        raise ValueError(f"layout conversion: no allocation of fragment(s) {missing} to place the conversion "
                         f"buffers beside")
    return body
