"""Clusters of blocks that multicast the operand they share, for PersistentTiles.

Consumes: per-thread TIR after WarpSpecialize: a launch chain (``blockIdx.x`` (x ``blockIdx.y``), ``threadIdx.x``)
whose block holds one producer / consumer role split, the producer issuing ``tilex.tma_load_2d`` boxes and the
consumers releasing stages with ``mbar_arrive`` on the ``tma_empty`` barriers.
Produces, for a cluster of ``size`` blocks (``__cluster_dims__(size, 1, 1)``, rank = block index % size): the TMA
loads that do not depend on the block var the members differ in (the operand they share) are split between the
members, load ``j`` issued by rank ``j % size`` and multicast into every member's shared memory; each consumer
release also arrives on every partner's empty barrier (whose count is multiplied by ``size``); a cluster barrier
replaces the block barrier after the barrier setup and another one guards the exit.
Only 2-d loads (``tilex::tma_load_2d``) are ever multicast: N-d loads (``tilex::tma_load_3d`` .. ``_5d``, from
global tensors of rank 3..5) are neither counted as shared nor rewritten, so each member issues its own, which
stays correct (each block's full barrier expects the bytes of all its stage's loads, its own and multicast ones).
Two kinds of clusters use this:

* on a persistent grid, tile groups: cluster ``c`` walks groups ``q`` whose tiles are rows ``size * q`` ..
  ``size * q + size - 1`` of one block column (:func:`tile_group_size`; ``tilex.persistent_cluster``: 2 by
  default, 4, or 1 for none; ``tilex.disable_tma_multicast`` turns it off); PersistentTiles writes the tile loop;
* on a grid that is not made persistent, row clusters of consecutive blocks along x sharing the loads that do not
  depend on ``bx`` (:func:`row_cluster_plan`, :func:`rewrite_row_cluster`; opt-in ``tilex.cluster_size`` = 2 or 4,
  measurements in benchmarks/README.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from tilex import config
from tilex.ir import intrin
from tilex.ir.visit import free_vars, is_sync, map_nodes, seq_items, walk
from tilex.transform.hopper.roles import is_role_split
from tilex.transform.kernel_scope import outer_launch_chain
from tilex.transform.thread_block_swizzle import find_markers


def launch_tags(chain):
    """The launch chain's attributes by thread tag (``blockIdx.x``, ``threadIdx.x``, ...)."""
    return {a.node.thread_tag: a for a in chain}


def launch_items(chain):
    """The statements directly inside the launch chain (the block's top-level statements)."""
    return seq_items(chain[-1].body)


def _tma_loads(stmt):
    """The 2-d TMA loads in `stmt`: the only ones a cluster multicasts (N-d loads are left to each block)."""
    found = []
    walk(stmt, (tirx.Evaluate, lambda n: found.append(n) if intrin.is_call(n, intrin.TMA_LOAD_2D) else None))
    return found


def loads_not_depending_on(producer, var):
    """The producer's TMA loads whose coordinates do not use `var`: the operand blocks differing in `var` share."""
    return [e for e in _tma_loads(producer) if var not in free_vars(e.value)]


def persistent_cluster_size():
    """Blocks per cluster a persistent grid asks for (``tilex.persistent_cluster``; 2 by default, 1: none)."""
    size = int(config.get("persistent_cluster", 2) or 1)
    if size not in (1, 2, 4):
        raise ValueError(f"tilex.persistent_cluster must be 1, 2 or 4, got {size}")
    return size


def tile_group_size(producer, tags, extents, markers, grid, size):
    """The cluster size (1: none) of blocks running on tile groups (by = s*q .. s*q + s-1; same bx), the loads
    that do not depend on ``by`` (the operand the group's tiles share) split between the members and multicast to
    all; ``size`` is the cluster size asked for (:func:`persistent_cluster_size`), ``grid`` the blocks available,
    ``markers`` the kernel's rasterization markers."""
    if size == 1 or config.get("disable_tma_multicast", False) or "blockIdx.y" not in tags:
        return 1
    gy = extents["blockIdx.y"]
    if ((isinstance(gy, int) and gy % size) or grid % size or (markers and markers[0][0] % size)
            or (markers and markers[0][0] and markers[0][1] != "row")):
        return 1
    shared = loads_not_depending_on(producer, tags["blockIdx.y"].node.var)
    return size if len(shared) > 0 and len(shared) % size == 0 else 1


def multicast_shared_loads(producer, var, rank, size=2):
    """Loads that do not depend on `var` (the operand every block of the cluster shares): load j is issued by the
    member of rank ``j % size`` and multicast into all members' shared memory (same offsets, each member's
    barrier is signalled), so each block still receives every box. N-d loads stay as they are (each member
    issues its own)."""
    seen = []

    def on_eval(node):
        if not intrin.is_call(node, intrin.TMA_LOAD_2D) or var in free_vars(node.value):
            return node
        j = len(seen)
        seen.append(node)
        args = list(node.value.args[1:])
        return tirx.IfThenElse(rank == j % size, intrin.tma_load_2d_multicast(*args, (1 << size) - 1), None)

    return map_nodes(producer, (tirx.Evaluate, on_eval))


def release_to_all(consumer, rank, size=2):
    """A consumer release (arrive on the stage's empty barrier) also reaches every partner block's barrier: the
    partners' producers multicast into this block's stage too."""

    def on_eval(node):
        if not intrin.is_call(node, intrin.MBAR_ARRIVE):
            return node
        remote = [intrin.mbar_arrive_cluster(node.value.args[1], tirx.floormod(rank + d, size))
                  for d in range(1, size)]
        return tirx.SeqStmt([node] + remote)

    return map_nodes(consumer, (tirx.Evaluate, on_eval))


def cluster_setup(stmt, size=2):
    """Empty barriers count the consumer warps of every cluster member; the block barrier after their
    initialization becomes a cluster barrier (partners arrive remotely and multicast into this block)."""

    def on_eval(node):
        if intrin.is_call(node, intrin.MBAR_INIT):
            bar, count = node.value.args[1], node.value.args[2]
            if "tma_empty" in str(bar):
                return intrin.mbar_init(bar, count * size)
            return node
        if is_sync(node):
            return intrin.cluster_sync()
        return node

    return map_nodes(stmt, (tirx.Evaluate, on_eval))


def cluster_launch(items, size):
    """The block's top-level statements `items` run in clusters of `size` blocks: the cluster launch marker
    first, a cluster barrier last (no block exits while a partner can still arrive on its barriers)."""
    return [intrin.cluster_dims(size)] + items + [intrin.cluster_sync()]


@dataclass(frozen=True)
class RowClusterPlan:
    """Clusters of ``size`` consecutive blocks along x on a grid that is not made persistent."""

    chain: list  # the outermost launch chain (grid and block attributes, outermost first)
    size: int  # blocks per cluster: 2 or 4


def row_cluster_plan(body):
    """The row clusters ``tilex.cluster_size`` asks a warp-specialized kernel that is not made persistent to run
    in (None: none), the members multicasting the loads that do not depend on ``bx`` (for C = A @ B with blocks
    over N: the A tile every block of a block row reads). This divides that operand's L2-to-SM traffic by the
    cluster size. Opt-in: the coupled members made one-wave skinny GEMMs slower on the H200
    (benchmarks/README.md)."""
    size = int(config.get("cluster_size", 0) or 0)
    if config.get("disable_tma_multicast", False) or not size:
        return None
    if size not in (2, 4):
        raise ValueError(f"tilex.cluster_size must be 2 or 4, got {size}")
    chain = outer_launch_chain(body)
    if chain is None:
        return None
    tags = launch_tags(chain)
    if "blockIdx.x" not in tags or "threadIdx.x" not in tags or "blockIdx.z" in tags:
        return None
    gx = tags["blockIdx.x"].value
    if not isinstance(gx, tirx.IntImm) or int(gx.value) % size or int(gx.value) < size:
        return None
    split = [s for s in launch_items(chain) if is_role_split(s)]
    if len(split) != 1:
        return None
    shared = loads_not_depending_on(split[0].then_case, tags["blockIdx.x"].node.var)
    if not shared or any(panel for panel, _ in find_markers(body)):
        return None
    return RowClusterPlan(chain, size)


def rewrite_row_cluster(plan):
    """The launch chain of `plan` rewritten to run in its clusters (rank = bx % size), the members multicasting
    the bx-independent loads."""
    chain, size = plan.chain, plan.size
    tags = launch_tags(chain)
    bx_var = tags["blockIdx.x"].node.var
    rank = tirx.floormod(bx_var, size)
    out = []
    for s in launch_items(chain):
        if is_role_split(s):
            cons = s.else_case
            s = tirx.IfThenElse(s.condition, multicast_shared_loads(s.then_case, bx_var, rank, size),
                                tirx.AttrStmt(cons.node, cons.attr_key, cons.value,
                                              release_to_all(cons.body, rank, size)))
        else:
            s = cluster_setup(s, size)
        out.append(s)
    new_body = tirx.SeqStmt(cluster_launch(out, size))
    for a in reversed(chain):
        new_body = tirx.AttrStmt(a.node, a.attr_key, a.value, new_body)
    return new_body
