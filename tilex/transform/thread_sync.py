"""ThreadSync (among TVM's passes, before MergeSharedMemoryAllocations): block barriers for shared memory, with
each shared tile planned on its own.

Consumes: flat per-thread TIR whose ``shared.dyn`` tiles the merge will keep apart
(tilex.transform.shared_tiles.KeepTilesApart ran), so that no two of them share memory.
Produces: the same with a block barrier (``tvm_storage_sync``) before every statement that may read shared memory
another thread wrote, or overwrite memory another thread read, since the last barrier.

TVM's ThreadSync plans every ``shared.dyn`` access as one array, because TVM merges those buffers afterwards and may
overlap them. It would put a barrier between a read of one tile and a write of another: in a loop that reads packed
codes and writes the decoded tile, one per element. Here the tiles are planned under the static ``shared`` scope,
where TVM tells buffers apart, and get their scope back afterwards. A kernel with a ``shared.dyn`` buffer that is a
view of another (a DeclBuffer) keeps TVM's planning.

Where barriers may go. A barrier must be reached by every thread of the block (or of the region whose named
barrier it is). TVM places barriers inside a condition only when told it is uniform (``tvm_thread_invariant``), and
never inside a ``while``; it does place them inside any ``for``. tilex.transform.block_uniform decides which
conditions every thread evaluates alike (block indices, parameters, read-only global tensors, shared memory the
planning sees, ``T.alloc_var`` scalars written alike, ...) and which loops run different iterations in different
threads; conditions of the first kind are marked, loops of the second kind that touch shared memory are put under a
condition TVM will not place a barrier in. A condition that reads shared memory (``if flag[0] == ...``), which TVM's
access planner cannot place, is computed into a variable just before its ``if``.

When TVM still refuses a barrier (one is needed inside a branch it may not hold): the kernel is planned again with
every branch on an interval of threads (``if tx < 256``, T.ws) as a thread region (`tilex.transform.thread_regions`):
region by region, the barriers inside a region becoming named barriers over its threads. A barrier still needed
inside a statement the threads may run differently -- a branch on a per-thread value, a divergent loop, a
``while`` -- has no correct place: moving it before the statement (TileLang's way, with a warning) leaves both
conflicting accesses after it, unordered. Such a kernel is a ValueError naming the statement, unless the program
places its own barriers (TileLang's ``TL_DISABLE_THREAD_STORAGE_SYNC``, tilex option ``trust_program_barriers``):
then that statement's inside keeps only the program's barriers, and the rest of the kernel is planned as usual.

Atomics on shared memory (``tilex::atomic_*(&s[i], ...)``): TVM's planner does not see an address taken with
``address_of``, so each is given to it as an access pointer that reads and writes the element, and a statement that
touches shared memory through atomics only is planned as one statement reading and writing those tiles as a whole:
barriers against the plain accesses before and after it, none between its atomics.

T.async_copy's ``tilex.async_write`` markers (the tile a cp.async writes) are read here and dropped.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.tirx import _ffi_api
from tvm.tirx import op as tirx_op

from tilex import config
from tilex.ir import intrin
from tilex.ir.names import ASYNC_WRITE_OP, KEEP_ALIVE_OP
from tilex.ir.source import add_location, span_of
from tilex.ir.visit import (BufferLoadNode, buffers_used, is_op_call, is_sync, map_nodes, mutate, seq, seq_items,
                            substitute, walk)
from tilex.transform.block_uniform import BlockUniformity, is_shared
from tilex.transform.thread_regions import has_regions, mark_thread_regions, sync_regions

#: tilex option (tilex.config.KNOWN; TileLang's TL_DISABLE_THREAD_STORAGE_SYNC sets it): the program places its
#: own barriers where tilex finds no correct place for one
TRUST_PROGRAM_BARRIERS = "trust_program_barriers"
_SKIP = tvm_ffi.WalkResult.SKIP

_DYNAMIC = "shared.dyn"
_STATIC = "shared"


def _rescoped(buf, scope):
    t = buf.ty
    ty = _ffi_api.BufferType(scope, t.dtype, t.shape, t.strides, t.elem_offset, t.data_alignment, t.offset_factor,
                             t.layout, t.allocated_addr, t.span)
    return _ffi_api.BufferVar(buf.name, ty, buf.span)


def _dynamic_tiles(body):
    """The ``shared.dyn`` buffers `body` allocates, or None when one is declared over another's memory or, with
    two or more, when nothing keeps the merge from overlapping them."""
    allocated, declared, kept = [], [], []
    walk(body, [(tirx.AllocBuffer, lambda n: allocated.append(n.buffer)),
                (tirx.DeclBuffer, lambda n: declared.append(n.buffer)),
                (tvm.ir.Call, lambda n: kept.append(n) if is_op_call(n, KEEP_ALIVE_OP) else None)])
    tiles = [b for b in allocated if str(b.scope()) == _DYNAMIC]
    if any(str(b.scope()) == _DYNAMIC for b in declared) or (len(tiles) > 1 and not kept):
        return None
    return tiles


def _hoist_shared_conditions(body):
    """(body with each ``if`` whose condition loads shared memory as ``c = condition; if c``, {c: condition})."""
    hoisted = {}

    def on_if(node):
        if not any(str(b.scope()).startswith("shared") for b in buffers_used(node.condition)):
            return node
        c = tirx.Var("cond", "bool")
        hoisted[c] = node.condition
        return tirx.SeqStmt([tirx.Bind(c, node.condition),
                             tirx.IfThenElse(c, node.then_case, node.else_case, span=node.span)])

    return map_nodes(body, (tirx.IfThenElse, on_if)), hoisted


def _restore_conditions(body, hoisted):
    """The hoisted conditions back in their ``if`` (TVM's shared-memory merge reads loads only in statements it
    knows), the barriers ThreadSync put before them staying."""
    if not hoisted:
        return body

    def on_bind(node):
        return tirx.Evaluate(tirx.const(0, "int32")) if any(node.var.same_as(c) for c in hoisted) else node

    return substitute(map_nodes(body, (tirx.Bind, on_bind)), hoisted)  # RemoveNoOp later drops the no-ops


_INVARIANT = "tirx.tvm_thread_invariant"
_DIVERGENT_LOOP = "tilex.divergent_loop"  # while planning: `if guard(): <loop>` around a divergent loop (this file)
_DIVERGENT_LOOP_GUARD = "tilex_divergent_loop"  # ... its condition, opaque to TVM (a constant would count as uniform)
_WHILE_LOOP = "tilex.while_loop"  # while planning: a while loop's stand-in, a for loop reading the condition first
_WHILE_CONDITION = "tilex_while_condition"  # ... that read (this file)
_PROBE = "tilex.sync_probe"  # while probing: one statement that may not hold barriers, by index (this file)
_HIDDEN = "tilex_sync_hidden"  # a statement left to the program's own barriers, by index (this file)
_ATOMICS = "tilex_sync_atomics"  # a statement touching shared memory through atomics only, by index (this file)


def _touches_shared(stmt) -> bool:
    found = []

    def on_call(c):
        if is_op_call(c, "tirx.tvm_access_ptr") and any(is_shared(b) for b in _buffer_vars(c.args[1])):
            found.append(c)

    walk(stmt, (tvm.ir.Call, on_call))
    return bool(found) or any(is_shared(b) for b in buffers_used(stmt))


def _buffer_vars(expr) -> set:
    out = set()
    walk(expr, (tvm.ir.Var, lambda v: out.add(v) if tirx.is_buffer_var(v) else None))
    return out


def _guarded(key, loop, span=None):
    """`loop` under ``if guard():`` (a condition TVM cannot evaluate, so it places no barrier inside), in an
    attribute `key` that :func:`_unmark` takes away."""
    guard = tirx.IfThenElse(tirx.call_extern("bool", _DIVERGENT_LOOP_GUARD), loop, None, span=span)
    return tirx.AttrStmt(tirx.const(0, "int32"), key, tirx.const(0, "int32"), guard)


def _while_stand_in(node, divergent):
    """The ``while`` loop `node` as TVM's ThreadSync should see it: a loop of unknown trip count whose body first
    reads the condition (TVM plans no barriers inside a ``while``, and misses what one iteration's accesses need
    against the next's), in a ``tilex.while_loop`` attribute; under a guard when it is `divergent`."""
    loop = tirx.For(tirx.Var("iteration", "int32"), tirx.const(0, "int32"), tirx.Var("trips", "int32"),
                    tirx.ForKind.SERIAL,
                    tirx.SeqStmt([tirx.Evaluate(tirx.call_extern("int32", _WHILE_CONDITION, node.condition)),
                                  node.body]), span=node.span)
    inner = _guarded(_DIVERGENT_LOOP, loop, node.span).body if divergent else loop
    return tirx.AttrStmt(tirx.const(0, "int32"), _WHILE_LOOP, tirx.const(0, "int32"), inner)


def _mark_uniform(body):
    """`body` as TVM's ThreadSync should see it (tilex.transform.block_uniform decides what is uniform):

    * the condition of each ``if`` that every thread of the block evaluates alike wrapped in
      ``tvm_thread_invariant``: TVM then places barriers inside it (all threads take the branch together), where
      it refuses to for other conditions -- a pipelined loop under ``if block_index_ok:`` of a sparse-attention
      kernel;
    * each divergent loop that touches shared memory (its threads run different iterations: per-thread bounds, or
      a break under a per-thread condition) under a condition TVM cannot evaluate (an attribute marks it), so that
      TVM refuses a barrier inside it as it refuses one inside a per-thread branch -- TVM itself would place it
      there, and the threads that left the loop would never reach it;
    * each ``while`` loop that touches shared memory as a ``for`` loop of unknown trip count that reads the
      condition first (:func:`_while_stand_in`; back to a ``while`` in :func:`_unmark`), guarded like a divergent
      loop when its condition is per-thread."""
    uni = BlockUniformity(body)
    if not uni.threads:
        return body

    def on_if(node):
        cond = node.condition
        if is_op_call(cond, _INVARIANT) or not uni.uniform(cond):
            return node
        return tirx.IfThenElse(tirx.call_intrin("bool", _INVARIANT, cond), node.then_case, node.else_case,
                               span=node.span)

    def on_for(node, m):
        body = m.mutate(node.body)
        loop = node if body.same_as(node.body) else tirx.For(node.loop_var, node.min, node.extent, node.kind, body,
                                                             node.thread_binding, node.annotations,
                                                             step=node.step, span=node.span)
        if not uni.divergent_loop(node) or not _touches_shared(node):
            return loop
        return _guarded(_DIVERGENT_LOOP, loop, node.span)

    def on_while(node, m):
        body = m.mutate(node.body)
        loop = node if body.same_as(node.body) else tirx.While(node.condition, body, span=node.span)
        if not _touches_shared(node):
            return loop
        return _while_stand_in(loop, not uni.uniform(node.condition) or uni.exits_apart(node.body))

    # the loops are looked up by identity: wrap them before the conditions are rebuilt around them
    body = mutate(body, [(tirx.For, on_for), (tirx.While, on_while)])
    return map_nodes(body, (tirx.IfThenElse, on_if))


def _is_guarded_loop(node) -> bool:
    """Whether `node` is a divergent loop (or a divergent while loop's stand-in) under its guard."""
    return (isinstance(node, tirx.AttrStmt) and node.attr_key in (_DIVERGENT_LOOP, _WHILE_LOOP)
            and isinstance(node.body, tirx.IfThenElse))


def _while_back(attr):
    """The ``while`` loop of a :func:`_while_stand_in` after planning. A barrier planned at the top of the stand-in's
    body, before the condition is read, orders the previous iteration's accesses before the next's: it goes to the
    end of the body (and before the loop, where TVM put one for the first iteration)."""
    inner = attr.body
    loop = inner.then_case if isinstance(inner, tirx.IfThenElse) else inner
    items = seq_items(loop.body)
    at = next(i for i, s in enumerate(items) if intrin.name_of(s) == _WHILE_CONDITION)
    cond = items[at].value.args[1]
    return tirx.While(cond, seq(items[at + 1:] + items[:at]), span=loop.span)


def _unmark(body):
    """The conditions and loops of `body` as they were before :func:`_mark_uniform`."""
    def on_attr(node):
        if node.attr_key == _WHILE_LOOP:
            return _while_back(node)
        if _is_guarded_loop(node):
            return node.body.then_case
        return node

    body = map_nodes(body, (tirx.AttrStmt, on_attr))
    return map_nodes(body, (tirx.IfThenElse, lambda n: tirx.IfThenElse(n.condition.args[0], n.then_case,
                                                                        n.else_case, span=n.span)
                            if is_op_call(n.condition, _INVARIANT) else n))


def _sync(func, scopes):
    mod = tvm.IRModule({"main": func})
    for scope in scopes:
        mod = s_tir.transform.ThreadSync(scope)(mod)
    return mod["main"]


def _plan(func):
    """TVM's ThreadSync over `func`, each ``shared.dyn`` tile planned on its own where they are kept apart."""
    tiles = _dynamic_tiles(func.body)
    if not tiles:
        return _sync(func, [_STATIC, _DYNAMIC])
    static = {b: _rescoped(b, _STATIC) for b in tiles}
    synced = _sync(func.with_body(substitute(func.body, static)), [_STATIC])
    return synced.with_body(substitute(synced.body, {s: d for d, s in static.items()}))


def _refusal(e) -> bool:
    """Whether `e` is TVM's ThreadSync refusing a barrier inside a condition it was not told is uniform."""
    return "inside condition" in str(e)


def _structured(func, plan):
    """`plan` over `func`, region by region where it has thread regions (tilex.transform.thread_regions)."""
    return sync_regions(func, plan) if has_regions(func.body) else plan(func)


def _plan_kernel(func, own_barriers, describe):
    """Barriers for `func`, trying in turn:

    1. TVM's planning of the kernel as it is (region by region where it has thread regions);
    2. when TVM refuses a barrier inside a condition: every branch on an interval of threads (``if tx < 256``)
       as a region of its own, planned by itself, its barriers named barriers over its threads;
    3. when a barrier is still needed inside a statement that the threads of the block may run differently (a
       branch on a per-thread value, a divergent loop, a ``while``): see :func:`_plan_per_thread`."""
    try:
        return _structured(func, _plan)
    except Exception as e:  # noqa: BLE001 - only TVM's refusal to place a barrier inside a condition goes on
        if not _refusal(e):
            raise
    marked = mark_thread_regions(func, wanted=lambda stmt: True)
    if not marked.same_as(func):
        try:
            return _structured(marked, _plan)
        except Exception as e:  # noqa: BLE001 - as above
            if not _refusal(e):
                raise
    return _structured(marked, lambda f: _plan_per_thread(f, own_barriers, describe))


def _plan_per_thread(func, own_barriers, describe):
    """TVM's planning of `func` (a kernel, or a region's stand-in), where a block barrier would be needed inside a
    statement that the threads of the block may run differently (TVM refuses it; the threads that skip the
    statement would never reach the barrier, and moving it before the statement -- TileLang's way, with a
    warning -- would leave both conflicting accesses after it, unordered):

    * when the program places its own barriers (TileLang's ``TL_DISABLE_THREAD_STORAGE_SYNC``, tilex option
      ``trust_program_barriers``), each such statement is planned as one statement that reads and writes, as a
      whole, every shared tile it touches: barriers go before and after it where other statements need them, and
      its inside keeps the program's barriers only -- TileLang plans none at all under that key;
    * otherwise a ValueError names the statement (its condition or loop, and where it was written)."""
    hidden = {}
    body = func.body
    while True:
        try:
            planned = _plan(func.with_body(body))
            return planned.with_body(_unhide(planned.body, hidden))
        except Exception as e:  # noqa: BLE001 - only TVM's refusal goes on
            if not _refusal(e):
                raise
            refusal = e
        needing = _needing_barriers(func.with_body(body))
        if not needing:
            raise refusal
        if not own_barriers:
            raise describe([_unhide(s, hidden) for s in needing])
        body = _hide(body, needing, hidden)


def _needing_barriers(func):
    """The statements of `func` that the threads of the block may run differently (a branch whose condition is
    not marked uniform, a guarded divergent loop) inside which TVM's planning puts a barrier when told every
    condition is uniform: the outermost such statements, in program order."""
    originals = []

    def probe(original, stand_in):
        originals.append(original)
        return tirx.AttrStmt(tirx.const(len(originals) - 1, "int32"), _PROBE, tirx.const(0, "int32"), stand_in)

    def on_if(node, m):
        then_case = m.mutate(node.then_case)
        else_case = m.mutate(node.else_case) if node.else_case is not None else None
        if is_op_call(node.condition, _INVARIANT):
            if then_case.same_as(node.then_case) and (else_case is None or else_case.same_as(node.else_case)):
                return node
            return tirx.IfThenElse(node.condition, then_case, else_case, span=node.span)
        told = tirx.IfThenElse(tirx.call_intrin("bool", _INVARIANT, node.condition), then_case, else_case,
                               span=node.span)
        return probe(node, told)

    def on_attr(node, m):
        if _is_guarded_loop(node):
            guard = node.body
            inner = m.mutate(guard.then_case)
            told = tirx.IfThenElse(tirx.call_intrin("bool", _INVARIANT, guard.condition), inner, None)
            return probe(node, tirx.AttrStmt(node.node, node.attr_key, node.value, told))
        return m.default_mutate(node)

    probed = mutate(func.body, [(tirx.IfThenElse, on_if), (tirx.AttrStmt, on_attr)])
    if not originals:
        return []
    planned = _plan(func.with_body(probed))
    needing = []

    def on_probe(node):
        if node.attr_key != _PROBE:
            return None
        i = int(node.node.value)
        if _count_syncs(node.body) > _count_syncs(originals[i]):
            needing.append(originals[i])
            return _SKIP  # the outermost one
        return None

    walk(planned.body, (tirx.AttrStmt, on_probe), order="pre")
    return needing


def _count_syncs(stmt) -> int:
    found = []
    walk(stmt, (tirx.Evaluate, lambda e: found.append(e) if is_sync(e) else None))
    return len(found)


def _shared_accesses(stmt) -> dict:
    """{shared buffer: rw mask} that TVM's ThreadSync sees in `stmt` (loads, stores, access pointers)."""
    masks = {}

    def add(buf, m):
        if is_shared(buf):
            masks[buf] = masks.get(buf, 0) | m

    def on_call(c):
        if is_op_call(c, "tirx.tvm_access_ptr"):
            mask = c.args[4]
            m = int(mask.value) if isinstance(mask, tirx.IntImm) else 3
            for b in _buffer_vars(c.args[1]):
                add(b, m)
        if is_op_call(c, "tirx.address_of"):
            return _SKIP
        return None

    walk(stmt, [(tvm.ir.Call, on_call), (BufferLoadNode, lambda n: add(n.source, 1)),
                (tirx.BufferStore, lambda n: add(n.buffer, 2))], order="pre")
    return masks


def _stand_in(stmt, hidden, name):
    """One statement in place of `stmt` (kept in `hidden` under its index) that reads and writes, as a whole, the
    shared tiles `stmt` reads and writes."""
    i = len(hidden)
    hidden[i] = stmt
    ptrs = []
    for buf, m in _shared_accesses(stmt).items():
        size = 1
        for e in buf.shape:
            size = size * e
        if m:
            ptrs.append(tirx_op.tvm_access_ptr(tirx_op.type_annotation(str(buf.dtype)), buf.data, 0, size, m))
    return tirx.Evaluate(tirx.call_extern("void", name, tirx.const(i, "int32"), *ptrs))


def _hide(body, stmts, hidden):
    """`body` with each of `stmts` replaced by one statement accessing, as a whole, the shared tiles it touches
    (its index in `hidden`, which keeps the statement). A branch whose condition was computed just before it
    (a condition reading shared memory, ``c = condition; if c``) goes with that computation: the condition is the
    branch's own."""
    index = {s: None for s in stmts}

    def stand_in(stmts_hidden):
        return _stand_in(stmts_hidden[0] if len(stmts_hidden) == 1 else tirx.SeqStmt(stmts_hidden), hidden, _HIDDEN)

    def bound_condition(prev, node):
        return (isinstance(prev, tirx.Bind) and isinstance(node, tirx.IfThenElse)
                and node.condition.same_as(prev.var))

    def on_seq(node, m):
        items, out, changed = list(node.seq), [], False
        for s in items:
            if s in index:
                if out and bound_condition(out[-1], s):
                    out[-1] = stand_in([out[-1], s])
                else:
                    out.append(stand_in([s]))
                changed = True
                continue
            new = m.mutate(s)
            changed = changed or not new.same_as(s)
            out.append(new)
        return tirx.SeqStmt(out) if changed else node

    def on_other(node, m):
        if node in index:  # a hidden statement that is not in a sequence
            return stand_in([node])
        return m.default_mutate(node)

    return mutate(body, [(tirx.SeqStmt, on_seq), (tirx.IfThenElse, on_other), (tirx.AttrStmt, on_other)])


def _unhide(body, hidden, name=_HIDDEN):
    """`body` with the statements :func:`_hide` (or :func:`_hide_atomic_statements`: `name`) took out back in
    place."""
    if not hidden:
        return body

    def back(node):
        if intrin.name_of(node) == name:
            return hidden[int(node.value.args[1].value)]
        return node

    for _ in range(len(hidden) + 1):  # a hidden statement may hold one hidden before it
        found = []
        walk(body, (tirx.Evaluate, lambda e: found.append(e) if intrin.name_of(e) == name else None))
        if not found:
            return body
        body = map_nodes(body, (tirx.Evaluate, back))
    return body


def _describer(hoisted):
    """A function that builds the ValueError for statements that need a barrier the block cannot reach alike."""
    def condition_text(cond):
        if is_op_call(cond, _INVARIANT):
            cond = cond.args[0]
        return str(substitute(cond, hoisted)) if hoisted else str(cond)

    def what(stmt):
        """(the statement, why its threads may run it differently)"""
        if _is_guarded_loop(stmt):
            loop = stmt.body.then_case
            if stmt.attr_key == _WHILE_LOOP:
                first = seq_items(loop.body)[0]
                cond = first.value.args[1] if intrin.name_of(first) == _WHILE_CONDITION else None
                return (f"the loop `while {condition_text(cond)}`",
                        "its threads may leave it at different iterations (a condition, or a break / continue "
                        "under a condition, that is not the same in every thread)")
            name = loop.loop_var.name
            return (f"the loop `for {name} in range({loop.min}, {loop.min + loop.extent})`",
                    "its threads may run different iterations (bounds that are not the same in every thread, or a "
                    "break / continue under a per-thread condition)")
        if isinstance(stmt, tirx.SeqStmt):  # a branch with its condition computed just before it
            stmt = stmt.seq[-1]
        return (f"the branch `if {condition_text(stmt.condition)}`",
                "its condition may differ between threads (it reads the thread index or a per-thread value)")

    def first_span(stmt):
        found = []
        walk(stmt, (tirx.Stmt, lambda n: found.append(n) if span_of(n) is not None else None), order="pre")
        return span_of(found[0]) if found else None

    def describe(stmts):
        first = stmts[0]
        place, why = what(first)
        more = f" (and {len(stmts) - 1} more such statement{'s' if len(stmts) > 2 else ''})" if len(stmts) > 1 \
            else ""
        exc = ValueError(
            f"ThreadSync: shared memory accessed inside {place}{more} needs a block barrier inside it, but {why}: "
            f"the threads that do not run it would never reach that barrier. Make the condition one every thread "
            f"shares (a T.alloc_var set from global memory or from shared memory after a barrier, ...), split the "
            f"statement so that the barrier falls between two parts, or place the barriers yourself and compile "
            f"with pass_configs={{tilex.PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC: True}}")
        return add_location(exc, first_span(first))

    return describe


def _expose_shared_atomics(body):
    """`body` with the shared element an atomic helper updates (``tilex::atomic_*(&s[i], ...)``) given as an access
    pointer read and written (``tvm_access_ptr``, one element per value the helper adds): TVM's planner does not
    see an address taken with ``address_of``, so an atomic on shared memory got no barrier against the writes and
    reads of other threads around it."""

    def on_call(call):
        if not intrin.is_atomic(call):
            return call
        args = list(call.args)  # the helper's name, its pointer, its values
        ptr = args[1]
        if not (is_op_call(ptr, "tirx.address_of") and isinstance(ptr.args[0], BufferLoadNode)):
            return call
        load = ptr.args[0]
        buf = load.source
        if not is_shared(buf) or len(load.indices) != 1:
            return call
        count = max(len(args) - 2, 1) if intrin.is_vector_atomic(call) else 1
        args[1] = tirx.call_intrin("handle", "tirx.tvm_access_ptr", tirx_op.type_annotation(str(buf.dtype)),
                                   buf.data, load.indices[0], tirx.const(count, "int32"), tirx.const(3, "int32"))
        return tirx.call_extern(call.dtype, *args)

    return map_nodes(body, (tvm.ir.Call, on_call), order="post")


def _exposed_atomic(call) -> bool:
    """Whether `call` is an atomic helper :func:`_expose_shared_atomics` gave an access pointer."""
    return intrin.is_atomic(call) and is_op_call(call.args[1], "tirx.tvm_access_ptr")


def _hide_shared_atomics(body):
    """The inverse of :func:`_expose_shared_atomics` after planning: each atomic helper takes ``&s[i]`` again."""

    def on_call(call):
        if not _exposed_atomic(call):
            return call
        _, data, offset, _, _ = call.args[1].args
        (buf,) = _buffer_vars(data)
        args = list(call.args)
        args[1] = tirx.address_of(tirx.BufferLoad(buf, [offset]))
        return tirx.call_extern(call.dtype, *args)

    return map_nodes(body, (tvm.ir.Call, on_call), order="post")


def _hide_atomic_statements(body, hidden):
    """`body` with each outermost statement that touches shared memory only through atomic helpers (exposed by
    :func:`_expose_shared_atomics`) replaced by one statement reading and writing those tiles as a whole: atomics
    need no barrier between one another, only against the plain accesses before and after them (TVM's planner,
    seeing each atomic as a read and a write, would put one between consecutive atomics of a loop). A kernel
    without such atomics is returned as it is, unvisited."""
    exposed = []
    walk(body, (tvm.ir.Call, lambda c: exposed.append(c) if _exposed_atomic(c) else None))
    if not exposed:
        return body

    def atomic_only(stmt) -> bool:
        atomics = []

        def on_call(c):
            if _exposed_atomic(c):
                atomics.append(c)
                return tirx.call_extern(c.dtype, intrin.name_of(c), *c.args[2:])  # its values may read shared
            return c

        rest = map_nodes(stmt, (tvm.ir.Call, on_call))
        return bool(atomics) and not _shared_accesses(rest)

    def on_stmt(node, m):
        if atomic_only(node):
            return _stand_in(node, hidden, _ATOMICS)
        return m.default_mutate(node)

    # (a Bind keeps its variable in view: an atomic whose old value is bound stays exposed, planned as a read and
    # a write)
    return mutate(body, [(tirx.IfThenElse, on_stmt), (tirx.For, on_stmt), (tirx.Evaluate, on_stmt),
                         (tirx.BufferStore, on_stmt)])


def _drop_async_writes(body):
    """T.async_copy's ``tilex.async_write`` markers, read by the planning, become no-ops (RemoveNoOp drops them)."""
    return map_nodes(body, (tirx.Evaluate, lambda n: tirx.Evaluate(tirx.const(0, "int32"))
                            if is_op_call(n.value, ASYNC_WRITE_OP) else n))


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.ThreadSync")
def ThreadSync(func, mod, ctx):  # noqa: N802
    body, hoisted = _hoist_shared_conditions(_expose_shared_atomics(func.body))
    atomics = {}
    body = _hide_atomic_statements(body, atomics)
    own_barriers = bool(config.get(TRUST_PROGRAM_BARRIERS, False))
    synced = _plan_kernel(func.with_body(_mark_uniform(body)), own_barriers, _describer(hoisted))
    body = _hide_shared_atomics(_unhide(_unmark(synced.body), atomics, _ATOMICS))
    return synced.with_body(_drop_async_writes(_restore_conditions(body, hoisted)))
