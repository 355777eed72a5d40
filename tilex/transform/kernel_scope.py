"""The launch scope of a tile program: finding the threadIdx binding and the statements inside it, replacing
those statements."""
from __future__ import annotations

import math

import tvm
from tvm import tirx

from tilex.ir.visit import map_nodes, walk
from tilex.op.base import is_fragment, is_local
from tilex.op.copy import CopyOp
from tilex.op.fill import FillOp
from tilex.op.registry import parse_tile_op


class KernelInfo:
    def __init__(self, thread_var, threads, block_extents):
        self.thread_var = thread_var
        self.threads = threads
        self.block_extents = block_extents  # blockIdx var -> extent expr


def _tile_work(body) -> tuple[list, bool]:
    """(the tile operators in `body`, whether it holds a T.Parallel loop): the work whose threads tilex assigns."""
    ops, parallel = [], False

    def on_call(node):
        op = parse_tile_op(node)
        if op is not None:
            ops.append(op)

    def on_for(node):
        nonlocal parallel
        parallel = parallel or node.kind == tirx.ForKind.PARALLEL

    walk(body, [(tvm.ir.Call, on_call), (tirx.For, on_for)])
    return ops, parallel


def _per_thread(op) -> bool:
    """Whether every thread performs `op` whole by itself, whatever the block's shape: a T.fill / T.clear or
    T.copy with a per-thread (T.alloc_local) buffer and no fragment."""
    bufs = op.buffers()
    return isinstance(op, (FillOp, CopyOp)) and any(is_local(b) for b in bufs) and not any(is_fragment(b)
                                                                                        for b in bufs)


def kernel_info(func) -> KernelInfo | None:
    """The (single) threadIdx.x var and block size of a T.Kernel program, or None if it has none.

    A block of several thread dimensions (``threads=(32, 4)``) is for SIMT bodies that index threads themselves.
    Without tile work it has no KernelInfo (the tile passes leave it alone). Tile operators that every thread
    performs whole by itself (T.fill / T.clear / T.copy of T.alloc_local buffers, as TileLang's gemv kernels
    write them) do not depend on the block's shape: such a kernel gets the KernelInfo of its threadIdx.x (the
    dimension TileLang's tile operators use) and they are lowered per thread. Tile operators that spread a tile
    over the threads (fragments, shared or global tiles) and T.Parallel loops need a 1-d block (ValueError)."""
    threads = {}
    blocks = {}

    def on_attr(node):
        if node.attr_key == "thread_extent":
            iv = node.node
            tag = iv.thread_tag
            if tag.startswith("threadIdx"):
                threads[tag] = (iv.var, int(node.value.value))
            elif tag.startswith("blockIdx"):
                blocks[iv.var] = node.value

    walk(func.body, (tirx.AttrStmt, on_attr))
    if "threadIdx.x" not in threads:
        return None
    if len(threads) > 1:
        extra = {k: v[1] for k, v in threads.items() if k != "threadIdx.x"}
        if any(e != 1 for e in extra.values()):
            ops, parallel = _tile_work(func.body)
            if not ops and not parallel:
                return None
            spread = [op for op in ops if not _per_thread(op)]
            if spread or parallel:
                shape = tuple(threads[t][1] for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z") if t in threads)
                what = _describe(spread[0]) if spread else "a T.Parallel loop"
                raise ValueError(f"tile operators that spread a tile over the threads, and T.Parallel, need a 1-d "
                                 f"thread block (T.Kernel(..., threads=int)); this kernel has threads={shape} and "
                                 f"{what}. Write threads={math.prod(shape)} and derive the 2-d index from "
                                 f"T.get_thread_binding(), or keep the body SIMT (per-thread T.alloc_local "
                                 f"buffers may be filled and copied with tile operators)")
    var, n = threads["threadIdx.x"]
    return KernelInfo(var, n, blocks)


def _describe(op):
    describe = getattr(op, "describe", None)
    return describe() if describe is not None else op.op_name


def outer_launch_chain(body):
    """The launch chain (see `launch_chain`) of the outermost ``thread_extent`` attribute in `body`, or None."""
    chain = None

    def on_attr(node):
        nonlocal chain
        if chain is None and node.attr_key == "thread_extent":
            chain = launch_chain(node)

    walk(body, (tirx.AttrStmt, on_attr), order="pre")
    return chain


def launch_chain(attr):
    """The consecutive ``thread_extent`` attributes starting at `attr`, outermost first."""
    chain = []
    node = attr
    while isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
        chain.append(node)
        node = node.body
    return chain


def with_launch_items(func, chain, items):
    """`func` with `items` as the statements directly inside its launch `chain` (from `outer_launch_chain`)."""
    launch = chain[-1]
    new_launch = tirx.AttrStmt(launch.node, launch.attr_key, launch.value, tirx.SeqStmt(list(items)))
    return func.with_body(map_nodes(func.body, (tirx.AttrStmt, lambda n: new_launch if n.same_as(launch) else n),
                                    order="pre"))
