"""Whether a pipelined loop is warp-specialized: decided once, before InjectSoftwarePipeline builds any loop.

A top-level ``T.Pipelined`` loop with a derived schedule is built as a TMA producer warpgroup + wgmma consumer
warpgroups (:mod:`.ws_loops`) when: the target has everything the split emits (:data:`WS_FEATURES`: TMA loads,
mbarrier transaction counts, setmaxnreg, wgmma -- sm_90a only, `tilex.ir.hardware.ARCH_FEATURES`), warp
specialization and TMA are not disabled, the block is whole warpgroups with room for one more
(threads % 128 == 0, threads + 128 <= 1024), a consumer is a wgmma gemm, every producer
copy is TMA-able and not written ``T.copy(..., disable_tma=True)``, and the producer can compute its copies' coordinates
itself. The producer runs none of the consumers' statements: a coordinate may read a local variable only if it is
a scalar bound once at the top of the kernel (``bx = b1``, whose value the producer is given; see
:func:`kernel_scalars`). Otherwise the loop stays on the cp.async pipeline, where every thread copies.

A program that synchronizes itself (:func:`manual_synchronization`: T.ws regions or tile operators under a
condition on the thread index, its own mbarriers, T.tma_copy / T.async_copy / T.wgmma_gemm) is never
warp-specialized: it is compiled as written (InjectSoftwarePipeline leaves its loops serial).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex import config
from tilex.ir import intrin
from tilex.ir.hardware import MBARRIER_TX, SETMAXNREG, TMA_LOAD, WGMMA, supports
from tilex.ir.names import BARRIER_INIT_OP, THREAD_RANGE, WS_PRODUCER
from tilex.ir.visit import BufferLoadNode, is_op_call, map_nodes, seq_items, walk
from tilex.op.explicit_async import ASYNC_COPY_OP, TMA_COPY_OP, WGMMA_GEMM_OP
from tilex.op.tma_load import tma_eligible
from tilex.transform.pipeline.analysis import write_counts

LOCAL_SCOPES = ("local", "local.fragment")

#: What a warp-specialized loop emits: TMA producer loads on mbarriers with transaction counts, register
#: reallocation between the roles, wgmma consumers.
WS_FEATURES = (TMA_LOAD, MBARRIER_TX, SETMAXNREG, WGMMA)


def target_allows_warp_specialization(target) -> bool:
    """Whether `target` has every feature of :data:`WS_FEATURES`."""
    return all(supports(target, f) for f in WS_FEATURES)


def warp_specialization_on(target) -> bool:
    """Whether kernels for `target` may be warp-specialized on TMA pipelines: the target has the features and
    neither ``tilex.disable_warp_specialized`` nor ``tilex.disable_tma`` is set."""
    if config.get("disable_warp_specialized", False) or config.get("disable_tma", False):
        return False
    return target is not None and target_allows_warp_specialization(target)


def manual_synchronization(body) -> str | None:
    """Why the tile program `body` synchronizes itself (so that tilex's warp specialization and pipelining must not
    transform it), or None: it runs regions of its block on some of its threads (``tilex.thread_range``: T.ws, a
    branch on the thread index with tile operators), waits on mbarriers of its own (T.alloc_barrier and the
    mbarrier calls), issues copies or MMAs it waits for itself (T.tma_copy, T.async_copy, T.wgmma_gemm)."""
    reasons = []

    def note(reason):
        if reason not in reasons:
            reasons.append(reason)

    user_async = {TMA_COPY_OP: "T.tma_copy", ASYNC_COPY_OP: "T.async_copy", WGMMA_GEMM_OP: "T.wgmma_gemm"}
    barrier_calls = (intrin.MBAR_INIT, intrin.MBAR_WAIT, intrin.MBAR_ARRIVE, intrin.MBAR_ARRIVE_EXPECT_TX,
                     intrin.MBAR_EXPECT_TX, intrin.CP_ASYNC_MBAR_ARRIVE_NOINC)

    def on_attr(a):
        if a.attr_key == THREAD_RANGE:
            note("its threads run regions of their own (T.ws, or tile operators under a condition on the thread "
                 "index)")

    def on_call(c):
        if is_op_call(c, BARRIER_INIT_OP) or any(intrin.is_call(c, n) for n in barrier_calls):
            note("it synchronizes on mbarriers of its own (T.alloc_barrier)")
        elif isinstance(c.op, tvm.ir.Op) and c.op.name in user_async:
            note(f"it waits for its own asynchronous operations ({user_async[c.op.name]})")

    walk(body, [(tirx.AttrStmt, on_attr), (tvm.ir.Call, on_call)])
    return "; ".join(reasons) if reasons else None


def warp_specializable(ctx, loop, plan) -> bool:
    """Whether `loop` (with its derived `plan`, in the kernel of pipelining context `ctx`) is warp-specialized."""
    if not warp_specialization_on(ctx.target):
        return False
    if manual_synchronization(ctx.root) is not None:
        return False  # compiled as written
    if ctx.threads is None or loop not in ctx.top_level or not any(ctx.is_wgmma_gemm(c) for c in plan.consumers):
        return False
    if ctx.threads % 128 or ctx.threads + 128 > 1024:
        return False
    if not all(tma_eligible(op.src, op.dst) and not getattr(op, "disable_tma", False) for _, op in plan.producers):
        return False
    return not consumer_locals_read_by_producer(ctx.root, loop, plan)


def kernel_items(root):
    """The statements directly inside the kernel's launch scope."""
    node = root
    while isinstance(node, tirx.AttrStmt):
        node = node.body
    return seq_items(node)


def has_ws_producer(items) -> bool:
    """Whether InjectSoftwarePipeline built a warp-specialized loop among the kernel statements `items` (its
    ``tilex.ws_producer`` region)."""
    return any(isinstance(s, tirx.AttrStmt) and s.attr_key == WS_PRODUCER for s in items)


def kernel_scalars(kernel_body, items):
    """{one-element local buffer: its value} for the scalars bound once among `items` (the kernel's top-level
    statements, in order; ``bx = b1`` becomes such a store): a value written by no other statement of
    `kernel_body`, with earlier scalars substituted into later ones."""
    stores = write_counts(kernel_body)
    scalars = {}
    for s in items:
        if (isinstance(s, tirx.BufferStore) and s.buffer.scope() == "local" and stores[s.buffer] == 1
                and all(hasattr(d, "value") and int(d.value) == 1 for d in s.buffer.shape)):
            scalars[s.buffer] = resolve_scalars(s.value, scalars)
    return scalars


def resolve_scalars(node, scalars):
    """`node` with loads of the buffers in `scalars` replaced by their values."""
    if not scalars:
        return node
    return map_nodes(node, (BufferLoadNode, lambda n: scalars.get(n.source, n)))


def consumer_locals_read_by_producer(root, loop, plan) -> list[str]:
    """Names of the local variables the producer's copies (coordinates, loop bounds) would read once the kernel's
    scalars are substituted: values only the consumer warpgroups compute."""
    scalars = kernel_scalars(root, kernel_items(root))
    exprs = [loop.min, loop.extent]
    for _, op in plan.producers:
        exprs += [*op.src.mins, *op.src.extents, *op.dst.mins]
    read = set()
    for e in exprs:
        walk(resolve_scalars(e, scalars), (BufferLoadNode, lambda n: read.add(n.source)))
    return sorted({b.name for b in read if b.scope() in LOCAL_SCOPES})

