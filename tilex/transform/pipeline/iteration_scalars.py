"""Iteration scalars of a ``T.Pipelined`` loop, read as the expressions they hold (a step of InjectSoftwarePipeline,
before its schedule is chosen).

TileLang programs name a per-iteration value at the top of a pipelined loop's body (``j = d + i_ts``, then
``T.copy(K[b, j, ...], K_s)``); tilex's frontend keeps such a name in a one-element local buffer. The copies then
read a value the body computes, and a copy issued stages ahead would read the wrong iteration's: the loop stayed
serial. Here such a scalar is replaced, in the loop body, by its value.

Consumes: tile-level IR after the pipelined loops' allocations are hoisted (``inject._hoist_loop_allocations``).
Produces: the same IR in which, for each loop annotated ``tilex.num_stages``, every top-level statement of its body
that stores into a one-element local buffer written nowhere else in the kernel a value reading only buffers the loop
does not write (the loop variable and kernel scalars), and that no earlier statement of the body reads (a value
carried from the previous iteration), has the loads of that buffer in the statements after it replaced by the
value; the store itself is dropped when nothing else in the kernel reads the buffer.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.names import NUM_STAGES, REGION_OP
from tilex.ir.visit import BufferLoadNode, buffers_written, count_accesses, is_op_call, map_nodes, seq, seq_items, walk
from tilex.transform.pipeline.analysis import accesses, write_counts


def inline_iteration_scalars(body):
    """`body` (a kernel's statements) with the iteration scalars of its pipelined loops inlined (module docstring)."""
    writes = write_counts(body)
    return map_nodes(body, (tirx.For, lambda loop: _inline(loop, body, writes)
                            if NUM_STAGES in loop.annotations else loop))


def _is_scalar_store(stmt, writes):
    if not isinstance(stmt, tirx.BufferStore):
        return False
    buf = stmt.buffer
    return (buf.scope() == "local" and len(buf.shape) == 1 and _const(buf.shape[0]) == 1 and writes.get(buf) == 1
            and all(_const(i) == 0 for i in stmt.indices))


def _const(x):
    return int(x.value) if hasattr(x, "value") and isinstance(x.value, int) else None


def _inline(loop, kernel, writes):
    stmts = seq_items(loop.body)
    # stores, tile operators' written regions, and buffers whose address a call takes (an atomic)
    written_in_loop = accesses(loop.body)[1] | buffers_written(loop.body)
    out = list(stmts)
    changed = False
    for i, st in enumerate(stmts):
        if not _is_scalar_store(st, writes):
            continue
        buf, value = st.buffer, st.value
        loads, calls = [], []
        walk(value, [(BufferLoadNode, lambda n: loads.append(n.source)), (tvm.ir.Call, calls.append)])
        if calls or any(b.same_as(w) for b in loads for w in written_in_loop) \
                or any(count_accesses(s, buf) for s in out[:i] if s is not None) \
                or any(_as_region(s, buf) for s in out[i + 1:] if s is not None):
            continue  # a call's value, a value the loop changes, the previous iteration's value, a tile operand
        replace = _replacer(buf, value)
        for k in range(i + 1, len(out)):
            if out[k] is not None:
                out[k] = map_nodes(out[k], (BufferLoadNode, replace))
        rest = [s for k, s in enumerate(out) if k != i and s is not None]
        # buf is written once (statement i): every other access of it is a read
        elsewhere = count_accesses(kernel, buf) > count_accesses(loop, buf)
        out[i] = st if elsewhere or any(count_accesses(s, buf) for s in rest) else None
        changed = True
    if not changed:
        return loop
    body = seq([s for s in out if s is not None])
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations,
                    span=loop.span)


def _replacer(buf, value):
    def replace(load):  # one parameter: tvm_ffi passes callbacks as many arguments as they declare
        return value if load.source.same_as(buf) else load
    return replace


def _as_region(stmt, buf):
    """Whether a tile operator of `stmt` takes `buf` as an operand (its region names it with a load)."""
    found = []
    walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if is_op_call(c, REGION_OP) and c.args[0].source.same_as(buf)
                else None))
    return bool(found)
