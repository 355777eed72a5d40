"""`T.Parallel` loop nests as a tile operator: layout inference from the fragments they touch, and lowering."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from tilex._tir import BufferLoadNode, dtype_of, lanes

from tilex.op.base import (InferLevel, LayoutConflictError, TileOp, TileOpError, is_fragment, is_global,
                           is_shared)
from tilex.op.partition import (access_vectorizable, coalesced_plan, emit_by_fragment, emit_by_plan, fragment_vector_width,
                                pick_vector, static_shape, substitute)


def collect_parallel_nest(loop):
    """(loop vars, extents, innermost body) of a perfectly nested run of PARALLEL loops."""
    vars_, extents = [], []
    node = loop
    while isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
        if not (isinstance(node.min, tirx.IntImm) and node.min.value == 0):
            raise TileOpError(f"T.Parallel loops must start at 0, got {node.min}")
        vars_.append(node.loop_var)
        extents.append(node.extent)
        node = node.body
    return vars_, extents, node


def buffer_accesses(stmt):
    """[(buffer, indices, is_store)] for every BufferLoad/BufferStore in `stmt`."""
    out = []

    def on_load(n):
        out.append((n.source, list(n.indices), False))

    def on_store(n):
        out.append((n.buffer, list(n.indices), True))

    tvm_ffi.structural_walk(stmt, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store)])
    return out


def _same_vars(indices, vars_):
    return len(indices) == len(vars_) and all(isinstance(i, tvm.ir.Var) and i.same_as(v)
                                              for i, v in zip(indices, vars_))


class ParallelOp(TileOp):
    """A nest of ``for i, j in T.Parallel(...)`` loops."""

    op_name = "tilex.parallel"

    def __init__(self, loop):
        self.loop = loop
        self.vars, extents, self.body = collect_parallel_nest(loop)
        self.extents = static_shape(extents, "T.Parallel")
        self.accesses = buffer_accesses(self.body)
        self.loop_layout = None

    def buffers(self):
        return list({b: None for b, _, _ in self.accesses})

    def _fragment_accesses(self):
        return [(b, idx) for b, idx, _ in self.accesses if is_fragment(b)]

    def infer_layout(self, ctx, level):
        if level == InferLevel.STRICT:
            return {}
        frags = self._fragment_accesses()
        if not frags:
            return {}
        if self.loop_layout is None:
            for buf, idx in frags:
                lay = ctx.layout_map.get(buf)
                if lay is not None and _same_vars(idx, self.vars) and list(lay.input_shape) == self.extents:
                    self.loop_layout = lay
                    break
        if self.loop_layout is None and level == InferLevel.FREE:
            elem_bits = max(tvm.DataType(str(b.dtype)).bits for b, _, _ in self.accesses)
            vec = self._plan_vector(ctx, elem_bits)
            self.loop_layout = coalesced_plan(self.extents, ctx.threads, vec)
            if self.loop_layout is None:
                raise TileOpError(
                    f"T.Parallel{tuple(self.extents)}: cannot deal {self.extents} elements evenly to "
                    f"{ctx.threads} threads for the register tiles it touches ({[b.name for b, _ in frags]})")
        if self.loop_layout is None:
            return {}
        result = {}
        for buf, idx in frags:
            if not _same_vars(idx, self.vars):
                continue  # checked at lowering: must be owned by the same thread
            have = ctx.layout_map.get(buf, result.get(buf))
            if have is None:
                result[buf] = self.loop_layout
            elif not have.is_equal(self.loop_layout):
                raise LayoutConflictError(
                    f"layout conflict on fragment '{buf.name}' in T.Parallel{tuple(self.extents)}: the loop runs "
                    f"with layout {self.loop_layout} but '{buf.name}' already has {have}")
        return result

    def _plan_vector(self, ctx, elem_bits):
        accesses = []
        for buf, idx, _ in self.accesses:
            if is_global(buf) or is_shared(buf):
                accesses.append((buf, lambda ix, idx=idx: [substitute(e, dict(zip(self.vars, ix))) for e in idx]))
        return pick_vector(self.extents, ctx.threads, elem_bits, accesses, ctx.analyzer, {})

    def lower(self, ctx):
        frag = self.loop_layout
        if frag is None:
            elem_bits = max([tvm.DataType(str(b.dtype)).bits for b, _, _ in self.accesses] or [32])
            vec = self._plan_vector_lower(ctx, elem_bits)

            def make(ix, _guard):
                return substitute(self.body, dict(zip(self.vars, ix)))

            return emit_by_plan(ctx, self.extents, vec, make, name="par")
        vec = fragment_vector_width(frag, 4, ctx.analyzer)
        vec = self._check_vector(ctx, frag, vec)
        self._check_ownership(ctx, frag)

        def make_frag(ix, _guard, l_flat):
            body = substitute(self.body, dict(zip(self.vars, ix)))
            return _direct_fragment_access(body, frag, ix, l_flat, ctx)

        return emit_by_fragment(ctx, frag, vec, make_frag, name="par")

    def _plan_vector_lower(self, ctx, elem_bits):
        accesses = []
        for buf, idx, _ in self.accesses:
            if is_global(buf) or is_shared(buf):
                accesses.append((buf, lambda ix, idx=idx, buf=buf: _phys(ctx, buf, idx, self.vars, ix)))
        return pick_vector(self.extents, ctx.threads, elem_bits, accesses, ctx.analyzer,
                           {ctx.thread_var: tvm.ir.Range(0, ctx.threads)})

    def _check_vector(self, ctx, frag, vec):
        """Shrink `vec` until every global/shared access in the body is a contiguous, aligned vector."""
        bind = {ctx.thread_var: tvm.ir.Range(0, ctx.threads)}
        while vec > 1:
            if all(access_vectorizable(buf, lambda ix, idx=idx, buf=buf: _phys(ctx, buf, idx, self.vars, ix),
                                        self.extents, vec, ctx.analyzer, bind)
                   for buf, idx, _ in self.accesses if is_global(buf) or is_shared(buf)):
                return vec
            vec //= 2
        return 1

    def _check_ownership(self, ctx, frag):
        for buf, idx in self._fragment_accesses():
            lay = ctx.layout_map.get(buf)
            if lay is None:
                raise TileOpError(f"fragment '{buf.name}' used in T.Parallel{tuple(self.extents)} has no layout")
            if _same_vars(idx, self.vars) and lay.is_equal(frag):
                continue
            if lay.replicate >= ctx.threads and lay.thread_extent >= ctx.threads:
                continue  # fully replicated: every thread holds every element
            raise TileOpError(
                f"T.Parallel{tuple(self.extents)} reads fragment '{buf.name}' as {buf.name}{idx}, which the loop's "
                f"threads do not own under its layout {lay}; broadcast/reduction access patterns need layout "
                f"inference for replicated fragments (not supported yet)")

    def describe(self):
        return f"T.Parallel{tuple(self.extents)}"


def _phys(ctx, buf, idx, vars_, ix):
    sub = [substitute(e, dict(zip(vars_, ix))) for e in idx]
    if is_shared(buf) and buf in ctx.remap:
        return ctx.physical_index(buf, sub)[1]
    return sub


def _direct_fragment_access(body, frag, ix, l_flat, ctx):
    """Rewrite accesses of fragments laid out like the loop, indexed by the loop's own indices, to local `l_flat`."""
    targets = {b for b in ctx.remap if is_fragment(b) and ctx.layout_map.get(b) is not None
               and ctx.layout_map[b].is_equal(frag)}
    if not targets:
        return body

    def same(idx):
        return len(idx) == len(ix) and all(a.same_as(b) for a, b in zip(idx, ix))

    def on_load(n):
        if n.source in targets and same(list(n.indices)):
            return tirx.BufferLoad(ctx.remap[n.source], [l_flat])
        return n

    def on_store(n):
        if n.buffer in targets and same(list(n.indices)):
            return tirx.BufferStore(ctx.remap[n.buffer], n.value, [l_flat])
        return n

    return tvm_ffi.structural_map(body, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store)], order="post")
