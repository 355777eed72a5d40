"""LayoutInference: give every shared buffer and register fragment of a tile program its layout.

Consumes: a PrimFunc with tile-operator calls and T.Parallel nests (after pipelining).
Produces: the same body, with the function attribute ``tilex.layout_map`` (buffer -> encoded Layout/Fragment)
and a ``tilex.loop_layout`` annotation on each T.Parallel nest that runs by a fragment layout.

A fragment the program reads or writes by element outside every tile operator and T.Parallel nest is fully
replicated (every thread holds the whole tile), as a T.annotate_layout would pin it. Operators are asked in
priority order: every operator at the strict level (gemm pins its operand swizzles and
accumulator fragment), then the common level until nothing changes (layouts propagate through the buffers operators
share), then each operator in program order at the free level (free choices such as a coalesced plan for a
fragment nobody constrained), propagating again after each choice.

Two different layouts for one register fragment are settled, not refused: the operator that asked second works on
a copy of the fragment in its own layout, with the cheapest conversion around it
(`tilex.transform.layout_conversion`), and inference runs again. Each conversion is reported as a
:class:`tilex.LayoutConversionWarning` and listed in the function attribute ``tilex.layout_conversions``. Two
layouts for a shared tile, or a conflict that conversions do not settle, raise a LayoutConflictError naming the
buffer, both layouts and both operators.
"""
from __future__ import annotations

from collections import deque

from tvm import tirx

from tilex.ir.names import ANNOTATE_OP, LAYOUT_CONVERSIONS_ATTR, LAYOUT_MAP_ATTR, LOOP_LAYOUT_ATTR
from tilex.ir.source import add_location, location, span_of, warn_at
from tilex.ir.visit import is_op_call, map_nodes
from tilex.layout.codec import decode_call, encode
from tilex.op.base import (InferContext, InferLevel, LayoutConflictError, LayoutConversionWarning, TileOpError,
                           is_fragment)
from tilex.op.parallel import ParallelOp
from tilex.op.reducer import reducers_of
from tilex.transform.kernel_scope import kernel_info
from tilex.transform.layout_conversion import Conflict, insert_conversions
from tilex.layout import Fragment, Layout
from tilex.transform.op_collect import collect_loose_fragments, collect_tile_ops, collect_views
from tilex.transform.thread_regions import op_threads

#: where a layout the program pinned came from (error messages name it)
PINNED = "T.annotate_layout"
MAX_CONVERSION_ROUNDS = 4  # a conversion's own copies can conflict in turn; more rounds than this is a bug


def infer_layouts(ops, threads, target=None, pinned=None, spans=None, conflicts=None, stmts=None, op_threads=None,
                  reducers=frozenset()):
    """Run inference over `ops` (a list of TileOp). Returns {buffer: Layout | Fragment}. An operator in a thread
    region (T.ws, a branch on the thread index) is asked with its region's thread count, `op_threads` {id(op):
    count}; the others with the block's `threads`.

    `spans` (a list parallel to `ops`) gives where the user wrote each operator: an operator's error, or a conflict
    it takes part in, names that place (its Python type is kept). With `conflicts` (a list) and `stmts` ({id(op):
    its statement}), a fragment conflict raised by an operator in `stmts` is appended to `conflicts` as a
    `Conflict` instead (the fragment keeps its first layout)."""
    ctx = InferContext(layout_map=dict(pinned or {}), threads=threads, target=target, reducers=reducers)
    origin = {b: PINNED for b in ctx.layout_map}
    span_by_op = {id(op): span for op, span in zip(ops, spans or [])}

    def described(op):
        where = location(span_by_op.get(id(op)))
        return f"{op.describe()} (at {where})" if where else op.describe()

    def ask(op, level):
        ctx.threads = op_threads.get(id(op), threads) if op_threads else threads
        try:
            return op.infer_layout(ctx, level)
        except (ValueError, TypeError, NotImplementedError) as e:
            add_location(e, span_by_op.get(id(op)))
            raise

    users = {}
    for op in ops:
        for b in op.buffers():
            users.setdefault(b, []).append(op)

    def merge(op, updates):
        changed = []
        for buf, lay in updates.items():
            have = ctx.layout_map.get(buf)
            if have is None:
                ctx.layout_map[buf] = lay
                origin[buf] = described(op)
                changed.append(buf)
            elif have is not lay and not have.is_equal(lay):
                if origin[buf] == PINNED and not is_fragment(buf) and isinstance(have, Layout) \
                        and have.same_offsets(lay):
                    # the pin places the shared tile's bytes as the operator does, written another way (TileLang's
                    # make_swizzled_layout as 2-d, the wgmma's as 1-d): no conflict; the operator's form replaces
                    # the pin's (operators read their own form: TMA and wgmma descriptors)
                    ctx.layout_map[buf] = lay
                    origin[buf] = described(op)
                    changed.append(buf)
                    continue
                if conflicts is not None and is_fragment(buf) and id(op) in (stmts or {}):
                    if not any(c.op is op and c.buffer.same_as(buf) for c in conflicts):
                        conflicts.append(Conflict(op, stmts[id(op)], buf, have, lay, origin[buf], described(op)))
                    continue
                raise add_location(LayoutConflictError(
                    f"layout conflict on buffer '{buf.name}': {origin[buf]} requires {have}, but "
                    f"{described(op)} requires {lay}"), span_by_op.get(id(op)))
        return changed

    def propagate(queue):
        queue = deque(queue)
        while queue:
            op = queue.popleft()
            for buf in merge(op, ask(op, InferLevel.COMMON)):
                queue.extend(u for u in users.get(buf, []) if u is not op)

    for op in ops:
        merge(op, ask(op, InferLevel.STRICT))
    propagate(ops)
    for op in sorted(ops, key=lambda o: o.free_rank):  # stable: program order within a rank
        changed = merge(op, ask(op, InferLevel.FREE))
        propagate([u for b in changed for u in users.get(b, []) if u is not op] + [op])

    for buf, ops_using in users.items():
        if is_fragment(buf) and buf not in ctx.layout_map:
            names = ", ".join(described(o) for o in ops_using)
            raise TileOpError(f"could not infer a layout for fragment '{buf.name}' (used by {names})")
    return ctx.layout_map


def layout_inference(func, target=None):
    """Annotate `func` with inferred layouts (see the module docstring)."""
    info = kernel_info(func)
    if info is None:
        return func
    pinned, body = _take_annotations(func.body)
    if not collect_tile_ops(body) and not pinned:
        return func
    func = func.with_body(body)
    for buf in collect_loose_fragments(func.body):  # read or written by element outside tile operators
        pinned.setdefault(buf, Fragment.fully_replicated([int(e) for e in buf.shape], info.threads))
    notes = []
    for _ in range(MAX_CONVERSION_ROUNDS + 1):
        found = collect_tile_ops(func.body)
        views = collect_views(func.body)  # layout relations between a fragment / shared tile and its T.view
        ops = [op for _, op in found] + [op for _, op in views]
        spans = [span_of(getattr(stmt, "value", None), stmt) for stmt, _ in found] + [span_of(d) for d, _ in views]
        conflicts = []
        layout_map = infer_layouts(ops, info.threads, target=target, pinned=pinned, spans=spans,
                                   conflicts=conflicts, stmts={id(op): stmt for stmt, op in found},
                                   op_threads=op_threads(func.body, found, info.threads),
                                   reducers=frozenset(reducers_of(func.body)))
        if not conflicts:
            break
        body, pins, round_notes = insert_conversions(func.body, conflicts)
        func = func.with_body(body)
        pinned.update(pins)
        notes += round_notes
    else:  # conversions that do not settle it: say the first conflict left
        raise add_location(LayoutConflictError(conflicts[0].message()), conflicts[0].span)
    for note, c in notes:
        warn_at(note, LayoutConversionWarning, c.span)
    loop_layouts = {}
    for stmt, op in found:
        if isinstance(op, ParallelOp) and op.loop_layout is not None:
            loop_layouts[stmt] = op.loop_layout
    body = _annotate_loops(func.body, loop_layouts)
    func = func.with_body(body) if not body.same_as(func.body) else func
    if notes:
        func = func.with_attr(LAYOUT_CONVERSIONS_ATTR, [note for note, _ in notes])
    return func.with_attr(LAYOUT_MAP_ATTR, {b: encode(l) for b, l in layout_map.items()})


def pinned_layouts(body):
    """{buffer: layout} of the T.annotate_layout entries in `body`."""
    return _take_annotations(body)[0]


def _take_annotations(body):
    """Collect T.annotate_layout entries and drop their marker statements."""
    pinned = {}

    def on_eval(node):
        v = node.value
        if is_op_call(v, ANNOTATE_OP):
            buf, lay = decode_call(v)
            pinned[buf] = lay
            return tirx.Evaluate(tirx.const(0, "int32"))
        return node

    body = map_nodes(body, (tirx.Evaluate, on_eval))
    return pinned, body


def _annotate_loops(body, loop_layouts):
    if not loop_layouts:
        return body

    def on_for(loop):
        lay = loop_layouts.get(loop)
        if lay is None:
            return loop
        ann = dict(loop.annotations)
        ann[LOOP_LAYOUT_ATTR] = encode(lay)
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding, ann,
                        span=loop.span)

    return map_nodes(body, (tirx.For, on_for), order="pre")

