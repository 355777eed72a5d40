"""Stream-K for PersistentTiles: ``tilex.stream_k`` = "auto" (the default) when a cost rule says it pays
(`stream_k_pays`), 1 always, 0 never.

Consumes: the consumer statements of a warp-specialized kernel that PersistentTiles makes persistent (one of them
holds the pipeline loop, whose ``tilex.ws_pipeline_lo`` / ``_hi`` attributes let it run any segment ``[lo, hi)``
of a unit's K iterations), and how the persistent grid shares its units among its workers (:class:`Workers`).
Produces: a :class:`StreamKPlan` when the units (tiles, or tile groups of a cluster) do not divide evenly among
the workers (blocks, or clusters), or may not (a unit count of kernel sizes); then, after the
``units // workers`` rounds of whole units, the loop over the segments of a worker's equal share of the
remaining units' K iterations (:func:`segment_loop`). The worker holding a unit's first iteration owns it; the
others leave fp32 partial accumulators in the launch's workspace and raise a flag (``intrin.streamk_fixup``,
src/tilex/stream_k.h); the owner adds them and alone performs the epilogue's global writes, while the
shared-memory steps stay unconditional so the barriers between them do too.
The workspace is a pointer the host code asks for before each launch (``intrin.streamk_workspace``: one zeroed
buffer per launch stream, tilex.jit.workspace), so launches on different streams never share partial sums.

Whether it pays ("auto"): a worker runs ``ceil(units / workers)`` units' iterations without stream-K, and with it
``units // workers`` whole units plus an equal share of the rest, each shared iteration costing
SHARED_ITERATION_COST, plus a fixup: a shared unit is cut into ``workers / rest`` segments, each of whose partial
sums goes out to L2 and comes back to the owner, costing ``2 x accumulator bytes / bytes one iteration loads``
iterations, plus FIXUP_ITERATIONS for the flags. Stream-K is used when that saves at least MIN_GAIN of the time
and a block's accumulator is at least MIN_ACCUMULATOR_BYTES.
Fitted on the H100 to the plain 128x256 program at seven shapes (benchmarks/README.md, issue 18 sixth session):
it pays for a skinny GEMM (a few tiles for many multiprocessors, a long K loop) and for the last half round of a
large grid (8192^3: +2 %, 4096x28672x8192: +1.9 %), not for a short K loop (1024^3) nor for a grid of under four
rounds (4096^3: -3 %, where the shared iterations are too large a part of the kernel).
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx

from tilex import config
from tilex.ir import intrin
from tilex.ir.shared_memory import buffer_bits
from tilex.ir.visit import buffers_used, is_op_call, seq_items, walk
from tilex.transform.pipeline.analysis import written_shared


#: Iterations' worth of the flag handshake between the blocks sharing a unit.
FIXUP_ITERATIONS = 2
#: What a shared iteration costs against one of a whole unit (fitted: 1.1-1.2 on the H100).
SHARED_ITERATION_COST = 1.15
#: Least fraction of the kernel's time stream-K must save to be chosen.
MIN_GAIN = 0.005
#: Least accumulator of a block (bytes) for the rule to consider stream-K: smaller tiles (the transposed or narrow
#: tiles of skinny GEMMs) read more than they compute, and spreading their K loop over more multiprocessors did not
#: pay where the rule predicted 12-34 % (H100: 16x4096x4096 -14 %, 128x4096x4096 -4 %, 16x28672x8192 -0.5 %).
MIN_ACCUMULATOR_BYTES = 64 * 1024


def stream_k_pays(units: int, workers: int, n: int, acc_bytes: int, iteration_bytes: int) -> bool:
    """Whether sharing the units that do not divide among the workers in segments of their `n` K iterations saves
    at least MIN_GAIN (module docstring); `acc_bytes`: the fp32 accumulator of a block, `iteration_bytes`: what
    one of its K iterations loads."""
    rest = units % workers
    if rest == 0 or acc_bytes < MIN_ACCUMULATOR_BYTES:
        return False
    whole = -(-units // workers) * n
    segments = workers / rest  # of each shared unit
    fixup = FIXUP_ITERATIONS + segments * 2 * acc_bytes / max(1, iteration_bytes)
    shared = units // workers * n + SHARED_ITERATION_COST * -(-rest * n // workers) + fixup
    return shared <= (1 - MIN_GAIN) * whole


@dataclass(frozen=True)
class StreamKPlan:
    """What the stream-K rewrite needs."""

    n: int  # K iterations of one unit (the pipeline loop's static trip count)
    acc: tirx.Buffer  # the fp32 accumulator the segments of a unit exchange
    threads: int  # threads of the consumer region
    thread: tirx.Var  # the thread index (``threadIdx.x``)
    workspace: tirx.Var  # the launch's partial sums and flags (a float pointer the host code binds)

    @property
    def words(self):
        """fp32 words of :attr:`acc` per thread: what the fixup exchanges and the workspace holds per thread."""
        return (buffer_bits(self.acc) + 31) // 32

    def workspace_binding(self, grid):
        """The host statement binding :attr:`workspace` before a launch of `grid` blocks."""
        return intrin.streamk_workspace(self.workspace, self.words, self.threads, grid)


@dataclass(frozen=True)
class Workers:
    """How a persistent grid shares its units (tiles, or tile groups of a cluster) among its workers (blocks, or
    clusters of ``size`` blocks)."""

    grid: int  # blocks
    pid: tirx.Var  # the block index (``blockIdx.x`` of the persistent grid)
    size: int  # blocks per worker
    rank: tvm.ir.Expr  # the block's rank in its worker
    worker: tvm.ir.Expr  # the worker's index
    units: int | tvm.ir.PrimExpr  # an expression when the grid height is a kernel size
    workers: int

    @property
    def rounds(self):
        """Units every worker runs whole (with stream-K, before its share of the rest)."""
        if isinstance(self.units, int):
            return self.units // self.workers
        return tirx.floordiv(self.units, self.workers)


def _writes_global(stmt):
    found = []

    def on_store(n):
        if n.buffer.scope() == "global":
            found.append(n)

    def on_eval(n):
        if intrin.starts_with(n, intrin.GLOBAL_WRITE_PREFIXES):
            found.append(n)

    walk(stmt, [(tirx.BufferStore, on_store), (tirx.Evaluate, on_eval)])
    return bool(found)


def _only_if(stmt, cond):
    """`stmt` guarded by `cond` when it writes global memory (the epilogue of a block that does not write the
    tile still runs its shared-memory steps, so the barriers between them stay unconditional): a sequence or a
    loop (an epilogue staged in column blocks) is guarded statement by statement inside, so that its
    shared-memory steps stay outside the condition (`cond` does not change in the loop)."""
    if not _writes_global(stmt):
        return stmt
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_only_if(s, cond) for s in stmt])
    if isinstance(stmt, tirx.For) and written_shared(stmt.body):
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, _only_if(stmt.body, cond),
                        stmt.thread_binding, stmt.annotations)
    return tirx.IfThenElse(cond, stmt, None)


def _local_buffers(stmt):
    return [b for b in buffers_used(stmt) if b.scope() == "local"]


def _uses_buffer(stmt, buf):
    """Whether `stmt` reads or writes `buf` (through loads, stores or its data pointer, as tensor-core calls do)."""
    found = []
    # (TVM 0.27 spells a buffer's data pointer as the call tirx.buffer_data(var))
    data = buf.data
    key = data.args[0] if isinstance(data, tvm.ir.Call) else data

    def on_call(c):
        if is_op_call(c, "tirx.buffer_data") and c.args[0].same_as(key):
            found.append(c)

    walk(stmt, (tvm.ir.Call, on_call))
    return bool(found) or any(b.same_as(buf) for b in _local_buffers(stmt))


def stream_k_plan(consumer_items, loop_at, units, workers, threads, thread_var, n, iteration_bytes=0):
    """The :class:`StreamKPlan` for the consumer statements `consumer_items` (`loop_at`: the indices of those
    holding the pipeline loop, of trip count `n`, each iteration loading `iteration_bytes`), or None when stream-K
    does not apply: off (``tilex.stream_k`` 0, or "auto", the default, and `stream_k_pays` says no), units split
    evenly already, a trip count that is not static, or not exactly one fp32 accumulator (a local buffer the K loop and
    the statements after it both use)."""
    asked = str(config.get("stream_k", "auto"))
    if asked not in ("1", "auto") or not hasattr(n, "value"):
        return None
    if isinstance(units, int) and units % workers == 0:
        return None  # (a symbolic unit count may divide evenly at run time: its segment loop is then empty)
    if len(loop_at) != 1:
        return None
    at = loop_at[0]
    after = _local_buffers(tirx.SeqStmt(consumer_items[at + 1:])) if at + 1 < len(consumer_items) else []
    acc = [b for b in after if _uses_buffer(consumer_items[at], b)]
    if len(acc) != 1 or str(acc[0].dtype) != "float32" or (buffer_bits(acc[0]) // 32) % 4:
        return None
    if asked == "auto" and not (isinstance(units, int) and stream_k_pays(
            units, workers, int(n.value), buffer_bits(acc[0]) * threads // 8, iteration_bytes)):
        return None
    workspace = tirx.Var("streamk_ws", tvm.ir.PointerType(tvm.ir.PrimType("float32"), "global"))
    return StreamKPlan(int(n.value), acc[0], threads, thread_var, workspace)


def _fixup(plan, w, stmt, loop_at, t, lo, partial, wsk):
    """After a partial unit's K loop (statement `loop_at` of `stmt`): exchange partial accumulators; only the
    block holding the sum writes."""
    items = seq_items(stmt)
    acc = plan.acc
    last = tirx.Var("sk_last", "int32")
    call = intrin.streamk_fixup(
        plan.words, plan.threads, w.grid, plan.workspace, tirx.address_of(tirx.BufferLoad(acc, [0] * len(acc.shape))),
        plan.thread, t, lo, w.pid, w.size, w.rank, w.workers,
        tirx.const(wsk, "int64") if isinstance(wsk, int) else tirx.Cast("int64", wsk), plan.n)
    bind = tirx.Bind(last, tirx.if_then_else(partial, call, tirx.const(1, "int32")))
    post = [_only_if(x, last != 0) for x in items[loop_at + 1:]]
    return tirx.SeqStmt(items[:loop_at + 1] + [bind] + post)


def segment_loop(plan, w, stmt, name, place, loop_at=None):
    """The loop over the segments of worker ``w.worker``'s share of the remaining units' iterations: the share
    ``[start, end)`` of them crosses unit boundaries in segments ``[lo, hi)`` of unit ``t``.
    ``place(stmt, unit, base, lo, hi)`` gives `stmt` (its pipeline loop) run on iterations ``[lo, hi)`` of `unit`
    with pipeline counter ``k - lo + base``; with `loop_at` (the index of the statement of `stmt` holding the
    pipeline loop) the partial accumulators are exchanged after it and only the unit's owner writes global
    memory."""
    n = plan.n
    # iterations shared in segments; with a symbolic unit count (a T.dynamic M) an expression, 0 when even
    wsk = (w.units % w.workers if isinstance(w.units, int) else tirx.floormod(w.units, w.workers)) * n
    j = tirx.Var(name + "_sk", "int32")
    start = tirx.floordiv(w.worker * wsk, w.workers)
    end = tirx.floordiv((w.worker + 1) * wsk, w.workers)
    t = tirx.floordiv(start, n) + j
    lo = tirx.max(start - t * n, 0)
    hi = tirx.min(end - t * n, n)
    # the pipeline counter is k - lo + base: iterations this worker ran before the segment, plus k - lo
    base = w.rounds * n + t * n + lo - start
    if loop_at is not None:
        stmt = _fixup(plan, w, stmt, loop_at, t, lo, tirx.Or(lo > 0, hi < n), wsk)
    seg = place(stmt, w.rounds * w.workers + t, base, lo, hi)
    segments = tirx.floordiv(end - 1, n) - tirx.floordiv(start, n) + 1
    return tirx.For(j, 0, segments, tirx.ForKind.SERIAL, seg)
