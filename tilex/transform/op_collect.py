"""Collecting the tile operators of a program in order (tile-op calls and T.Parallel nests)."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from tilex.ir.visit import walk

from tilex.op.parallel import ParallelOp
from tilex.op.registry import parse_tile_op


def is_parallel_nest(node):
    return isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL


def collect_tile_ops(body):
    """[(stmt, op)] in program order; a T.Parallel nest is one op (its inner loops are not visited)."""
    found = []

    def on_eval(node):
        op = parse_tile_op(node.value) if isinstance(node.value, tvm.ir.Call) else None
        if op is not None:
            found.append((node, op))
            return tvm_ffi.WalkResult.SKIP if hasattr(tvm_ffi, "WalkResult") else None
        return None

    def on_for(node):
        if is_parallel_nest(node):
            found.append((node, ParallelOp(node)))
            return tvm_ffi.WalkResult.SKIP if hasattr(tvm_ffi, "WalkResult") else None
        return None

    walk(body, [(tirx.Evaluate, on_eval), (tirx.For, on_for)], order="pre")
    return found
