"""LegalVectorWidths: a ``T.vectorized`` loop wider than one 16-byte access becomes a loop of 16-byte vectors.

Consumes: flat TIR (after FlattenBuffer), before TVM's VectorizeLoop.
Produces: the same program where each vectorized loop whose lanes hold more than 128 bits of its narrowest element
type (every access it makes wider than one 16-byte load or store) is split into a serial outer loop over an inner
vectorized loop of 16 bytes of that type (a widening copy's 8 halves in, 8 floats out, as TVM prints them), the
inner width the largest power of two that divides the extent and keeps every contiguous access aligned to it (1
lane: an unrolled loop). Other loops are left as written.

Why: a program may vectorize a whole per-thread row (``for i in T.vectorized(128): local[i] = A[...]``); TVM
vectorizes it into one ``float32x128`` value, which CUDA has no type for. The widest load or store a thread issues
is 16 bytes, so that is the width the loop is cut to.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from tilex.ir.visit import BufferLoadNode, map_nodes, substitute, walk

MAX_VECTOR_BITS = 128


def _accesses(body):
    found = []
    walk(body, [(BufferLoadNode, lambda n: found.append((n.source, list(n.indices)))),
                (tirx.BufferStore, lambda n: found.append((n.buffer, list(n.indices))))])
    return found


def _narrowest_bits(body) -> int:
    bits = [tvm.DataType(str(buf.dtype)).bits for buf, _ in _accesses(body)]
    return min(bits, default=32)


def _aligned(body, var, lanes, analyzer) -> bool:
    """Whether every access of `body` whose last index steps by 1 with `var` starts a `lanes`-aligned vector at
    each multiple of `lanes`."""
    outer = tirx.Var(var.name + "_o", var.dtype)
    for _, indices in _accesses(body):
        if not indices:
            continue
        idx = indices[-1]
        at0 = substitute(idx, {var: tirx.const(0, var.dtype)})
        at1 = substitute(idx, {var: tirx.const(1, var.dtype)})
        step = analyzer.simplify(at1 - at0)
        if not (isinstance(step, tirx.IntImm) and int(step.value) == 1):
            continue  # a broadcast or strided access: VectorizeLoop scalarizes it, alignment does not matter
        start = substitute(idx, {var: outer * lanes})
        if not analyzer.can_prove(tirx.floormod(start, lanes) == 0):
            return False
    return True


def legal_vector_loop(loop, analyzer=None):
    """`loop` cut to vectors of at most 128 bits, or `loop` itself (see the module docstring)."""
    if loop.kind != tirx.ForKind.VECTORIZED or not isinstance(loop.extent, tirx.IntImm):
        return loop
    extent = int(loop.extent.value)
    bits = _narrowest_bits(loop.body)
    if extent * bits <= MAX_VECTOR_BITS:
        return loop
    analyzer = analyzer or tvm.sym.Analyzer()
    lanes = max(1, MAX_VECTOR_BITS // bits)
    while lanes > 1 and (extent % lanes or not _aligned(loop.body, loop.loop_var, lanes, analyzer)):
        lanes //= 2
    var = loop.loop_var
    outer = tirx.Var(var.name + "_o", var.dtype)
    inner = tirx.Var(var.name + "_v", var.dtype)
    index = outer * lanes + inner
    body = substitute(loop.body, {var: index if _is_zero(loop.min) else index + loop.min})
    kind = tirx.ForKind.VECTORIZED if lanes > 1 else tirx.ForKind.UNROLLED
    vec = tirx.For(inner, 0, lanes, kind, body)
    return tirx.For(outer, 0, extent // lanes, tirx.ForKind.SERIAL, vec, span=loop.span)


def _is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and int(e.value) == 0


@tirx.transform.prim_func_pass(opt_level=0, name="tilex.LegalVectorWidths")
def LegalVectorWidths(func, mod, ctx):  # noqa: N802
    analyzer = tvm.sym.Analyzer()
    body = map_nodes(func.body, (tirx.For, lambda loop: legal_vector_loop(loop, analyzer)))
    return func if body.same_as(func.body) else func.with_body(body)
