"""The launch scope of a tile program: finding the threadIdx binding and the statements inside it, replacing
those statements."""
from __future__ import annotations

from tvm import tirx

from tilex.ir.visit import map_nodes, walk


class KernelInfo:
    def __init__(self, thread_var, threads, block_extents):
        self.thread_var = thread_var
        self.threads = threads
        self.block_extents = block_extents  # blockIdx var -> extent expr


def kernel_info(func) -> KernelInfo | None:
    """The (single) threadIdx.x var and block size of a T.Kernel program, or None if it has none."""
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
            raise ValueError(f"tile operators need a 1-d thread block (T.Kernel(..., threads=int)), got {threads}")
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
