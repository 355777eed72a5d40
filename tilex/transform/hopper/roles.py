"""The role split of a warp-specialized kernel among TVM's passes: UnfoldRoles before ThreadSync, NamedBarriers
after it.

Consumes (UnfoldRoles): per-thread TIR after WarpSpecialize, whose role split is ``if t >= C: producer else:
consumer`` with the consumer statements in a ``tilex.ws_consumer`` region.
Produces (NamedBarriers, after TVM's ThreadSync placed its barriers): the same split, with every block barrier of
the consumer region turned into a named barrier over the C consumer threads.
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import WS_CONSUMER, WS_PRODUCER_SIDE
from tilex.ir.visit import is_sync, map_nodes, walk


def is_role_split(stmt):
    """Whether `stmt` is the ``if t >= C: producer else: consumer`` split WarpSpecialize builds."""
    return (isinstance(stmt, tirx.IfThenElse) and isinstance(stmt.else_case, tirx.AttrStmt)
            and stmt.else_case.attr_key == WS_CONSUMER)


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.UnfoldRoles")
def UnfoldRoles(func, mod, ctx):  # noqa: N802
    """Before TVM's ThreadSync: the role split ``if t >= C: producer else: consumer`` becomes the two branches in
    sequence (the producer's in a ``tilex.ws_producer_side`` attribute that keeps the condition). ThreadSync can
    then place the barriers the consumers' shared-memory accesses need (it refuses to insert any inside a
    condition); NamedBarriers folds the split back."""

    def on_if(node):
        if not is_role_split(node):
            return node
        return tirx.SeqStmt([tirx.AttrStmt(node.condition, WS_PRODUCER_SIDE, 0, node.then_case), node.else_case])

    return func.with_body(map_nodes(func.body, (tirx.IfThenElse, on_if)))


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.NamedBarriers")
def NamedBarriers(func, mod, ctx):  # noqa: N802
    """Folds UnfoldRoles' sequence back into ``if t >= C: producer else: consumer``; inside the consumer region
    block barriers become named barriers over the consumer threads. A barrier ThreadSync placed in the producer
    or between the roles could never be met by all threads: that is reported instead of emitted."""

    def on_attr(node):
        if node.attr_key != WS_CONSUMER:
            return node
        n = int(node.value.value)

        def on_eval(ev):
            if is_sync(ev):
                return intrin.named_barrier_sync(n)
            return ev

        return tirx.AttrStmt(node.node, node.attr_key, node.value, map_nodes(node.body, (tirx.Evaluate, on_eval)))

    def fold(seq):
        items = list(seq.seq)
        out, i = [], 0
        while i < len(items):
            s = items[i]
            if isinstance(s, tirx.AttrStmt) and s.attr_key == WS_PRODUCER_SIDE:
                j = i + 1
                while j < len(items) and is_sync(items[j]):
                    j += 1  # a barrier between the roles: each side is one set of threads, nothing to order
                cons = items[j] if j < len(items) else None
                if not (isinstance(cons, tirx.AttrStmt) and cons.attr_key == WS_CONSUMER):
                    raise ValueError("warp specialization: the consumer region does not follow the producer's")
                bad = []
                walk(s.body, (tirx.Evaluate, lambda e: bad.append(e) if is_sync(e) else None))
                if bad:
                    raise ValueError("warp specialization: the producer warpgroup would need a block barrier "
                                     "(its statements share memory with generic accesses); use "
                                     "pass_configs={'tilex.disable_warp_specialized': True}")
                out.append(tirx.IfThenElse(s.node, s.body, on_attr(cons)))
                i = j + 1
                continue
            out.append(s)
            i += 1
        return tirx.SeqStmt(out) if len(out) > 1 else out[0]

    def on_seq(seq):
        if any(isinstance(s, tirx.AttrStmt) and s.attr_key == WS_PRODUCER_SIDE for s in seq.seq):
            return fold(seq)
        return seq

    body = map_nodes(func.body, (tirx.SeqStmt, on_seq), order="post")
    # consumer regions not unfolded (kernels built without UnfoldRoles)
    body = map_nodes(body, (tirx.IfThenElse, lambda n: tirx.IfThenElse(n.condition, n.then_case, on_attr(n.else_case))
                            if is_role_split(n) and not _converted(n.else_case) else n))
    return func.with_body(body)


def _converted(consumer):
    found = []
    walk(consumer.body, (tirx.Evaluate, lambda e: found.append(e) if is_sync(e) else None))
    return not found
