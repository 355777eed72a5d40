"""Partitioning an element-wise loop nest over the threads of a block.

Every SIMT tile operation (copy, fill, T.Parallel) is a loop nest over a tile. It is lowered in one of two ways:

* by a loop layout (a Fragment): thread ``t`` runs the elements it owns, found through the Fragment's inverse,
  local index by local index (register tiles stay in registers because local indices are compile-time); for a box
  of the Fragment's tile (a copy of a fragment slice), only the registers holding elements of the box;
* by a coalesced plan: the flattened tile is dealt out in vectors of ``v`` elements to consecutive threads.

In both cases the innermost ``v`` elements become a vectorized loop when every access allows it.
"""
from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx

from tilex.ir.visit import BufferLoadNode, buffers_written, map_nodes, row_major_offset, seq, substitute, walk
from tilex.ir.visit import lanes as lanes_of
from tilex.layout import Fragment
from tilex.layout.fragment_access import box_chunks
from tilex.op.base import TileOpError, is_global


def unflatten(flat, shape):
    idx = []
    for s in reversed(shape):
        idx.append(tirx.floormod(flat, s))
        flat = tirx.floordiv(flat, s)
    return list(reversed(idx))


def vector_unflatten(chunk, lane, extents, vector):
    """The tile indices of lane `lane` of the `chunk`-th `vector`-element chunk of a row-major tile whose last
    extent `vector` divides. For a last extent that is not a power of two, the lane is added to the last index
    after the chunk is unflattened (so the vectorizer sees consecutive addresses: ``(8 c + v) / 192`` is not
    provably ``8 c / 192``, and an index vector of 8 int32 lanes is not valid CUDA); otherwise the flat index is
    unflattened as a whole (the simplifier reduces it to the same form)."""
    last = _int(extents[-1])
    if vector == 1 or last is None or last & (last - 1) == 0 or last % vector:
        return unflatten(chunk * vector + lane, extents)
    idx = unflatten(chunk, list(extents[:-1]) + [last // vector])
    idx[-1] = idx[-1] * vector + lane
    return idx


def _int(x):
    if isinstance(x, int):
        return x
    if isinstance(x, tirx.IntImm):
        return int(x.value)
    return None


def static_shape(extents, what):
    out = []
    for e in extents:
        v = _int(e)
        if v is None:
            raise TileOpError(f"{what}: tile extents must be compile-time constants, got {list(extents)}")
        out.append(v)
    return out


def coalesced_plan(extents, threads, vector):
    """A Fragment dealing a tile out row-major in `vector`-element chunks to consecutive threads."""
    total = math.prod(extents)
    per_round = threads * vector
    if total % per_round != 0 and total > per_round:
        # pad the innermost dimension to whole rounds: the Fragment then covers a slightly larger tile and the
        # loops that run over it guard the padding (see emit_by_fragment's `bounds`)
        if extents[-1] % vector:
            return None
        rest = math.prod(extents[:-1])
        step = per_round // math.gcd(per_round, rest)
        padded = list(extents[:-1]) + [-(-extents[-1] // step) * step]
        return coalesced_plan(padded, threads, vector)
    if total < per_round:
        # fewer elements than one round: threads beyond total//vector stay idle
        def thread_fn(*ix):
            return tirx.floordiv(row_major_offset(ix, extents), vector)

        def index_fn(*ix):
            return tirx.floormod(row_major_offset(ix, extents), vector)

        return Fragment(extents, thread_fn, index_fn)

    last = extents[-1]
    if last & (last - 1) and last % vector == 0:
        # a last extent that is not a power of two: number the vector chunks (row, column // vector) directly, so
        # that the map is a fuse-then-split TVM can invert (the flat offset's // and % by a power of two over a
        # row of 192 elements is bijective but not provably so)
        chunks = list(extents[:-1]) + [last // vector]

        def chunk_of(ix):
            return row_major_offset(list(ix[:-1]) + [tirx.floordiv(ix[-1], vector)], chunks)

        def thread_fn(*ix):
            return tirx.floormod(chunk_of(ix), threads)

        def index_fn(*ix):
            return tirx.floordiv(chunk_of(ix), threads) * vector + tirx.floormod(ix[-1], vector)

        return Fragment(extents, thread_fn, index_fn)

    def thread_fn(*ix):
        return tirx.floormod(tirx.floordiv(row_major_offset(ix, extents), vector), threads)

    def index_fn(*ix):
        flat = row_major_offset(ix, extents)
        return tirx.floordiv(flat, per_round) * vector + tirx.floormod(flat, vector)

    return Fragment(extents, thread_fn, index_fn)


def pick_vector(extents, threads, elem_bits, accesses, analyzer, bind, max_bits=128):
    """Largest vector width (elements) valid for every access in `accesses`.

    accesses: list of (buffer, index_fn) or (buffer, index_fn, is_load) where index_fn(tile_indices) gives the
    buffer indices of a tile element; a width v is valid if the innermost tile extent is a multiple of v and, for
    each access, the innermost buffer index moves with the innermost tile index and the flattened offset of a
    vector's first element is a multiple of v (so vector loads/stores are aligned). A load may also stay within a
    v-element span of one row (`load_vectorizable`).
    """
    inner = extents[-1]
    v = max(1, max_bits // elem_bits)
    while v > 1:
        if inner % v == 0 and all(_entry_vectorizable(a, extents, v, analyzer, bind) for a in accesses):
            return v
        v //= 2
    return 1


def _entry_vectorizable(access, extents, v, analyzer, bind):
    buf, fn, *rest = access
    if rest and rest[0]:
        return load_vectorizable(buf, fn, extents, v, analyzer, bind)
    return access_vectorizable(buf, fn, extents, v, analyzer, bind)


def load_vectorizable(buffer, index_fn, extents, v, analyzer, bind):
    """Whether a load can sit in a `v`-lane vector loop: a contiguous aligned vector (`access_vectorizable`), or
    lanes that stay within v consecutive elements of one row -- the same element for every lane (a per-row scale)
    or a few (packed codes, ``codes[i, j // 2]``). TVM's vectorizer turns the latter into a broadcast or a
    lane-wise gather of neighbouring elements; correctness never depends on this choice, only speed."""
    if access_vectorizable(buffer, index_fn, extents, v, analyzer, bind):
        return True
    probe = [tirx.Var(f"_p{d}", "int32") for d in range(len(extents))]
    with analyzer_scope(analyzer, {**bind, **{p: tvm.ir.Range(0, e) for p, e in zip(probe, extents)}}):
        first = index_fn([*probe[:-1], probe[-1] * v])
        last = index_fn([*probe[:-1], probe[-1] * v + (v - 1)])
        for d, (a, b) in enumerate(zip(first, last)):
            delta = analyzer.simplify(b - a)
            if not isinstance(delta, tirx.IntImm):
                return False
            if delta.value != 0 and (d != len(first) - 1 or not 0 < delta.value < v):
                return False
    return True


def access_vectorizable(buffer, index_fn, extents, v, analyzer, bind):
    probe = [tirx.Var(f"_p{d}", "int32") for d in range(len(extents))]
    with analyzer_scope(analyzer, {**bind, **{p: tvm.ir.Range(0, e) for p, e in zip(probe, extents)}}):
        idx = index_fn([*probe[:-1], probe[-1] * v])
        idx_next = index_fn([*probe[:-1], probe[-1] * v + 1])
        # innermost buffer index must advance by exactly 1 with the innermost tile index, others stay
        for d, (a, b) in enumerate(zip(idx, idx_next)):
            delta = analyzer.simplify(b - a)
            want = 1 if d == len(idx) - 1 else 0
            if not (isinstance(delta, tirx.IntImm) and delta.value == want):
                return False
        shape = buffer.shape
        if any(_int(s) is None for s in shape[-1:]):
            return False
        flat = row_major_offset(idx, shape)
        return analyzer.can_prove_equal(tirx.floormod(flat, v), 0)


class analyzer_scope:
    """Bind loop/thread vars to ranges in an Analyzer for the duration of a `with` block."""

    def __init__(self, analyzer, bind):
        self.analyzer, self.bind = analyzer, bind

    def __enter__(self):
        for var, rng in self.bind.items():
            self.analyzer.bind(var, rng, allow_override=True)
        return self.analyzer

    def __exit__(self, *exc):
        return False


def emit_by_plan(ctx, extents, vector, make_body, name="i"):
    """Per-thread loop over a tile dealt out by the coalesced plan.

    make_body(indices, guard_indices) -> Stmt builds one (vector of) element(s); `guard_indices` are the indices of
    the vector's first element (use them for bounds checks so the check does not depend on the vector lane).
    """
    t = ctx.thread_var
    total = math.prod(extents)
    per_round = ctx.threads * vector
    rounds = -(-total // per_round)
    it = tirx.Var(f"{name}_it", "int32")
    lv = tirx.Var(f"{name}_v", "int32")
    if vector > 1:
        ctx.lane_vars.append(lv)
    ctx.analyzer.bind(it, tvm.ir.Range(0, rounds), allow_override=True)
    ctx.analyzer.bind(lv, tvm.ir.Range(0, vector), allow_override=True)
    chunk = it * ctx.threads + t
    indices = vector_unflatten(chunk, lv, extents, vector)
    guard_indices = unflatten(chunk * vector, extents)
    body = make_body(indices, guard_indices)
    if total % per_round != 0:
        body = tirx.IfThenElse((it * ctx.threads + t) * vector < total, body, None)
    body = _vector_loop(lv, vector, body)
    return _loop(it, rounds, body, unroll=rounds <= 16)


def emit_by_fragment(ctx, frag, vector, make_body, name="i", bounds=None, replica=False):
    """Per-thread loop over the elements this thread owns under Fragment `frag` (see emit_by_plan).

    `bounds` are the real extents of the tile when the fragment covers a padded one: padding is skipped. With
    `replica`, make_body takes a 4th argument: the replica number of the element (of the vector's first lane), or
    None when `frag` is not replicated.
    """
    t = ctx.thread_var
    if frag.thread_extent > ctx.threads:
        raise TileOpError(
            f"layout {frag} needs {frag.thread_extent} threads but the kernel has {ctx.threads}")
    inv = frag.inverse()
    lo = tirx.Var(f"{name}_l", "int32")
    lv = tirx.Var(f"{name}_v", "int32")
    if vector > 1:
        ctx.lane_vars.append(lv)
    nlocal = frag.local_size
    ctx.analyzer.bind(lo, tvm.ir.Range(0, max(nlocal // vector, 1)), allow_override=True)
    ctx.analyzer.bind(lv, tvm.ir.Range(0, vector), allow_override=True)
    l_flat = lo * vector + lv
    local_idx = unflatten(l_flat, list(frag.local_shape))
    logical = inv.map([t, *local_idx])[: len(frag.input_shape)]
    guard_local = unflatten(lo * vector, list(frag.local_shape))
    guard_out = inv.map([t, *guard_local])
    guard_logical = guard_out[: len(frag.input_shape)]
    rep = guard_out[len(frag.input_shape)] if int(frag.replicate) > 1 else None
    with analyzer_scope(ctx.analyzer, {t: tvm.ir.Range(0, ctx.threads), lo: tvm.ir.Range(0, nlocal // vector),
                                        lv: tvm.ir.Range(0, vector)}):
        logical = [ctx.analyzer.simplify(e) for e in logical]
        guard_logical = [ctx.analyzer.simplify(e) for e in guard_logical]
        rep = ctx.analyzer.simplify(rep) if rep is not None else None
    body = make_body(logical, guard_logical, l_flat, rep) if replica else make_body(logical, guard_logical, l_flat)
    if bounds is not None:
        conds = [g < b for g, b, e in zip(guard_logical, bounds, frag.input_shape) if e > b]
        for c in conds:
            body = tirx.IfThenElse(c, body, None)
    body = _vector_loop(lv, vector, body)
    body = _loop(lo, nlocal // vector, body, unroll=True)
    if frag.thread_extent < ctx.threads:
        body = tirx.IfThenElse(t < frag.thread_extent, body, None)
    return body


def emit_by_fragment_box(ctx, frag, vector, mins, extents, make_body, one_replica=False, name="i"):
    """Per-thread statements over the elements a thread holds under Fragment `frag` that lie in the box
    ``[mins, mins + extents)`` of its tile (see emit_by_fragment for `make_body`; a chunk of `vector` registers
    must hold consecutive elements of one row and replica, all inside the box or all outside). With
    `one_replica`, only replica 0's copies (a replicated fragment written out to memory stores each element once).

    A box with a constant corner visits only the register chunks some thread holds an element of it in, testing
    the thread where not every thread does; a box whose corner is an expression visits every chunk under a test."""
    t = ctx.thread_var
    if frag.thread_extent > ctx.threads:
        raise TileOpError(f"layout {frag} needs {frag.thread_extent} threads but the kernel has {ctx.threads}")
    nd = len(frag.input_shape)
    inv = frag.inverse()
    lo = tirx.Var(f"{name}_l", "int32")
    lv = tirx.Var(f"{name}_v", "int32")
    if vector > 1:
        ctx.lane_vars.append(lv)
    nchunks = frag.local_size // vector
    shape = list(frag.local_shape)
    logical = inv.map([t, *unflatten(lo * vector + lv, shape)])[:nd]
    first = inv.map([t, *unflatten(lo * vector, shape)])
    conds = []
    for d, (m, e) in enumerate(zip(mins, extents)):
        if _int(m) == 0 and int(e) == frag.input_shape[d]:
            continue
        conds += [m <= first[d], first[d] < m + e]
    if one_replica and int(frag.replicate) > 1:
        conds.append(first[nd] == 0)
    if all(_int(m) is not None for m in mins):
        chunks = box_chunks(frag, [_int(m) for m in mins], [int(e) for e in extents], vector, one_replica)
    else:
        chunks = [(q, False) for q in range(nchunks)]

    def chunk_stmt(q, guarded, run=None):
        """(test or None, statement) of chunk `q` (an int), or of the chunks `run` (a range) as the loop variable
        `lo`."""
        at = {lo: tirx.const(q, "int32")} if q is not None else {}
        lo_range = tvm.ir.Range.from_min_extent(run.start, len(run)) if run is not None else tvm.ir.Range(0, nchunks)
        cond = None
        with analyzer_scope(ctx.analyzer, {t: tvm.ir.Range(0, ctx.threads), lo: lo_range,
                                            lv: tvm.ir.Range(0, vector)}):
            ix = [ctx.analyzer.simplify(substitute(e, at)) for e in logical]
            gix = [ctx.analyzer.simplify(substitute(e, at)) for e in first[:nd]]
            body = make_body(ix, gix, ctx.analyzer.simplify(substitute(lo * vector + lv, at)))
            if guarded and conds:
                cond = conds[0]
                for c in conds[1:]:
                    cond = tirx.And(cond, c)
                cond = ctx.analyzer.simplify(substitute(cond, at))
                if isinstance(cond, tirx.IntImm) and cond.value:
                    cond = None
        return cond, _vector_loop(lv, vector, body)

    def guarded(cond, body):
        return body if cond is None else tirx.IfThenElse(cond, body, None)

    if not chunks:
        return tirx.Evaluate(tirx.const(0, "int32"))
    qs = [q for q, _ in chunks]
    every = {e for _, e in chunks}
    if len(every) == 1 and qs == list(range(qs[0], qs[0] + len(qs))) and len(qs) > 1:
        # one run of chunks, alike: a loop over it
        body = guarded(*chunk_stmt(None, not every.pop(), range(qs[0], qs[0] + len(qs))))
        body = tirx.For(lo, qs[0], len(qs), tirx.ForKind.UNROLLED, body)
    else:
        # chunk by chunk; neighbours under the same test share it
        groups = []
        for q, e in chunks:
            cond, stmt = chunk_stmt(q, not e)
            if groups and tvm_ffi.structural_equal(groups[-1][0], cond):
                groups[-1][1].append(stmt)
            else:
                groups.append((cond, [stmt]))
        body = seq([guarded(cond, seq(stmts)) for cond, stmts in groups])
    if frag.thread_extent < ctx.threads:
        body = tirx.IfThenElse(t < frag.thread_extent, body, None)
    return body


def block_offset(mins, extents, strides, analyzer):
    """Register offset ``sum_d (mins[d] // extents[d]) * strides[d]`` of the fragment block that starts at `mins`
    (`strides` from Fragment.tile_of); raises ValueError naming the first start not provably a multiple of its
    extent."""
    offset = 0
    for m, e, st in zip(mins, extents, strides):
        if not analyzer.can_prove_equal(tirx.floormod(m, e), 0):
            raise ValueError(f"a fragment block must start at a multiple of its extent {e}, got {m}")
        offset = offset + tirx.floordiv(m, e) * st
    return analyzer.simplify(offset)


def placed_vector_width(placement, vec):
    """Largest v <= `vec` (halving) such that `placement` (a 1-d register Layout, Fragment.tile_of) maps every
    aligned run of v registers onto v consecutive ones, so a vector access of a block stays one vector."""
    import numpy as np

    regs = np.asarray(placement.map_numpy(np.arange(placement.size))[0], dtype=np.int64).reshape(-1)
    while vec > 1:
        if placement.size % vec == 0:
            runs = regs.reshape(-1, vec)
            if (runs == runs[:, :1] + np.arange(vec)).all():
                return vec
        vec //= 2
    return 1


def fragment_vector_width(frag, max_vec, analyzer):
    """Largest v <= max_vec such that local indices l*v .. l*v+v-1 hold consecutive innermost logical elements."""
    inv = frag.inverse()
    t = tirx.Var("_t", "int32")
    nd = len(frag.input_shape)
    v = max_vec
    while v > 1:
        if frag.local_size % v == 0 and len(frag.local_shape) >= 1:
            lo = tirx.Var("_lo", "int32")
            local0 = unflatten(lo * v, list(frag.local_shape))
            local1 = unflatten(lo * v + 1, list(frag.local_shape))
            with analyzer_scope(analyzer, {t: tvm.ir.Range(0, frag.thread_extent),
                                            lo: tvm.ir.Range(0, frag.local_size // v)}):
                a = inv.map([t, *local0])[:nd]
                b = inv.map([t, *local1])[:nd]
                ok = True
                for d in range(nd):
                    delta = analyzer.simplify(b[d] - a[d])
                    want = 1 if d == nd - 1 else 0
                    if not (isinstance(delta, tirx.IntImm) and delta.value == want):
                        ok = False
                        break
                if ok and analyzer.can_prove_equal(tirx.floormod(a[nd - 1], v), 0):
                    return v
        v //= 2
    return 1


def _vector_loop(var, extent, body):
    if extent == 1:
        return substitute(body, {var: tirx.const(0, "int32")})
    return tirx.For(var, 0, extent, tirx.ForKind.VECTORIZED, body)


def _loop(var, extent, body, unroll):
    if extent == 1:
        return substitute(body, {var: tirx.const(0, "int32")})
    kind = tirx.ForKind.UNROLLED if unroll else tirx.ForKind.SERIAL
    return tirx.For(var, 0, extent, kind, body)


def prefetch_loads(loop, analyzer, max_registers=64):
    """An unrolled element loop ``for it: body`` with the loads of buffers it does not write read for all
    iterations first, into registers: global loads whose address is the same for every lane of a vector (a per-row
    scale) as scalars, other global and shared loads as vectors. The loads then issue back to back and their
    latencies overlap; left in place, each would wait at the head of its iteration's chain, and a shared load
    could not pass the previous iteration's shared store (the compiler cannot tell the tiles apart).

    Unchanged: other loops, bodies with a condition (a guarded load must stay guarded), and loops whose loads
    would take more than `max_registers` 32-bit registers."""
    if not (isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.UNROLLED):
        return loop
    it, rounds = loop.loop_var, int(loop.extent)
    vectors, conditions = [], []
    written = buffers_written(loop.body)  # stores, atomics: their buffers are not prefetched
    walk(loop.body, [(tirx.For, lambda n: vectors.append(n) if n.kind == tirx.ForKind.VECTORIZED else None),
                     (tirx.IfThenElse, conditions.append), (tirx.Select, conditions.append),
                     (tvm.ir.Call, lambda n: conditions.append(n) if _is_select_call(n) else None)])
    if conditions or len(vectors) > 1:
        return loop
    lv, width = (vectors[0].loop_var, int(vectors[0].extent)) if vectors else (None, 1)
    found = []  # [(load, register buffer, per-lane)]

    def lane_free(indices):
        if lv is None:
            return list(indices)
        first = [substitute(i, {lv: tirx.const(0, "int32")}) for i in indices]
        last = [substitute(i, {lv: tirx.const(width - 1, "int32")}) for i in indices]
        with analyzer_scope(analyzer, {lv: tvm.ir.Range(0, width)}):
            if all(analyzer.can_prove_equal(a, b) for a, b in zip(first, last)):
                return first
        return None

    def on_load(n):
        buf = n.source
        if buf in written or lanes_of(n) != 1 or not (is_global(buf) or str(buf.scope()).startswith("shared")):
            return n
        # without a vector loop every load is one element a round (a shared one too: a transposed read)
        idx = lane_free(n.indices) if is_global(buf) or lv is None else None
        per_lane = idx is None
        key = tirx.BufferLoad(buf, list(n.indices) if per_lane else idx)
        slot = it * width + lv if per_lane else it
        for old, reg, lanes in found:
            if lanes == per_lane and tvm_ffi.structural_equal(old, key):
                return tirx.BufferLoad(reg, [slot])
        reg = tirx.decl_buffer((rounds * (width if per_lane else 1),), str(buf.dtype), f"{buf.name}_pre",
                               scope="local")
        found.append((key, reg, per_lane))
        return tirx.BufferLoad(reg, [slot])

    body = map_nodes(loop.body, (BufferLoadNode, on_load))
    registers = 0
    for _, reg, lanes in found:
        bits = tvm.DataType(str(reg.dtype)).bits * (width if lanes else 1)
        registers += rounds * -(-bits // 32)
    if not found or registers > max_registers:
        return loop
    scalars = [tirx.BufferStore(reg, load, [it]) for load, reg, lanes in found if not lanes]
    per_lane = [tirx.BufferStore(reg, load, [it * width + lv]) for load, reg, lanes in found if lanes]
    pre = list(scalars)
    if per_lane:
        pre.append(tirx.For(lv, 0, width, tirx.ForKind.VECTORIZED, seq(per_lane)))
    return seq([*[tirx.AllocBuffer(reg) for _, reg, _ in found],
                tirx.For(it, 0, rounds, tirx.ForKind.UNROLLED, seq(pre)),
                tirx.For(it, 0, rounds, tirx.ForKind.UNROLLED, body)])


def _is_select_call(call):
    return isinstance(call.op, tvm.ir.Op) and call.op.name.endswith("if_then_else")
