"""What the two warp-specialized loop rewrites (:mod:`.ws_loops`, :mod:`.ws_groups`) share: the stage counter, the
*full* / *empty* mbarrier pairs, the producer loop and the statements around the two roles.

A load group is a list of (statement, CopyOp) global->shared copies that complete on one *full* barrier. Per
iteration and group the producer waits until the stage is empty (from the second round of stages on), arms
*full* with the group's bytes and issues one ``tilex.tma_load`` per copy.
"""
from __future__ import annotations

from tvm import tirx

from tilex.ir import intrin
from tilex.ir.names import WS_INIT, WS_PRODUCER
from tilex.ir.visit import seq, storage_sync
from tilex.op.region import Region
from tilex.op.tma_load import tma_bytes, tma_load_call


def ptr(buf, i):
    """Address of mbarrier `i` of the array `buf`."""
    return tirx.address_of(tirx.BufferLoad(buf, [i]))


class TmaStages:
    """The stages of one warp-specialized loop over `loop` with `stages` buffers per produced tile and `groups`
    load groups. ``g = k - lo + base`` numbers the iterations in the kernel's stream of them (``base``, ``lo``,
    ``hi`` are vars bound later: by PersistentTiles for a GEMM main loop, to 0 and the loop's bounds otherwise);
    stage ``s = g % stages`` and round ``it = g // stages`` (whose parity is the barrier phase)."""

    def __init__(self, loop, stages, groups):
        self.loop, self.stages = loop, stages
        self.k = loop.loop_var
        self.base = tirx.Var("ws_base", "int32")
        self.lo, self.hi = tirx.Var("ws_lo", "int32"), tirx.Var("ws_hi", "int32")
        self.g = self.k - self.lo + self.base
        self.s = tirx.floormod(self.g, stages)
        self.it = tirx.floordiv(self.g, stages)
        self.barriers = [(tirx.decl_buffer((stages,), "uint64", "tma_full", scope="shared"),
                          tirx.decl_buffer((stages,), "uint64", "tma_empty", scope="shared")) for _ in range(groups)]

    def producer(self, groups, bufmap):
        """The producer loop for `groups` (lists of (stmt, CopyOp), one per barrier pair, in issue order)."""
        s, body = self.s, []
        for copies, (full, empty) in zip(groups, self.barriers):
            loads = [tirx.Evaluate(tma_load_call(op.src, Region(bufmap[op.dst.buffer], [s, *op.dst.mins],
                                                                [1, *op.dst.extents]), tirx.BufferLoad(full, [s])))
                     for _, op in copies]
            body += [tirx.IfThenElse(self.g >= self.stages,
                                     intrin.mbar_wait(ptr(empty, s), tirx.floormod(self.it + 1, 2)), None),
                     intrin.mbar_arrive_expect_tx(ptr(full, s), sum(tma_bytes(op.dst) for _, op in copies)),
                     *loads]
        return tirx.For(self.k, self.lo, self.hi - self.lo, tirx.ForKind.SERIAL, seq(body))

    def wait_full(self, full):
        """The consumers wait until stage s of `full`'s group has landed."""
        return intrin.mbar_wait(ptr(full, self.s), tirx.floormod(self.it, 2))

    def assemble(self, ctx, producer, consumer):
        """The loop's replacement: the barrier arrays, their initialization (thread 0: *full* expects one arrival,
        *empty* one per consumer warp), the producer region, the consumers and a closing barrier."""
        i = tirx.Var("bar_i", "int32")
        warps = ctx.threads // 32
        inits = []
        for full, empty in self.barriers:
            inits += [intrin.mbar_init(ptr(full, i), 1), intrin.mbar_init(ptr(empty, i), warps)]
        init = tirx.IfThenElse(ctx.thread_var == 0, seq([
            tirx.For(i, 0, self.stages, tirx.ForKind.UNROLLED, seq(inits)), intrin.mbar_init_fence()]), None)
        allocs = [tirx.AllocBuffer(b) for pair in self.barriers for b in pair]
        return seq([*allocs, tirx.AttrStmt(tirx.const(0, "int32"), WS_INIT, 0, seq([init])),
                    tirx.AttrStmt(tirx.const(0, "int32"), WS_PRODUCER, ctx.threads, producer),
                    consumer, storage_sync()])
