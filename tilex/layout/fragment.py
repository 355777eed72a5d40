"""``Fragment``: register-tile layout mapping a logical index to (thread, local index).

``forward_thread`` is a PrimExpr over the placeholders ``_i0.._i{n-1}`` and, when ``replicate > 1``,
the replication var ``_rep`` in ``[0, replicate)``; ``forward_index`` are PrimExprs over the placeholders.
Element ``x`` lives in threads ``{forward_thread(x, r) for r in range(replicate)}``, at local index
``forward_index(x)`` (the same local slot in every replica).
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx

from ._expr import (
    LayoutError,
    as_expr_list,
    compile_numpy,
    exprs_equal,
    extents_of,
    invert_affine,
    make_analyzer,
    placeholders,
    rep_var,
    row_major_offset,
    is_fn,
    PrimExpr,
    substitute,
    to_expr,
)
from .layout import Layout, norm_shape

__all__ = ["Fragment"]


class Fragment:
    """Maps a logical index of a register tile to (thread, local index); replicate>1 means each element
    lives in ``replicate`` threads.

    ``Fragment(shape, thread, index, replicate=1)``:
      * ``thread``: callable ``(*vars) -> PrimExpr``, or ``(*vars, rep) -> PrimExpr`` when ``replicate > 1``
        (``rep`` in ``[0, replicate)``); or a prebuilt expr over ``Fragment.placeholders(n)`` (+ ``Fragment.rep_var``).
      * ``index``: callable ``(*vars) -> PrimExpr | list[PrimExpr]`` (local index, usually 1-d), or prebuilt exprs.
    """

    placeholders = staticmethod(placeholders)
    rep_var = rep_var()

    def __init__(self, shape, thread, index, replicate: int = 1):
        self.input_shape = norm_shape(shape)
        self._replicate = int(replicate)
        if self._replicate < 1:
            raise LayoutError(f"replicate must be >= 1, got {replicate}")
        self.vars = placeholders(len(self.input_shape))
        if is_fn(thread):
            t = thread(*self.vars, self.rep_var) if self._replicate > 1 else thread(*self.vars)
        else:
            t = thread
        idx = index(*self.vars) if is_fn(index) else index
        ana = self._analyzer()
        self.forward_thread = ana.simplify(to_expr(t))
        self.forward_index = tuple(ana.simplify(e) for e in as_expr_list(idx))
        if len(self.forward_index) == 0:
            raise LayoutError("a fragment needs at least one local index expression")
        (self.thread_extent,) = extents_of([self.forward_thread], self._all_vars(), self._full_shape(),
                                           "fragment thread")
        self.local_shape = extents_of(self.forward_index, self.vars, self.input_shape, "fragment local index")
        self.local_size = math.prod(self.local_shape)
        self._inverse_cache = None
        self._np_fn = None

    # ------------------------------------------------------------------ helpers
    @property
    def replicate(self) -> int:
        """Replication factor (an ``int``); also callable: ``frag.replicate(n)`` == ``frag.replicate_by(n)``."""
        return _ReplicateCount(self._replicate, self)

    def _all_vars(self):
        return tuple(self.vars) + (self.rep_var,)

    def _full_shape(self):
        return tuple(self.input_shape) + (self._replicate,)

    def _analyzer(self):
        return make_analyzer(self._all_vars(), self._full_shape())

    @property
    def ndim(self) -> int:
        return len(self.input_shape)

    def _check_indices(self, indices):
        indices = as_expr_list(indices)
        if len(indices) != self.ndim:
            raise LayoutError(f"fragment expects {self.ndim} indices, got {len(indices)}")
        return indices

    # ------------------------------------------------------------------ mapping
    def map_thread(self, indices, rep=0, analyzer=None) -> PrimExpr:
        """Thread holding logical ``indices`` (replica ``rep``)."""
        vmap = dict(zip(self.vars, self._check_indices(indices)))
        vmap[self.rep_var] = to_expr(rep)
        ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
        return ana.simplify(substitute(self.forward_thread, vmap))

    def map_index(self, indices, analyzer=None) -> list:
        """Local (register) index of logical ``indices``."""
        vmap = dict(zip(self.vars, self._check_indices(indices)))
        ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
        return [ana.simplify(substitute(e, vmap)) for e in self.forward_index]

    def local_offset(self, indices, analyzer=None) -> PrimExpr:
        """Row-major linearization of ``map_index(indices)`` over ``local_shape``."""
        ana = analyzer if analyzer is not None else tvm.sym.Analyzer()
        return ana.simplify(row_major_offset(self.map_index(indices, ana), self.local_shape))

    def map_numpy(self, *index_arrays, rep=0):
        """Evaluate on integer numpy arrays: returns ``(thread, [local_0, ...])`` int64 arrays (broadcasting)."""
        if self._np_fn is None:
            self._np_fn = compile_numpy((self.forward_thread,) + self.forward_index, self._all_vars())
        out = self._np_fn(*index_arrays, rep)
        return out[0], out[1:]

    # ------------------------------------------------------------------ algebra
    def inverse(self) -> Layout:
        """Layout ``(thread, *local_shape) -> (*logical, [rep])`` (trailing rep output iff replicate > 1).

        Requires the map ``(x, rep) -> (thread, *local)`` to be a bijection onto
        ``[0, thread_extent) x local_shape`` with affine (div/mod) structure; raises ``LayoutError`` otherwise.
        """
        if self._inverse_cache is not None:
            return self._inverse_cache
        if self._replicate > 1:
            in_vars, extents = self._all_vars(), self._full_shape()
        else:
            in_vars, extents = tuple(self.vars), tuple(self.input_shape)
        dom = math.prod(extents)
        img = self.thread_extent * self.local_size
        if dom != img:
            raise LayoutError(f"fragment {self} is not bijective onto (thread, local): "
                              f"{dom} (element, replica) pairs vs {self.thread_extent} threads x "
                              f"{self.local_size} registers")
        out_shape = (self.thread_extent,) + tuple(self.local_shape)
        out_vars = placeholders(len(out_shape))
        exprs = invert_affine((self.forward_thread,) + self.forward_index, in_vars, extents, out_vars,
                              f"fragment {self}")
        self._inverse_cache = Layout(out_shape, exprs, output_shape=extents)
        return self._inverse_cache

    def repeat(self, repeats, on_thread: bool, lower_dim_first: bool = True) -> "Fragment":
        """Tile this fragment ``repeats[d]`` times along each dim d (new shape ``shape[d] * repeats[d]``).

        Element ``x`` of the result belongs to tile ``t_d = x_d // shape[d]`` at inner position
        ``x_d % shape[d]``.  Tiles are numbered by ``tile_id``:

          * ``lower_dim_first=True``: row-major over ``repeats`` -- the LAST dim varies fastest
            (``tile_id = sum_d t_d * prod(repeats[d+1:])``);
          * ``lower_dim_first=False``: column-major -- the FIRST dim varies fastest
            (``tile_id = sum_d t_d * prod(repeats[:d])``).

        ``on_thread=True``: ``thread += tile_id * thread_extent`` (local index unchanged).
        ``on_thread=False``: the local index becomes 1-d,
        ``local = tile_id * local_size + row_major(inner local)`` (thread unchanged).
        """
        repeats = tuple(int(r) for r in (repeats if isinstance(repeats, (tuple, list)) else (repeats,)))
        if len(repeats) != self.ndim or any(r < 1 for r in repeats):
            raise LayoutError(f"repeats {repeats} must give a positive count for each of the {self.ndim} dims")
        new_shape = tuple(s * r for s, r in zip(self.input_shape, repeats))
        nv = placeholders(self.ndim)
        inner = {v: (tirx.floormod(x, s) if r > 1 else x)
                 for v, x, s, r in zip(self.vars, nv, self.input_shape, repeats)}
        tiles = [tirx.floordiv(x, s) if r > 1 else to_expr(0) for x, s, r in zip(nv, self.input_shape, repeats)]
        order = range(self.ndim) if lower_dim_first else reversed(range(self.ndim))
        tile_id = to_expr(0)
        for d in order:
            tile_id = tile_id * repeats[d] + tiles[d]
        thread = substitute(self.forward_thread, inner)
        if on_thread:
            thread = thread + tile_id * self.thread_extent
            index = [substitute(e, inner) for e in self.forward_index]
        else:
            local = row_major_offset([substitute(e, inner) for e in self.forward_index], self.local_shape)
            index = [tile_id * self.local_size + local]
        return Fragment(new_shape, thread, index, replicate=self._replicate)

    def tile_of(self, extents):
        """``(sub, strides, placement)``: this fragment seen as a grid of ``extents``-shaped blocks that all repeat
        one fragment ``sub`` over the block, in the same threads. Element ``x`` of block ``(q_0, q_1, ...)`` sits in
        register ``placement(l) + sum_d q_d * strides[d]`` of this fragment, ``l`` being its register in ``sub``
        (flat). ``sub`` numbers its registers densely: where one block's registers are spread out in this fragment
        (e.g. two 64-row wgmma tiles a thread holds 80 registers apart), ``placement`` (a 1-d ``Layout`` from
        ``sub``'s flat registers to this fragment's) puts them back; otherwise it is the identity. The inverse of
        ``repeat(..., on_thread=False)``. Checked on every element; raises ``LayoutError`` when the blocks do not
        repeat one fragment this way."""
        import numpy as np

        extents = tuple(int(e) for e in extents)
        if len(extents) != self.ndim or any(e < 1 or s % e for e, s in zip(extents, self.input_shape)):
            raise LayoutError(f"blocks of {extents} do not tile fragment shape {self.input_shape}")
        flat = row_major_offset(list(self.forward_index), self.local_shape)
        grids = np.meshgrid(*[np.arange(s) for s in self.input_shape], indexing="ij")
        inner = [g % e for g, e in zip(grids, extents)]
        blocks = [g // e for g, e in zip(grids, extents)]

        def on_grid(fn, *args):
            return [np.broadcast_to(np.asarray(x, dtype=np.int64), grids[0].shape) for x in fn(*args)]

        flat_fn = compile_numpy([self.forward_thread, flat], self._all_vars())
        per_rep = [on_grid(flat_fn, *grids, rep) for rep in range(self._replicate)]
        first = np.logical_and.reduce([b == 0 for b in blocks])
        scales, counts = _dense_registers(per_rep[0][0][first], per_rep[0][1][first], self)
        placement = _placement(scales, counts)
        sub = Fragment(extents, self.forward_thread, [_dense_index(flat, scales, counts)], replicate=self._replicate)
        sub_fn = compile_numpy([sub.forward_thread, sub.forward_index[0]], sub._all_vars())
        expand = compile_numpy([placement.forward_index[0]], list(placement.vars))
        strides = None
        for rep, (thread, local) in enumerate(per_rep):
            s_thread, s_local = on_grid(sub_fn, *inner, rep)
            if not np.array_equal(thread, s_thread):
                raise LayoutError(f"{self}: blocks of {extents} live in different threads")
            (placed,) = on_grid(expand, s_local)
            if strides is None:
                strides = []
                for d in range(self.ndim):
                    probe = [0] * self.ndim
                    if self.input_shape[d] > extents[d]:
                        probe[d] = extents[d]
                        strides.append(int(local[tuple(probe)] - placed[tuple(probe)]))
                    else:
                        strides.append(0)
            if not np.array_equal(local, placed + sum(b * st for b, st in zip(blocks, strides))):
                raise LayoutError(f"{self}: blocks of {extents} are not one fragment at shifted registers")
        return sub, strides, placement

    def renumbered(self) -> "Fragment":
        """This fragment with its registers numbered 0 .. n-1, when its (1-d) local index leaves gaps that are the
        same in every thread (a mixed radix: a fragment pulled back through ``j // 2`` uses every other register)."""
        if len(self.forward_index) != 1:
            return self
        import numpy as np

        grids = np.meshgrid(*[np.arange(s) for s in self.input_shape], indexing="ij")
        thread, (local,) = self.map_numpy(*grids)
        thread = np.broadcast_to(np.asarray(thread), grids[0].shape).ravel()
        local = np.broadcast_to(np.asarray(local), grids[0].shape).ravel()
        if self.local_size == len(np.unique(local)):
            return self
        scales, counts = _dense_registers(thread, local, self)
        return Fragment(self.input_shape, self.forward_thread, [_dense_index(self.forward_index[0], scales, counts)],
                        replicate=self._replicate)

    def replicate_by(self, n: int) -> "Fragment":  # also reachable as ``frag.replicate(n)``
        """Each element additionally held by ``n`` thread groups.

        New replication var ``r`` in ``[0, replicate * n)``: old replica ``r % replicate``,
        new group ``r // replicate``; ``thread = old_thread(x, r % replicate) + (r // replicate) * thread_extent``.
        """
        n = int(n)
        if n < 1:
            raise LayoutError(f"replicate factor must be >= 1, got {n}")
        if n == 1:
            return self
        r = self.rep_var
        old = self._replicate
        old_rep = tirx.floormod(r, old) if old > 1 else to_expr(0)
        group = tirx.floordiv(r, old) if old > 1 else r
        thread = substitute(self.forward_thread, {r: old_rep}) + group * self.thread_extent
        return Fragment(self.input_shape, thread, list(self.forward_index), replicate=old * n)

    @staticmethod
    def fully_replicated(shape, threads: int) -> "Fragment":
        """Every thread holds the whole tile: thread = rep, local = row-major offset, replicate = threads."""
        shape = norm_shape(shape)
        nv = placeholders(len(shape))
        return Fragment(shape, Fragment.rep_var if threads > 1 else to_expr(0),
                        [row_major_offset(nv, shape)], replicate=threads)

    def is_equal(self, other) -> bool:
        """Same shapes / replication / extents and provably equal thread and index expressions."""
        if not isinstance(other, Fragment):
            return False
        if (self.input_shape, self._replicate, self.thread_extent, self.local_shape) != (
                other.input_shape, other._replicate, other.thread_extent, other.local_shape):
            return False
        return exprs_equal((self.forward_thread,) + self.forward_index,
                           (other.forward_thread,) + other.forward_index,
                           self._all_vars(), self._full_shape())

    def __repr__(self) -> str:
        args = ", ".join(v.name for v in self.vars)
        rep = f", replicate={self._replicate} (rep={self.rep_var.name})" if self._replicate > 1 else ""
        idx = ", ".join(str(e) for e in self.forward_index)
        return (f"Fragment({self.input_shape}{rep}: ({args}) -> thread {self.forward_thread} "
                f"[0, {self.thread_extent}), local ({idx}) {self.local_shape})")


# ``Fragment.replicate`` is both an int attribute (the replication factor, set per instance) and, per the
# API, a method ``frag.replicate(n)``.  An instance attribute would shadow a method, so the factor is stored
# in an int subclass that is also callable.
class _ReplicateCount(int):
    """The replication factor (an int) which can also be called: ``frag.replicate(n)`` replicates ``n`` times."""

    def __new__(cls, value, frag):
        obj = super().__new__(cls, value)
        obj._frag = frag
        return obj

    def __call__(self, n: int) -> "Fragment":
        return Fragment.replicate_by(self._frag, n)

    def __reduce__(self):
        return (int, (int(self),))


def _dense_registers(thread, local, frag):
    """The registers one block takes in each thread, as a mixed radix ``sum_k x_k * scales[k]`` (``x_k <
    counts[k]``, scales nested); the same set in every thread."""
    import numpy as np

    order = np.lexsort((local, thread))
    thread, local = thread[order], local[order]
    threads = np.unique(thread)
    per = len(local) // max(len(threads), 1)
    if per * len(threads) != len(local):
        raise LayoutError(f"{frag}: the threads hold different numbers of one block's elements")
    regs = local.reshape(len(threads), per)
    if not (regs == regs[0]).all():
        raise LayoutError(f"{frag}: the threads hold one block's elements in different registers")
    want = np.unique(regs[0])
    if len(want) != per or want[0] != 0:
        raise LayoutError(f"{frag}: one block's registers do not start at register 0 or repeat")
    scales, counts, size = [], [], 1
    while size < per:
        step = int(want[size])
        reps = 1
        while size * (reps + 1) <= per and np.array_equal(want[size * reps:size * (reps + 1)],
                                                           want[:size] + reps * step):
            reps += 1
        if reps == 1:
            raise LayoutError(f"{frag}: one block's registers {want.tolist()[:16]}... are not a mixed radix")
        scales.append(step)
        counts.append(reps)
        size *= reps
    return scales, counts


def _placement(scales, counts):
    """Layout from a dense register number to the register ``sum_k digit_k * scales[k]``."""
    size = math.prod(counts) if counts else 1

    def expand(r):
        out, unit = to_expr(0), 1
        for sc, n in zip(scales, counts):
            out = out + tirx.floormod(tirx.floordiv(r, unit), n) * sc
            unit *= n
        return out

    return Layout((size,), expand)


def _dense_index(flat, scales, counts):
    """The dense register number of register expression `flat` (its digits under `scales` / `counts`)."""
    out, unit = to_expr(0), 1
    for k, (sc, n) in enumerate(zip(scales, counts)):
        upper = flat if k + 1 == len(scales) else tirx.floormod(flat, scales[k + 1])
        digit = tirx.floordiv(upper, sc)
        out = out + digit * unit
        unit *= n
    return out
