"""Collecting the tile operators of a program in order (tile-op calls and T.Parallel nests)."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from tilex.ir.names import REDUCER_MARKER
from tilex.ir.visit import BufferLoadNode, is_op_call, walk

from tilex.op.base import is_fragment, is_shared
from tilex.op.parallel import ParallelOp
from tilex.op.registry import parse_tile_op
from tilex.op.view import FragmentView, SharedView


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


def collect_views(body):
    """[(DeclBuffer, FragmentView | SharedView)]: every T.view / T.reshape of a fragment or a shared tile (a
    DeclBuffer of that scope over another such buffer's data), views of views included."""
    bufs, decls = [], []

    def viewable(buf):
        return is_fragment(buf) or is_shared(buf)

    def on_alloc(node):
        if viewable(node.buffer):
            bufs.append(node.buffer)

    def on_decl(node):
        if viewable(node.buffer):
            bufs.append(node.buffer)
            decls.append(node)

    def source(expr):  # T.view declares its buffer over tirx.buffer_data(base), the base buffer or its data
        if isinstance(expr, tvm.ir.Call) and expr.op.name == "tirx.buffer_data":
            expr = expr.args[0]
        return expr

    walk(body, [(tirx.AllocBuffer, on_alloc), (tirx.DeclBuffer, on_decl)])
    out = []
    for d in decls:
        src = source(d.data)
        base = next((b for b in bufs if (b.same_as(src) or b.data.same_as(src)) and not b.same_as(d.buffer)
                     and is_fragment(b) == is_fragment(d.buffer)), None)
        if base is not None:
            out.append((d, FragmentView(base, d.buffer) if is_fragment(base) else SharedView(base, d.buffer)))
    return out


def collect_loose_fragments(body):
    """The fragments the program reads or writes by element outside every tile operator and T.Parallel nest
    (``if mask[k]:`` in a serial loop), in first-use order: each thread must hold the whole tile to do that."""
    found = []

    def note(buf):
        if is_fragment(buf) and not any(b.same_as(buf) for b in found):
            found.append(buf)

    def on_eval(node):
        if isinstance(node.value, tvm.ir.Call) and (parse_tile_op(node.value) is not None
                                                    or is_op_call(node.value, REDUCER_MARKER)):
            return tvm_ffi.WalkResult.SKIP  # a reducer's marker names it, reads nothing
        return None

    def on_for(node):
        return tvm_ffi.WalkResult.SKIP if is_parallel_nest(node) else None

    walk(body, [(tirx.Evaluate, on_eval), (tirx.For, on_for), (BufferLoadNode, lambda n: note(n.source)),
                (tirx.BufferStore, lambda n: note(n.buffer))], order="pre")
    return found
