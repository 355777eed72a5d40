"""The launch scope of a tile program: finding the threadIdx binding and the statements inside it, replacing
those statements."""
from __future__ import annotations

import math

import tvm
from tvm import tirx

from tilex.ir.visit import map_nodes, walk
from tilex.op.registry import parse_tile_op


class KernelInfo:
    def __init__(self, thread_var, threads, block_extents):
        self.thread_var = thread_var
        self.threads = threads
        self.block_extents = block_extents  # blockIdx var -> extent expr


def _has_tile_work(body) -> bool:
    """Whether `body` holds a tile operator or a T.Parallel loop (work whose threads tilex assigns)."""
    found = False

    def on_call(node):
        nonlocal found
        found = found or parse_tile_op(node) is not None

    def on_for(node):
        nonlocal found
        found = found or node.kind == tirx.ForKind.PARALLEL

    walk(body, [(tvm.ir.Call, on_call), (tirx.For, on_for)])
    return found


def kernel_info(func) -> KernelInfo | None:
    """The (single) threadIdx.x var and block size of a T.Kernel program, or None if it has none. A block of
    several thread dimensions (``threads=(32, 4)``) is for SIMT bodies that index threads themselves: it has no
    KernelInfo (the tile passes leave it alone), and tile operators or T.Parallel loops in it are refused."""
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
            if _has_tile_work(func.body):
                shape = tuple(threads[t][1] for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z") if t in threads)
                raise ValueError(f"tile operators and T.Parallel need a 1-d thread block (T.Kernel(..., "
                                 f"threads=int)); this kernel has threads={shape}. Write threads="
                                 f"{math.prod(shape)} and derive the 2-d index from "
                                 f"T.get_thread_binding(), or keep the body SIMT")
            return None
    var, n = threads["threadIdx.x"]
    return KernelInfo(var, n, blocks)


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
