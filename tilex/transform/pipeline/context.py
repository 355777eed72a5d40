"""What the rewrites of one kernel's pipelined loops share: the kernel's launch facts, its allocations, and the
multi-buffered forms of the shared buffers they pipeline."""
from __future__ import annotations

from tvm import tirx

from tilex.op import gemm_wgmma
from tilex.op.base import TileOpError, is_shared
from tilex.op.gemm import GemmOp
from tilex.transform.pipeline.analysis import accesses, tile_op


class PipelineContext:
    """One kernel's pipelining state.

    `allocs`: buffers allocated in the kernel -> their (replaceable) AllocBuffer; `threads` / `thread_var`: the
    block size and thread index (None outside a T.Kernel); `top_level`: loops directly in the kernel's statement
    list; `root`: the kernel body as written."""

    def __init__(self, allocs, threads=None, target=None, thread_var=None, top_level=(), root=None):
        self.root = root
        self.allocs = allocs
        self.multi = {}  # old shared buffer -> multi-buffered buffer
        self.depth = {}  # shared buffer -> most versions any pipelined loop of the kernel wants (sizes `multi`)
        self.threads, self.target, self.thread_var = threads, target, thread_var
        self.top_level = set(top_level)

    def is_wgmma_gemm(self, stmt):
        """Whether `stmt` is a T.gemm that will run on wgmma (asynchronously, see gemm_wgmma.py)."""
        op = tile_op(stmt)
        return (self.threads is not None and isinstance(op, GemmOp)
                and gemm_wgmma.plan(op, self.threads, self.target) is not None)

    def async_consumer(self, consumers):
        """Whether the consumers may leave a wgmma in flight: one is a T.gemm on wgmma and no other consumer
        touches its accumulator or writes its operands (that access would race the MMA still running)."""
        gemms = [i for i, c in enumerate(consumers) if self.is_wgmma_gemm(c)]
        if not gemms:
            return False
        acc = [accesses(c) for c in consumers]
        for g in gemms:
            g_reads, g_writes = acc[g]
            for i, (reads, writes) in enumerate(acc):
                if i != g and ((reads | writes) & g_writes or writes & g_reads):
                    return False
        return True

    def landed_gemms(self, consumers):
        """Indices of the consumers that are wgmma T.gemms whose shared operands no consumer writes: in a cp.async
        pipeline only the copies write them, which the iteration's fence and barrier order before its compute."""
        acc = [accesses(c) for c in consumers]
        written = set().union(*(w for _, w in acc)) if acc else set()
        return [i for i, c in enumerate(consumers)
                if self.is_wgmma_gemm(c) and not {b for b in acc[i][0] if is_shared(b)} & written]

    def multi_buffer(self, versions):
        """{buffer: its multi-buffered form} for {buffer: versions wanted}. The form holds the most versions any
        loop wants (`depth`), so loops that share a buffer may index it modulo their own count."""
        bufmap = {}
        for b, v in versions.items():
            if b not in self.multi:
                n = max(v, self.depth.get(b, v))
                self.multi[b] = tirx.decl_buffer((n, *b.shape), b.dtype, b.name, scope=b.scope())
            if int(self.multi[b].shape[0]) < v:
                raise TileOpError(f"T.Pipelined: shared buffer '{b.name}' is multi-buffered by nested pipelined loops "
                                  f"with different depths")
            bufmap[b] = self.multi[b]
        return bufmap
