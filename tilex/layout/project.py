"""Projecting a Fragment onto some of its dimensions (the layout of a reduction result or a broadcast operand).

``project(frag, drop)`` answers: if each element ``x`` of ``frag`` is reduced over the dimensions ``drop`` (or,
read the other way, if a tensor indexed by the other dimensions is read by every thread that holds some ``x``),
which threads hold element ``y`` of the smaller tensor and at which local slot? The result is a Fragment over the
kept dimensions, replicated over exactly the threads that held the dropped part:

* the thread and local expressions of ``frag`` are decomposed (TVM's iter-map analysis) into terms
  ``(x_d // lower_factor) % extent * scale``;
* thread terms on dropped dimensions become replication terms (``rep`` enumerates them in mixed radix);
* local terms on dropped dimensions vanish and the remaining ones are re-packed densely.

Terms also keep their *bit structure*: `project` reports the replication terms that came from the dropped
dimensions (scale, extent, radix), which a reduction uses to combine partials across threads (shuffles inside a
warp, shared memory across warps); replicas `frag` already had are copies, not partials, and are not reported.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import tirx

from ._expr import LayoutError
from .fragment import Fragment


@dataclass
class Term:
    dim: int  # input dimension (or -1 for the fragment's own replication var)
    lower_factor: int
    extent: int
    scale: int

    def value(self, var):
        return tirx.floormod(tirx.floordiv(var, self.lower_factor), self.extent) * self.scale


def _terms(expr, vars_, dom):
    """Decompose an affine iter-map expression into Terms (None if it is not one)."""
    res = tvm.sym.detect_iter_map([expr], dom, check_level=tvm.sym.iter_affine_map.IterMapLevel.NoCheck)
    if len(res.indices) != 1:
        return None
    out = []

    def add_sum(s, mult):
        if not isinstance(s, tvm.sym.iter_affine_map.IterSumExpr):
            return False
        if int(s.base.value if hasattr(s.base, "value") else s.base) != 0:
            return False
        return all(add_split(a, mult) for a in s.args)

    def add_split(sp, mult):
        src = sp.source.source
        lf, ext, sc = int(sp.lower_factor), int(sp.extent), int(sp.scale) * mult
        if isinstance(src, tvm.sym.iter_affine_map.IterSumExpr):
            # a fused mark: only a whole-mark split can be expanded into its parts
            if lf != 1 or ext != int(sp.source.extent):
                return False
            return add_sum(src, sc)
        for d, v in enumerate(vars_):
            if src.same_as(v):
                out.append(Term(d, lf, ext, sc))
                return True
        return False

    if not add_sum(res.indices[0], 1):
        return None
    return out


def _split_pow2(term, limit):
    """Split a term at the thread-id bit `limit` (e.g. 32: the warp boundary) if it straddles it."""
    lo_ext = limit // term.scale if term.scale < limit < term.scale * term.extent else 0
    if lo_ext and term.extent % lo_ext == 0:
        return [Term(term.dim, term.lower_factor, lo_ext, term.scale),
                Term(term.dim, term.lower_factor * lo_ext, term.extent // lo_ext, term.scale * lo_ext)]
    return [term]


def decompose(frag: Fragment):
    """(thread terms, local terms) of a fragment; dims index frag.input_shape, dim -1 is the fragment's rep."""
    vars_ = list(frag.vars) + [frag.rep_var]
    dom = {v: tvm.ir.Range(0, e) for v, e in zip(frag.vars, frag.input_shape)}
    if int(frag.replicate) > 1:
        dom[frag.rep_var] = tvm.ir.Range(0, int(frag.replicate))
    th = _terms(frag.forward_thread, vars_, dom)
    local = frag.local_offset(list(frag.vars))
    lo = _terms(local, vars_, dom)
    if th is None or lo is None:
        raise LayoutError(f"cannot decompose {frag} into affine terms; project it by hand")
    fix = lambda ts: [Term(-1 if t.dim == len(frag.vars) else t.dim, t.lower_factor, t.extent, t.scale) for t in ts]
    return fix(th), fix(lo)


def project(frag: Fragment, drop) -> tuple[Fragment, list]:
    """(Fragment over the kept dims, reduction terms [(scale, extent, radix)]).

    The Fragment is replicated over the threads that held the dropped dimensions and over `frag`'s own replicas.
    The reduction terms are the thread-id digit fields (scale, extent) that came from the dropped dimensions only,
    each with its `radix` in the Fragment's replica index (replica r has digit ``(r // radix) % extent`` there):
    the threads a reduction combines. `frag`'s own replicas hold copies of the same values and are never combined.

    Dropping every dimension (a 1-d tile reduced to a scalar) gives a Fragment of shape (1,) whose one element is
    held, at register 0, by every thread that held some element of `frag`."""
    drop = sorted({d % len(frag.input_shape) for d in drop})
    keep = [d for d in range(len(frag.input_shape)) if d not in drop]
    th, lo = decompose(frag)
    rep_terms, reduced = [], []
    for t in th:
        if t.dim in drop or t.dim == -1:
            for part in _split_pow2(t, 32):
                if t.dim != -1:
                    reduced.append((part.scale, part.extent, math.prod(r.extent for r in rep_terms)))
                rep_terms.append(part)
    base_terms = [t for t in th if t.dim in keep]
    kept_local = sorted([t for t in lo if t.dim in keep], key=lambda t: t.scale)
    new_dim = {d: k for k, d in enumerate(keep)}
    radix = 1
    packed = []
    for t in kept_local:
        packed.append(Term(new_dim[t.dim], t.lower_factor, t.extent, radix))
        radix *= t.extent
    replicate = math.prod(t.extent for t in rep_terms) if rep_terms else 1
    shape = [frag.input_shape[d] for d in keep] or [1]

    def thread(*args):
        vs = args[: len(keep)]
        expr = tirx.const(0, "int32")
        for t in base_terms:
            expr = expr + Term(new_dim[t.dim], t.lower_factor, t.extent, t.scale).value(vs[new_dim[t.dim]])
        if replicate > 1:
            rep = args[-1]  # after the placeholders (one, of extent 1, when every dimension is dropped)
            r = 1
            for t in rep_terms:
                expr = expr + tirx.floormod(tirx.floordiv(rep, r), t.extent) * t.scale
                r *= t.extent
        return expr

    def index(*vs):
        expr = tirx.const(0, "int32")
        for t in packed:
            expr = expr + t.value(vs[t.dim])
        return expr

    out = Fragment(shape, thread, index, replicate=replicate)
    return out, reduced
