"""`T.Parallel` loop nests as a tile operator: layout inference from the fragments they touch, and lowering."""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import int_set

from tilex.ir.visit import (BufferLoadNode, buffers_written, dtype_of, free_vars, map_nodes, seq, seq_items,
                            substitute, walk)
from tilex.layout import Fragment, LayoutError
from tilex.layout.convert import pulled_back
from tilex.layout.fragment_access import (access_layout, offsets_inside, split_offsets, spread_over_blocks,
                                          threads_agree, with_unit_dims)
from tilex.layout.project import project
from tilex.op.int_cast import fast_int_casts
from tilex.op.base import InferLevel, TileOp, TileOpError, is_fragment, is_global, is_local, is_shared
from tilex.op.partition import (access_vectorizable, block_offset, coalesced_plan, emit_by_fragment, emit_by_plan,
                                fragment_vector_width, load_vectorizable, pick_vector, placed_vector_width,
                                prefetch_loads, static_shape)


def collect_parallel_nest(loop):
    """(loop vars, extents, innermost body) of a perfectly nested run of PARALLEL loops."""
    vars_, extents = [], []
    node = loop
    while isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
        if not (isinstance(node.min, tirx.IntImm) and node.min.value == 0):
            raise TileOpError(f"T.Parallel loops must start at 0, got {node.min}")
        vars_.append(node.loop_var)
        extents.append(node.extent)
        node = node.body
    return vars_, extents, node


def stores_whole(stmt, tile):
    """Whether `stmt` is a T.Parallel nest over `tile`'s shape whose stores to `tile` all use the loop variables in
    order (``tile[i, j] = ...``), so that it writes every element."""
    if not (isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL):
        return False
    vars_, extents, body = collect_parallel_nest(stmt)
    if [int(e) if isinstance(e, tirx.IntImm) else None for e in extents] != [int(d) for d in tile.shape]:
        return False
    stores = []
    walk(body, (tirx.BufferStore, lambda n: stores.append(n) if n.buffer.same_as(tile) else None))
    return bool(stores) and all(_same_vars(list(n.indices), vars_) for n in stores)


def buffer_accesses(stmt):
    """[(buffer, indices, is_store)] for every BufferLoad/BufferStore in `stmt`."""
    out = []

    def on_load(n):
        out.append((n.source, list(n.indices), False))

    def on_store(n):
        out.append((n.buffer, list(n.indices), True))

    walk(stmt, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store)])
    return out


def _same_vars(indices, vars_):
    return len(indices) == len(vars_) and all(isinstance(i, tvm.ir.Var) and i.same_as(v)
                                              for i, v in zip(indices, vars_))


def inline_scalars(body):
    """`body` with each per-element scalar substituted into the statements after it, or None when that would change
    what the body computes. A scalar is ``x: T.int32 = value`` (TVMScript makes it a one-element local buffer,
    allocated and written once at the top level of the body) or a Bind.

    None when a scalar is read before it is written, or a later statement stores to a buffer its value loads (the
    substituted load would see the new data). TVM's vectorizer keeps such a scalar as one value for all lanes, so a
    vectorized body must not keep any."""
    items = seq_items(body)
    stores = {}
    walk(body, (tirx.BufferStore, lambda n: stores.__setitem__(n.buffer, stores.get(n.buffer, 0) + 1)))
    scalars = {st.buffer for st in items if isinstance(st, tirx.AllocBuffer) and str(st.buffer.scope()) == "local"
               and _one_element(st.buffer) and stores.get(st.buffer, 0) == 1}
    values, binds, loaded, out = {}, {}, set(), []

    def replaced(node):
        def on_load(n):
            if n.source in scalars:
                if n.source not in values:
                    raise _ReadBeforeWrite
                return values[n.source]
            return n

        return map_nodes(substitute(node, binds), (BufferLoadNode, on_load), order="post")

    try:
        for st in items:
            if isinstance(st, tirx.AllocBuffer) and st.buffer in scalars:
                continue
            if isinstance(st, tirx.Bind) or (isinstance(st, tirx.BufferStore) and st.buffer in scalars):
                value = replaced(st.value)
                if not _pure(value):
                    return None  # substituted twice, a call with effects (an atomic) would run twice
                walk(value, (BufferLoadNode, lambda n: loaded.add(n.source)))
                if isinstance(st, tirx.Bind):
                    binds[st.var] = value
                else:
                    values[st.buffer] = value
                continue
            if buffers_written(st) & loaded:
                return None
            out.append(replaced(st))
    except _ReadBeforeWrite:
        return None
    return seq(out)


def _pure(expr):
    """Whether `expr` calls nothing but pure operators (math, casts): safe to evaluate more than once."""
    impure = []

    def on_call(c):
        op = c.op
        kind = op.get_attr("TCallEffectKind") if isinstance(op, tvm.ir.Op) else None
        if kind is None or int(kind) > 1:  # ExprAnnotation (0) or Pure (1)
            impure.append(c)

    walk(expr, (tvm.ir.Call, on_call))
    return not impure


def _has_binds(stmt):
    found = []
    walk(stmt, (tirx.Bind, found.append))
    return bool(found)


class _ReadBeforeWrite(Exception):
    pass


def _one_element(buf):
    return all(isinstance(d, tirx.IntImm) and d.value == 1 for d in buf.shape)


class ParallelOp(TileOp):
    """A nest of ``for i, j in T.Parallel(...)`` loops."""

    op_name = "tilex.parallel"

    def __init__(self, loop):
        self.loop = loop
        self.vars, extents, body = collect_parallel_nest(loop)
        inlined = inline_scalars(body)
        self.body = body if inlined is None else inlined
        # a scalar left must stay one variable: run one element at a time
        self.scalar_only = inlined is None or _has_binds(self.body)
        self.extents = static_shape(extents, "T.Parallel")
        self.accesses = buffer_accesses(self.body)
        self.inner = _inner_loops(self.body)
        self.loop_layout = None
        self._blocks = {}  # (buffer, indices) -> _block_of's answer
        self._owns_cache = {}  # (buffer, indices, id(layout)) -> (layout, whether the loop's threads own it)

    def buffers(self):
        return list({b: None for b, _, _ in self.accesses})

    def reads_writes(self, buffer):
        stores = [s for b, _, s in self.accesses if b.same_as(buffer)]
        writes = any(stores)
        return not all(stores) or not stores_whole(self.loop, buffer), writes

    def takes_shared(self, buffer):
        return True

    def _fragment_accesses(self):
        return [(b, idx) for b, idx, _ in self.accesses if is_fragment(b)]

    def infer_layout(self, ctx, level):
        if level == InferLevel.STRICT:
            return {}
        frags = self._fragment_accesses()
        if not frags:
            return {}
        if self.loop_layout is None:
            self.loop_layout = self._cheapest_layout(ctx, frags)
        if self.loop_layout is None:
            for buf, idx in frags:
                block = self._block_of(ctx, buf, idx)
                if block is not None:
                    self.loop_layout = block[0]
                    break
        if self.loop_layout is None:
            self.loop_layout = self._derived_layout(ctx, frags)
        if self.loop_layout is None and level == InferLevel.FREE:
            elem_bits = self._widest_bits()
            vec = 1 if self.scalar_only else self._plan_vector(ctx, elem_bits)
            self.loop_layout = coalesced_plan(self.extents, ctx.threads, vec)
            if self.loop_layout is None:
                raise TileOpError(
                    f"T.Parallel{tuple(self.extents)}: cannot deal {self.extents} elements evenly to "
                    f"{ctx.threads} threads for the register tiles it touches ({[b.name for b, _ in frags]})")
        if self.loop_layout is None:
            return {}
        result = {}
        for buf, idx in frags:
            if not _same_vars(idx, self.vars) and _same_vars_padded(idx, self.vars, buf):
                # ``logits[i, 0]`` of a (64, 1) fragment: the loop's own elements, over the fragment's shape
                want = with_unit_dims(self.loop_layout, [int(d) for d in buf.shape])
                have = ctx.layout_map.get(buf, result.get(buf))
                if want is not None and (have is None or not self._owns(buf, idx, have)):
                    result[buf] = want
                continue
            if not _same_vars(idx, self.vars):
                if self._block_of(ctx, buf, idx) is not None:
                    continue  # a block of a fragment with a layout, read in the loop's own threads
                keep = _subset_of_vars(idx, self.vars)
                if keep is None and _scalar_access(buf, idx):
                    keep = []  # x[0] of a one-element fragment: read by every thread of the loop
                have = ctx.layout_map.get(buf, result.get(buf))
                if keep is not None:
                    # a broadcast operand (bias[j], row_max[i], m[0]): replicated over the threads that read it;
                    # a layout given elsewhere under which they do not hold it is a conflict for inference to settle
                    # (the operand converted into this one before the loop)
                    if have is None or not self._owns(buf, idx, have):
                        drop = [d for d in range(len(self.vars)) if d not in keep]
                        result[buf] = _as_shape(project(self.loop_layout, drop)[0], buf)
                    continue
                # read through an index map (a transpose, j // 2 into packed values): the fragment that puts each
                # element in the thread reading it, a weak wish (at the free level, after the operators before this
                # one chose, e.g. a coalesced load); a layout already given that does not is a conflict
                if level != InferLevel.FREE or (have is not None and self._owns(buf, idx, have)):
                    continue
                want = pulled_back(self.loop_layout, idx, self.vars, self.extents, static_shape(buf.shape, buf.name),
                                   self.inner)
                if want is None:
                    want = self._blocks_wish(ctx, buf, idx)
                if want is None and not self._writes(buf) and self._indexable(idx):
                    # read in a pattern no smaller fragment serves (``a[k, i]`` with k an inner serial loop, an
                    # index computed from several loop variables): every thread holds the whole (read-only) tile
                    want = Fragment.fully_replicated(static_shape(buf.shape, buf.name), ctx.threads)
                if want is not None:
                    result[buf] = want
                continue  # other patterns are checked at lowering: the loop's threads must own the element
            have = ctx.layout_map.get(buf, result.get(buf))
            if have is None or not have.is_equal(self.loop_layout):
                result[buf] = self.loop_layout  # against a layout already given: a conflict for inference to settle
        return result

    def _derived_layout(self, ctx, frags):
        """The loop layout under which every iteration runs in the threads holding the element it touches of a
        fragment that has a layout (TileLang derives a loop's layout from a fragment it touches so), for an access
        whose indices are the loop's variables, each once, plus offsets from outside the loop (``acc[i + s * 16,
        j]``), or fixed (``logits[i, 0]``, ``lse[k, i]``): the fragment seen at the smallest offsets that stay
        inside it, accepted when every offset the program may use leaves each element in the same threads
        (`threads_agree`). Written fragments are asked first, then unreplicated ones; None when none fits."""
        order = sorted(enumerate(frags), key=lambda kv: (not self._writes(kv[1][0]),
                                                          int(getattr(ctx.layout_map.get(kv[1][0]), "replicate", 1))
                                                          > 1, kv[0]))
        for _, (buf, idx) in order:
            lay = ctx.layout_map.get(buf)
            if lay is None or not _shifted_vars(idx, self.vars, ctx.analyzer):
                continue
            at = offsets_inside(idx, self.vars, self.extents, lay.input_shape, ctx.analyzer)
            loop = access_layout(lay, at, self.vars, self.extents) if at is not None else None
            if loop is not None and threads_agree(loop, self.vars, lay, idx, self.vars, self.extents, self.inner,
                                                  ctx.analyzer, exact=self._writes(buf)) is None:
                return loop
        return None

    def _blocks_wish(self, ctx, buf, idx):
        """For a fragment read as ``lse[k, i]`` / ``acc[i + s * 16, j]`` (the loop's variables, in loop order, plus
        offsets from outside the loop): the layout made of blocks of the loop's shape (unit extents where an index
        has no loop variable), each laid out as the loop, registers one block after another -- every iteration then
        holds its element whatever the offset; None when that is not so or the access is not of this form."""
        if not _shifted_vars(idx, self.vars, ctx.analyzer) or self._writes(buf):
            return None
        order = [next((k for k, v in enumerate(self.vars) if _uses(e, v)), None) for e in idx]
        block = [self.extents[k] if k is not None else 1 for k in order]
        want = spread_over_blocks(self.loop_layout, block, static_shape(buf.shape, buf.name))
        if want is None or threads_agree(self.loop_layout, self.vars, want, idx, self.vars, self.extents,
                                         self.inner, ctx.analyzer) is not None:
            return None
        return want

    def _cheapest_layout(self, ctx, frags):
        """Of the layouts that the fragments indexed by the loop's own variables already have, the one the others
        cost the fewest bytes to convert to (program order breaks ties); None when none has a layout."""
        laid = {b: ctx.layout_map[b] for b, idx in frags if ctx.layout_map.get(b) is not None
                and _same_vars(idx, self.vars) and _covers(ctx.layout_map[b].input_shape, self.extents)}

        def cost(lay):
            return sum(_tile_bytes(b) for b, other in laid.items() if not other.is_equal(lay))

        return min(laid.values(), key=cost, default=None)

    def _widest_bits(self):
        """Widest scalar type the body computes in (casts and constants included): vectors are capped at 128 bits
        of it, since TVM's CUDA codegen has no 8-lane fp32 vectors. An integer -> float cast counts as 32 bits: its
        fast form (op.int_cast) computes in 16-bit integers, which that codegen cannot broadcast to 8 lanes."""
        bits = [tvm.DataType(str(b.dtype)).bits for b, _, _ in self.accesses] or [32]

        def on_expr(e):
            bits.append(tvm.DataType(dtype_of(e)).bits)
            if (isinstance(e, tirx.Cast) and dtype_of(e.value).startswith(("int", "uint"))
                    and not isinstance(e.value, tirx.IntImm)):
                bits.append(32)

        walk(self.body, [(tirx.Cast, on_expr), (tirx.FloatImm, on_expr)])
        return max(bits)

    def _plan_vector(self, ctx, elem_bits):
        accesses = []
        for buf, idx, store in self.accesses:
            if is_global(buf) or is_shared(buf):
                accesses.append((buf, lambda ix, idx=idx: [substitute(e, dict(zip(self.vars, ix))) for e in idx],
                                 not store))
        return pick_vector(self.extents, ctx.threads, elem_bits, accesses, ctx.analyzer, {})

    def lower(self, ctx):
        split = tile_uniform_select(self.body, self.vars, self.extents, ctx.analyzer)
        if split is None:
            return self._lower_body(ctx, self.body)
        everywhere, nowhere, when_true, when_false = split
        # a mask that holds (or fails) on the whole tile, as a causal mask does off the diagonal, costs nothing there
        return tirx.IfThenElse(everywhere, self._lower_body(ctx, when_true), tirx.IfThenElse(
            nowhere, self._lower_body(ctx, when_false), self._lower_body(ctx, self.body)))

    def _lower_body(self, ctx, body):
        frag = self.loop_layout
        if frag is None:
            elem_bits = self._widest_bits()
            vec = 1 if self.scalar_only or self._writes_per_thread(ctx) else self._plan_vector_lower(ctx, elem_bits)

            def make(ix, _guard):
                # simplified under the lane's range, an index the lanes share reads as one (``(t * 8 + v) // 128``
                # is ``t // 16``): TVM's vectorizer would make it an index vector, 8 int32 lanes of which CUDA lacks
                ix = [ctx.analyzer.simplify(e) for e in ix]
                return fast_int_casts(substitute(body, dict(zip(self.vars, ix))), ctx.analyzer)

            return prefetch_loads(emit_by_plan(ctx, self.extents, vec, make, name="par"), ctx.analyzer)
        vec = fragment_vector_width(frag, min(4, max(1, 128 // self._widest_bits())), ctx.analyzer)
        # a reducer written at an index the vector lanes share would fold the lanes into one register: one lane
        vec = 1 if self.scalar_only or self._writes_per_thread(ctx) else self._check_vector(ctx, frag, vec)
        self._check_ownership(ctx, frag)

        # blocks of fragments read in this loop's own threads: (buffer, indices, register placement, offset)
        blocks = []
        for buf, idx in self._fragment_accesses():
            block = self._block_of(ctx, buf, idx)
            if block is not None and block[0].is_equal(frag):
                blocks.append((buf, idx) + block[1:])
                vec = placed_vector_width(block[1], vec)

        # a reducer's replicas are partials that T.finalize_reducer adds up: a replicated loop adds into replica 0's
        reducer_regs = {ctx.remap[b] for b in ctx.reducers if b in ctx.remap}

        def make_frag(ix, _guard, l_flat, rep):
            sub = dict(zip(self.vars, ix))
            element = fast_int_casts(substitute(body, sub), ctx.analyzer)
            at = [(buf, [substitute(e, sub) for e in idx], placement, off) for buf, idx, placement, off in blocks]
            element = _direct_fragment_access(element, frag, ix, l_flat, ctx, at)
            return _in_one_replica(element, rep, reducer_regs) if rep is not None else element

        return emit_by_fragment(ctx, frag, vec, make_frag, name="par", bounds=self.extents, replica=True)

    def _plan_vector_lower(self, ctx, elem_bits):
        accesses = []
        for buf, idx, store in self.accesses:
            if is_global(buf) or is_shared(buf):
                accesses.append((buf, lambda ix, idx=idx, buf=buf: _phys(ctx, buf, idx, self.vars, ix), not store))
        return pick_vector(self.extents, ctx.threads, elem_bits, accesses, ctx.analyzer,
                           {ctx.thread_var: tvm.ir.Range(0, ctx.threads)})

    def _check_vector(self, ctx, frag, vec):
        """Shrink `vec` until every global/shared store in the body is a contiguous, aligned vector and every load
        one too or a short span of a row (partition.load_vectorizable)."""
        bind = {ctx.thread_var: tvm.ir.Range(0, ctx.threads)}
        while vec > 1:
            if all((access_vectorizable if store else load_vectorizable)(
                    buf, lambda ix, idx=idx, buf=buf: _phys(ctx, buf, idx, self.vars, ix), self.extents, vec,
                    ctx.analyzer, bind)
                   for buf, idx, store in self.accesses if is_global(buf) or is_shared(buf)):
                return vec
            vec //= 2
        return 1

    def _owns(self, buf, idx, lay):
        """Whether each iteration finds ``buf[idx]`` in its own thread(s) under `lay` -- for a write, in exactly the
        threads holding it --, whatever the values of variables from outside the loop in `idx` (enumerated once per
        layout)."""
        key = (buf, tuple(idx), id(lay))
        if key not in self._owns_cache:
            self._owns_cache[key] = (lay, self._why_not_owned(buf, idx, lay, self.loop_layout) is None)
        return self._owns_cache[key][1]

    def _why_not_owned(self, buf, idx, lay, loop, analyzer=None, reducer=False):
        """None when each iteration of the loop run by `loop` finds ``buf[idx]`` in its own thread(s) under `lay`
        (see _owns); else a sentence naming an iteration that does not."""
        if not self._indexable(idx, outer=True):
            return f"the indices {list(idx)} read other buffers or call functions"
        return threads_agree(loop, self.vars, lay, idx, self.vars, self.extents, self.inner, analyzer,
                             exact=self._writes(buf) and not reducer)

    def _indexable(self, idx, outer=False):
        """Whether `idx` uses only the loop's variables and those of serial loops inside it (static ranges); with
        `outer`, also variables from outside the loop (but no buffer reads or calls)."""
        if outer:
            found = []
            for e in idx:
                walk(e, [(BufferLoadNode, found.append), (tvm.ir.Call, found.append)])
            return not found
        known = set(self.vars) | {v for v, _, _ in self.inner}
        return all(free_vars(e) <= known for e in idx)

    def _writes_per_thread(self, ctx):
        """Whether the loop writes a reducer or a T.alloc_local buffer: each thread's copy, at indices the vector
        lanes may share (``acc[i] += a[i, j]``), which a vectorized write would fold into one lane."""
        return any(store and (is_local(b) or b in ctx.reducers) for b, _, store in self.accesses)

    def _writes(self, buf):
        return any(store and b.same_as(buf) for b, _, store in self.accesses)

    def _block_of(self, ctx, buf, idx):
        """(sub-fragment, register placement, register offset) when ``buf[idx]`` reads a block of fragment `buf`
        (which has a layout): indices ``m_d + v_d`` over the loop variables in order, the loop's extents dividing
        the fragment's shape and each ``m_d`` -- free of the loop variables, e.g. ``c * 32`` for an enclosing ``c``
        -- a multiple of its extent, with the fragment repeating one sub-fragment over such blocks
        (Fragment.tile_of); else None."""
        lay = ctx.layout_map.get(buf)
        if lay is None or len(idx) != len(self.vars) or len(lay.input_shape) != len(self.extents):
            return None
        key = (buf, tuple(idx))
        if key not in self._blocks:
            self._blocks[key] = self._find_block(ctx, lay, idx)
        return self._blocks[key]

    def _find_block(self, ctx, lay, idx):
        mins = [ctx.analyzer.simplify(e - v) for e, v in zip(idx, self.vars)]
        if any(free_vars(m) & set(self.vars) for m in mins) or any(
                size % ext for size, ext in zip(lay.input_shape, self.extents)):
            return None
        try:
            sub, strides, placement = lay.tile_of(self.extents)
            return sub, placement, block_offset(mins, self.extents, strides, ctx.analyzer)
        except (LayoutError, ValueError):
            return None

    def _check_ownership(self, ctx, frag):
        """Every fragment element the loop touches must live in the thread that runs that iteration (checked by
        enumerating the static iteration space)."""
        for buf, idx in self._fragment_accesses():
            lay = ctx.layout_map.get(buf)
            if lay is None:
                raise TileOpError(f"fragment '{buf.name}' used in T.Parallel{tuple(self.extents)} has no layout")
            if _same_vars(idx, self.vars) and lay.is_equal(frag):
                continue
            block = self._block_of(ctx, buf, idx)
            if block is not None and block[0].is_equal(frag):
                continue
            # a reducer's replicas each take their own thread's writes (op.reducer): one replica per writer suffices
            why = self._why_not_owned(buf, idx, lay, frag, ctx.analyzer, reducer=buf in ctx.reducers)
            if why is None:
                continue
            free = sorted({str(n) for e in idx for n in free_vars(e) - set(self.vars) - {v for v, _, _ in self.inner}})
            if free:
                raise TileOpError(
                    f"T.Parallel{tuple(self.extents)} accesses fragment '{buf.name}' as {buf.name}{list(idx)}, "
                    f"which depends on {', '.join(free)} from outside the loop, and under the fragment's layout {lay} "
                    f"the threads holding those elements are not the threads running the iterations (loop layout "
                    f"{frag}) for every value of {', '.join(free)}: {why}. Read blocks of the fragment whose "
                    f"elements stay in the same threads from one value to the next (the loop's variables plus a "
                    f"multiple of a period of the layout), or copy it through shared memory")
            raise TileOpError(
                f"T.Parallel{tuple(self.extents)} accesses fragment '{buf.name}' as {buf.name}{list(idx)}, but "
                f"under its layout {lay} some elements live in other threads than the iterations that use them "
                f"(loop layout {frag}): {why}; copy it through shared memory or change the access")

    def describe(self):
        return f"T.Parallel{tuple(self.extents)}"


_COMPARISONS = (tirx.GE, tirx.GT, tirx.LE, tirx.LT)


def _unbounded(bound):
    return bound.same_as(int_set.pos_inf()) or bound.same_as(int_set.neg_inf())


def _holds_everywhere(cond, dom, analyzer):
    """(cond holds on the whole domain, cond fails on the whole domain) as conditions free of the loop vars, or
    None when `cond` is not a conjunction of integer comparisons."""
    if isinstance(cond, tirx.And):
        a, b = _holds_everywhere(cond.a, dom, analyzer), _holds_everywhere(cond.b, dom, analyzer)
        if a is None or b is None:
            return None
        return tirx.And(a[0], b[0]), tirx.Or(a[1], b[1])
    if not isinstance(cond, _COMPARISONS) or "int" not in str(dtype_of(cond.a)):
        return None
    d = analyzer.int_set(cond.a - cond.b, dom)
    lo, hi = d.min_value, d.max_value
    if _unbounded(lo) or _unbounded(hi):  # the analyzer's symbolic infinities must not reach the program
        return None
    if isinstance(cond, tirx.GE):
        return lo >= 0, hi < 0
    if isinstance(cond, tirx.GT):
        return lo > 0, hi <= 0
    if isinstance(cond, tirx.LE):
        return hi <= 0, lo > 0
    return hi < 0, lo >= 0


def tile_uniform_select(body, vars_, extents, analyzer):
    """For a loop body ``buf[...] = if_then_else(cond, a, b)`` whose condition compares integer expressions of the
    loop variables (a causal or bounds mask): (cond holds on every iteration, cond fails on every iteration, the
    body storing `a`, the body storing `b`), conditions free of the loop variables; else None."""
    if not isinstance(body, tirx.BufferStore):
        return None
    v = body.value
    if not (isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name.endswith(".if_then_else")):
        return None
    dom = {x: tvm.sym.IntervalSet(0, e - 1) for x, e in zip(vars_, extents)}
    both = _holds_everywhere(v.args[0], dom, analyzer)
    if both is None:
        return None
    everywhere, nowhere = (analyzer.simplify(c) for c in both)
    if any(isinstance(c, tirx.IntImm) for c in (everywhere, nowhere)):
        return None  # decided statically: the simplifier already drops the select or the mask is needed anyway
    loop_vars = set(vars_)
    free = []
    walk(everywhere, (tvm.ir.Var, lambda n: free.append(n)))
    walk(nowhere, (tvm.ir.Var, lambda n: free.append(n)))
    if any(f in loop_vars for f in free):
        return None
    return (everywhere, nowhere, tirx.BufferStore(body.buffer, v.args[1], body.indices),
            tirx.BufferStore(body.buffer, v.args[2], body.indices))


def _tile_bytes(buf):
    return int(np.prod([int(d) for d in buf.shape])) * tvm.DataType(str(buf.dtype)).bits // 8


def _covers(shape, extents):
    return len(shape) == len(extents) and all(s >= e for s, e in zip(shape, extents))


def _inner_loops(body):
    """[(var, min, extent)] of the loops nested in a T.Parallel body whose bounds are constants."""
    out = []

    def on_for(n):
        if isinstance(n.min, tirx.IntImm) and isinstance(n.extent, tirx.IntImm):
            out.append((n.loop_var, int(n.min.value), int(n.extent.value)))

    walk(body, (tirx.For, on_for))
    return out


def _same_vars_padded(indices, vars_, buf):
    """Whether `indices` are the loop variables in order with a constant 0 at each unit dimension of `buf` beside
    them (``logits[i, 0]`` of a (64, 1) fragment in a loop over i)."""
    shape = [int(d) if isinstance(d, tirx.IntImm) else None for d in buf.shape]
    if len(indices) != len(shape):
        return False
    rest = [i for i, n in zip(indices, shape) if not (n == 1 and isinstance(i, tirx.IntImm) and i.value == 0)]
    return _same_vars(rest, vars_)


def _uses(expr, var):
    return any(u.same_as(var) for u in free_vars(expr))


def _shifted_vars(indices, vars_, analyzer):
    """Whether each of `indices` is a loop variable plus a term free of the loop's variables, or free of them, every
    loop variable used exactly once and in loop order (``acc[i + s * 16, j]``, ``lse[k, i]``, ``logits[i, 0]``; not
    a transposed read, whose tile is better converted than written out from the reader's threads)."""
    reads = []
    for e in indices:
        walk(e, [(BufferLoadNode, reads.append), (tvm.ir.Call, reads.append)])
    if reads:
        return False
    found = []
    split = split_offsets(indices, vars_, analyzer)
    if split is None:
        return False
    for base in split[0]:
        used = [v for v in vars_ if _uses(base, v)]
        if len(used) > 1:
            return False
        if used:
            if not isinstance(analyzer.simplify(base - used[0]), tirx.IntImm):
                return False
            found.append(used[0])
        elif not isinstance(base, tirx.IntImm):
            return False
    return len(found) == len(vars_) and all(a.same_as(b) for a, b in zip(found, vars_))


def _scalar_access(buf, idx):
    """Whether ``buf[idx]`` reads the one element of a one-element fragment by constant indices."""
    return all(isinstance(i, tirx.IntImm) and i.value == 0 for i in idx) and all(
        isinstance(d, tirx.IntImm) and d.value == 1 for d in buf.shape)


def _as_shape(frag, buf):
    """`frag` (a projection) over `buf`'s shape when the two differ only by unit dimensions."""
    shape = [int(d) for d in buf.shape]
    if list(frag.input_shape) == shape:
        return frag
    if [d for d in shape if d != 1] != [d for d in frag.input_shape if d != 1]:
        return frag  # not the same elements: the conflict names both
    pos = [d for d, e in enumerate(shape) if e != 1]

    def pick(vs):
        return [vs[d] for d in pos] or [tirx.const(0, "int32")]

    rep = int(frag.replicate)
    if rep > 1:
        return Fragment(shape, lambda *a: frag.map_thread(pick(a[:-1]), a[-1]), lambda *a: frag.map_index(pick(a)),
                        replicate=rep)
    return Fragment(shape, lambda *a: frag.map_thread(pick(a)), lambda *a: frag.map_index(pick(a)))


def _subset_of_vars(indices, vars_):
    """Positions of `indices` in `vars_` if the indices are distinct loop vars in loop order, else None."""
    pos = []
    for i in indices:
        hit = [k for k, v in enumerate(vars_) if isinstance(i, tvm.ir.Var) and i.same_as(v)]
        if not hit:
            return None
        pos.append(hit[0])
    if pos != sorted(set(pos)) or len(pos) == len(vars_):
        return None
    return pos


def _phys(ctx, buf, idx, vars_, ix):
    sub = [substitute(e, dict(zip(vars_, ix))) for e in idx]
    if is_shared(buf) and buf in ctx.remap:
        return ctx.physical_index(buf, sub)[1]
    return sub


def _in_one_replica(stmt, rep, registers=()):
    """`stmt` (one element of a loop run by a replicated layout, every replica running it) with its effects beyond
    the thread's own registers -- stores to shared or global memory, calls such as atomics, and stores to
    `registers` (a reducer's: its replicas are partials that are added up) -- made by replica 0 alone (`rep` is the
    element's replica number): TileLang guards a replicated loop's stores so."""
    if isinstance(rep, tirx.IntImm):
        return stmt if rep.value == 0 else _drop_effects(stmt, registers)
    first = tirx.EQ(rep, tirx.const(0, dtype_of(rep)))

    def on_store(n):
        return tirx.IfThenElse(first, n, None) if _effect(n.buffer, registers) else n

    def on_eval(n):
        return tirx.IfThenElse(first, n, None) if isinstance(n.value, tvm.ir.Call) else n

    return map_nodes(stmt, [(tirx.BufferStore, on_store), (tirx.Evaluate, on_eval)], order="post")


def _effect(buf, registers) -> bool:
    return is_global(buf) or is_shared(buf) or buf in registers


def _drop_effects(stmt, registers=()):
    """`stmt` for a replica other than 0 (see _in_one_replica): its stores to memory (and `registers`) and calls
    removed."""
    nop = tirx.Evaluate(tirx.const(0, "int32"))

    def on_store(n):
        return nop if _effect(n.buffer, registers) else n

    def on_eval(n):
        return nop if isinstance(n.value, tvm.ir.Call) else n

    return map_nodes(stmt, [(tirx.BufferStore, on_store), (tirx.Evaluate, on_eval)], order="post")


def _direct_fragment_access(body, frag, ix, l_flat, ctx, blocks=()):
    """Rewrite fragment accesses to per-thread local indices: `l_flat` for fragments laid out like the loop and
    indexed by its own indices, the block's placement of `l_flat` plus its offset for `blocks` ((buffer, indices,
    placement, offset): a block of a fragment whose sub-fragment is the loop's layout), the fragment's local offset
    otherwise (ownership was checked)."""
    same_layout = {b for b in ctx.remap if is_fragment(b) and ctx.layout_map.get(b) is not None
                   and ctx.layout_map[b].is_equal(frag)}

    def same(idx):
        return len(idx) == len(ix) and all(a.same_as(b) for a, b in zip(idx, ix))

    def local(buf, idx):
        if buf in same_layout and same(idx):
            return l_flat
        for b, at, placement, offset in blocks:
            if b.same_as(buf) and tvm_ffi.structural_equal(list(idx), at):
                return ctx.analyzer.simplify(placement.map([l_flat], ctx.analyzer)[0] + offset)
        return ctx.layout_map[buf].local_offset(idx, ctx.analyzer)

    def on_load(n):
        if is_fragment(n.source) and n.source in ctx.remap:
            return tirx.BufferLoad(ctx.remap[n.source], [local(n.source, list(n.indices))])
        return n

    def on_store(n):
        if is_fragment(n.buffer) and n.buffer in ctx.remap:
            return tirx.BufferStore(ctx.remap[n.buffer], n.value, [local(n.buffer, list(n.indices))])
        return n

    return map_nodes(body, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store)], order="post")
