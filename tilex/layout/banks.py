"""Shared-memory bank conflicts of warp accesses, and the XOR swizzle that removes them.

The model: shared memory has 32 banks of 4-byte words. A warp's access instruction is served in phases (all 32
threads for accesses of up to 4 bytes per thread, half warps for 8 bytes, quarter warps for 16 bytes: at most
128 bytes a phase); a phase takes as many wavefronts as the most distinct words any one bank must deliver (threads
reading the same word share it). Its conflicts are the wavefronts past the first, which is what ncu's
``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}`` counts. ldmatrix / stmatrix are modelled as their
16-byte row accesses (a phase per 8 rows).

The swizzles are CuTe's ``Swizzle<B, M, S>`` on byte offsets: the B bits starting at bit M + S are XORed into the B
bits starting at bit M (``o ^ ((o >> S) & (2^B - 1) << M)``). With M at least log2 of the widest access, vector
accesses stay contiguous; B = 1, 2, 3 with M = 4, S = 3 are the 32-, 64- and 128-byte modes TMA and the wgmma
descriptors know. :func:`synthesize` searches the family for the swizzle under which every access of a tile is
conflict-free (or has the fewest conflicts), preferring those modes, then fewer bits.

:func:`shared_accesses` reads the loads and stores of shared buffers out of a lowered kernel (warp 0's addresses
in every loop iteration) and :func:`bank_conflicts` reports them per buffer (``JITKernel.bank_conflicts()``).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import tvm
import tvm.ir.prim.expr as E
from tvm import tirx

from tilex.ir.visit import BufferLoadNode, dtype_of, row_major_offset, substitute, walk

from .layout import Layout

__all__ = ["Swizzle", "WarpAccess", "wavefronts", "conflicts", "synthesize", "row_vectors", "ldmatrix_rows",
           "column_elements", "fragment_accesses", "TMA_MODES", "SharedAccess", "shared_accesses", "bank_conflicts"]

BANKS = 32
WORD = 4
PHASE_BYTES = 128


@dataclass(frozen=True)
class Swizzle:
    """CuTe's Swizzle<bits, base, shift> on byte offsets (see the module docstring); bits 0 is the identity."""

    bits: int
    base: int
    shift: int

    def __post_init__(self):
        if self.bits < 0 or self.base < 0 or (self.bits and self.shift < self.bits):
            raise ValueError(f"Swizzle({self.bits}, {self.base}, {self.shift}): needs bits >= 0, base >= 0 and "
                             "shift >= bits (the XORed bits must not overlap the bits they are XORed into)")

    def __call__(self, offset):
        o = np.asarray(offset, dtype=np.int64)
        if not self.bits:
            return o
        mask = ((1 << self.bits) - 1) << (self.base + self.shift)
        return o ^ ((o & mask) >> self.shift)

    @property
    def span(self) -> int:
        """Bytes of the smallest aligned block the swizzle maps onto itself (a tile must be a multiple of it)."""
        return 1 << (self.base + self.shift + self.bits) if self.bits else 1

    def __str__(self):
        return f"Swizzle<{self.bits},{self.base},{self.shift}>" if self.bits else "identity"

    def layout(self, shape, elem_bytes: int) -> Layout:
        """The shared-memory Layout of a row-major tile of `shape` (`elem_bytes` per element) under this swizzle.
        Written on chunks of 2^base bytes (``off + ((y ^ z) - y) * chunk``, y and z the chunk-index bits XORed and
        read) so that the partitioner still proves vectors within a chunk contiguous."""
        shape = [int(s) for s in shape]
        if (1 << self.base) % elem_bytes or (math.prod(shape) * elem_bytes) % self.span:
            raise ValueError(f"{self}: a tile of {shape} x {elem_bytes}-byte elements is not a whole number of "
                             f"its {self.span}-byte blocks, or an element straddles its {1 << self.base}-byte chunks")
        unit = (1 << self.base) // elem_bytes
        group = 1 << self.bits

        def fwd(*idx):
            if not self.bits:
                return list(idx)
            off = row_major_offset(list(idx), shape)
            chunk = tirx.floordiv(off, unit)
            flip = tirx.floormod(chunk, group)  # div / mod rather than bit operations: the analyzer reasons on them
            key = tirx.floormod(tirx.floordiv(chunk, 1 << self.shift), group)
            return _unflatten(off + (tirx.bitwise_xor(flip, key) - flip) * unit, shape)

        holder = {}
        # an involution (the key bits sit above the flipped ones): the inverse has the same formula
        lay = Layout(shape, fwd, output_shape=shape,
                     inverse=lambda: Layout(shape, fwd, output_shape=shape, inverse=lambda: holder["lay"]))
        holder["lay"] = lay
        return lay


IDENTITY = Swizzle(0, 0, 0)
#: the 32-, 64- and 128-byte swizzle modes of TMA and of the wgmma shared-memory descriptors
TMA_MODES = (Swizzle(1, 4, 3), Swizzle(2, 4, 3), Swizzle(3, 4, 3))


@dataclass(frozen=True)
class WarpAccess:
    """One shared-memory instruction of a warp: thread t touches bytes ``[addresses[t], addresses[t] + width)``
    (offsets into the tile, before any swizzle); threads that do not take part are left out."""

    addresses: tuple
    width: int
    name: str = ""

    def __post_init__(self):
        if self.width not in (1, 2, 4, 8, 16):
            raise ValueError(f"WarpAccess {self.name!r}: width {self.width} is not 1, 2, 4, 8 or 16 bytes")
        if len(self.addresses) > 32:
            raise ValueError(f"WarpAccess {self.name!r}: {len(self.addresses)} threads, a warp has 32")
        bad = [a for a in self.addresses if a % self.width]
        if bad:
            raise ValueError(f"WarpAccess {self.name!r}: address {bad[0]} is not aligned to its width {self.width}")

    def phases(self):
        """The threads of each phase: 128 bytes' worth of consecutive threads."""
        per = max(1, PHASE_BYTES // max(self.width, WORD)) if self.width > WORD else 32
        addrs = np.asarray(self.addresses, dtype=np.int64)
        return [addrs[i:i + per] for i in range(0, len(addrs), per)]


def wavefronts(access: WarpAccess, swizzle: Swizzle = IDENTITY) -> int:
    """Wavefronts the access takes with the tile laid out by `swizzle`."""
    total = 0
    words_per_access = max(1, access.width // WORD)
    for phase in access.phases():
        if not len(phase):
            continue
        start = swizzle(phase)
        words = np.unique((start[:, None] // WORD + np.arange(words_per_access)[None, :]).ravel())
        per_bank = np.bincount(words % BANKS, minlength=BANKS)
        total += int(per_bank.max())
    return total


def conflicts(accesses, swizzle: Swizzle = IDENTITY) -> int:
    """Bank conflicts (wavefronts past the first of every phase) of one access or a list of them."""
    if isinstance(accesses, WarpAccess):
        accesses = [accesses]
    return _PhaseTable(accesses).conflicts(swizzle)


class _PhaseTable:
    """The phases of many warp accesses as arrays, so that their wavefronts under a swizzle take a few numpy
    operations instead of several per phase (:func:`synthesize` weighs every candidate swizzle on every access of
    a tile, thousands of phases in a kernel with loops). Phases are grouped by words per thread (1, 2 or 4): a
    group is a (phases x threads) address array with a mask of the threads that take part."""

    def __init__(self, accesses):
        groups = {}  # words per thread -> (address rows, mask rows)
        self.phases = 0  # phases with at least one thread: each takes one wavefront without conflicts
        for a in accesses:
            words = max(1, a.width // WORD)
            rows, masks = groups.setdefault(words, ([], []))
            for phase in a.phases():
                if not len(phase):
                    continue
                self.phases += 1
                row = np.zeros(32, dtype=np.int64)
                row[:len(phase)] = phase
                rows.append(row)
                masks.append(np.arange(32) < len(phase))
        self.groups = [(w, np.array(r), np.array(m)) for w, (r, m) in groups.items() if r]

    def wavefronts(self, swizzle: Swizzle = IDENTITY) -> int:
        total = 0
        for words, addrs, mask in self.groups:
            n = len(addrs)
            w = (swizzle(addrs) // WORD)[:, :, None] + np.arange(words)[None, None, :]
            w = np.where(mask[:, :, None], w, -1).reshape(n, -1)  # -1: a thread not in the phase
            w.sort(axis=1)
            first = np.ones(w.shape, dtype=bool)
            first[:, 1:] = w[:, 1:] != w[:, :-1]
            keep = first & (w >= 0)  # each distinct word of a phase once
            row = np.broadcast_to(np.arange(n)[:, None], w.shape)[keep]
            per_bank = np.zeros((n, BANKS), dtype=np.int64)
            np.add.at(per_bank, (row, w[keep] % BANKS), 1)
            total += int(per_bank.max(axis=1).sum())
        return total

    def conflicts(self, swizzle: Swizzle = IDENTITY) -> int:
        return self.wavefronts(swizzle) - self.phases


def _candidates(min_base, tile_bytes, max_bits):
    """Every Swizzle<B, M, S> with M >= min_base that maps the tile onto itself, the TMA modes first."""
    seen = []
    for s in TMA_MODES:
        if s.base >= min_base:
            seen.append(s)
    for bits in range(1, max_bits + 1):
        for base in range(min_base, 8):
            for shift in range(bits, 12):
                s = Swizzle(bits, base, shift)
                if s not in seen:
                    seen.append(s)
    return [s for s in seen if tile_bytes % s.span == 0]


def synthesize(accesses, tile_bytes: int, max_bits: int = 5):
    """(swizzle, conflicts): the swizzle of the tile (`tile_bytes` bytes) under which `accesses` have the fewest
    modelled conflicts; ties go to no swizzle, then a TMA / wgmma mode, then fewer bits. Every access keeps its
    vectors contiguous (the XORed bits sit above the widest access)."""
    accesses = list(accesses)
    if not accesses:
        return IDENTITY, 0
    widest = max(a.width for a in accesses)
    table = _PhaseTable(accesses)
    best = (table.conflicts(), IDENTITY)
    if best[0] == 0:
        return IDENTITY, 0
    for s in _candidates(max(int(np.log2(widest)), 2), tile_bytes, max_bits):
        c = table.conflicts(s)
        if c < best[0]:
            best = (c, s)
            if c == 0:
                break
    return best[1], best[0]


# -- warp accesses of common instruction patterns (byte offsets into a row-major tile of `row_bytes` rows)

def row_vectors(row_bytes: int, width: int = 16, row0: int = 0, col0: int = 0, name="row vectors"):
    """32 threads storing / loading consecutive `width`-byte vectors along the rows from (row0, col0 bytes): a
    cp.async, a vectorized copy or a TMA-like row fill."""
    addrs = []
    for t in range(32):
        flat = col0 + t * width
        addrs.append((row0 + flat // row_bytes) * row_bytes + flat % row_bytes)
    return WarpAccess(tuple(addrs), width, name)


def ldmatrix_rows(row_bytes: int, row0: int = 0, col0: int = 0, matrices: int = 4, name="ldmatrix"):
    """ldmatrix.x`matrices` (or stmatrix) of 8x8 16-bit matrices from a K-major tile: matrix i covers rows
    row0 + 8 * (i % 2) .. + 8 at byte column col0 + 16 * (i // 2); thread t gives row t % 8 of matrix t // 8."""
    addrs = []
    for t in range(8 * matrices):
        i, r = divmod(t, 8)
        addrs.append((row0 + 8 * (i % 2) + r) * row_bytes + col0 + 16 * (i // 2))
    return WarpAccess(tuple(addrs), 16, name)


def column_elements(row_bytes: int, elem_bytes: int = 4, col: int = 0, row0: int = 0, name="column"):
    """Thread t reading element `col` of row row0 + t (a transpose, or a column reduction)."""
    return WarpAccess(tuple((row0 + t) * row_bytes + col * elem_bytes for t in range(32)), elem_bytes, name)


def fragment_accesses(frag, elem_bytes: int, vec: int = 1, name="fragment"):
    """Warp 0's instructions storing (or loading) register fragment `frag` into a row-major tile: one per group of
    `vec` consecutive registers, thread t touching its group's first element (every replica that warp 0 holds)."""
    grids = np.meshgrid(*[np.arange(s) for s in frag.input_shape], indexing="ij")
    flat = np.zeros(grids[0].shape, dtype=np.int64) if grids else np.zeros(())
    for g, s in zip(grids, frag.input_shape):
        flat = flat * int(s) + g
    at = {}
    for r in range(int(frag.replicate)):
        thread, local = frag.map_numpy(*grids, rep=r)
        reg = np.zeros(grids[0].shape, dtype=np.int64)
        for lx, n in zip(local, frag.local_shape):
            reg = reg * int(n) + np.broadcast_to(np.asarray(lx), grids[0].shape)
        thread = np.broadcast_to(np.asarray(thread), grids[0].shape)
        for t, l, o in zip(thread.ravel(), reg.ravel(), flat.ravel()):
            if t < 32:
                at[(int(l), int(t))] = int(o) * elem_bytes
    out = []
    for l0 in range(0, frag.local_size, vec):
        addrs = tuple(at[(l0, t)] for t in range(32) if (l0, t) in at)
        if addrs:
            out.append(WarpAccess(addrs, vec * elem_bytes, name))
    return out


def _unflatten(flat, shape):
    out = []
    for s in reversed(shape[1:]):
        out.append(tirx.floormod(flat, s))
        flat = tirx.floordiv(flat, s)
    return [flat] + out[::-1]


# -- the shared-memory accesses of a lowered kernel

@dataclass
class SharedAccess:
    """One shared-memory access instruction of a kernel as warp 0 executes it, once per iteration of its enclosing
    loops: `kind` "ld" or "st", `accesses` one WarpAccess per iteration (byte offsets into the buffer)."""

    buffer: str
    kind: str
    accesses: list
    buffer_bytes: int

    @property
    def conflicts(self) -> int:
        return conflicts(self.accesses)


def _contiguous_lanes(flat, lane_var, lanes, threads, loops):
    """Whether offset `flat` advances by one element per lane of the vectorized loop over `lane_var` (checked with
    the thread indices at zero and the other `loops` at their first iteration)."""
    env = {var: 0 for var in threads.values()}
    for lp in loops:
        env[lp.loop_var] = _const(lp.min, env) if lp.min is not None else 0
    first = None
    for lane in range(lanes):
        env[lane_var] = lane
        a = _const(flat, env)
        if a is None:
            return False
        if first is None:
            first = a
        elif a != first + lane:
            return False
    return True


def _is_shared(buf) -> bool:
    return str(buf.scope()).startswith("shared")


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


# integer arithmetic of an address (TVM's simplifier does not fold XOR of constants, the swizzles' operator)
_INT_OPS = {E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
            E.FloorDiv: lambda a, b: a // b, E.FloorMod: lambda a, b: a % b,
            E.Div: _trunc_div, E.Mod: lambda a, b: a - _trunc_div(a, b) * b, E.Min: min, E.Max: max,
            E.BitwiseXor: lambda a, b: a ^ b, E.BitwiseAnd: lambda a, b: a & b, E.BitwiseOr: lambda a, b: a | b,
            E.LShift: lambda a, b: a << b, E.RShift: lambda a, b: a >> b,
            E.EQ: lambda a, b: int(a == b), E.NE: lambda a, b: int(a != b), E.LT: lambda a, b: int(a < b),
            E.LE: lambda a, b: int(a <= b), E.GT: lambda a, b: int(a > b), E.GE: lambda a, b: int(a >= b),
            E.And: lambda a, b: int(bool(a) and bool(b)), E.Or: lambda a, b: int(bool(a) or bool(b))}


def _const(e, env):
    """The integer value of `e` with the variables of `env` (Var -> int), or None when it uses another."""
    if isinstance(e, E.IntImm):
        return int(e)
    if isinstance(e, E.Var):
        return env.get(e)
    if isinstance(e, E.Cast):
        return _const(e.value, env)
    if isinstance(e, E.Select):
        c = _const(e.condition, env)
        return None if c is None else _const(e.true_value if c else e.false_value, env)
    op = _INT_OPS.get(type(e))
    if op is None:
        return None
    a, b = _const(e.a, env), _const(e.b, env)
    return None if a is None or b is None else op(a, b)


def _trunc_div_np(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((np.asarray(a) >= 0) == (np.asarray(b) >= 0), q, -q)


def _flag(x):
    return np.asarray(x, dtype=np.int64)


# _INT_OPS on int64 arrays (the lanes of a warp at once)
_ARRAY_OPS = {**_INT_OPS, E.Div: _trunc_div_np, E.Mod: lambda a, b: a - _trunc_div_np(a, b) * b, E.Min: np.minimum,
              E.Max: np.maximum, E.EQ: lambda a, b: _flag(a == b), E.NE: lambda a, b: _flag(a != b),
              E.LT: lambda a, b: _flag(a < b), E.LE: lambda a, b: _flag(a <= b), E.GT: lambda a, b: _flag(a > b),
              E.GE: lambda a, b: _flag(a >= b), E.And: lambda a, b: _flag(np.logical_and(a, b)),
              E.Or: lambda a, b: _flag(np.logical_or(a, b))}


def _lane_values(e, env):
    """:func:`_const` with some variables bound to int64 arrays (one value per lane): the values of `e` (an array,
    or an int where no lane variable reaches it), or None when it uses a variable `env` does not bind."""
    if isinstance(e, E.IntImm):
        return int(e)
    if isinstance(e, E.Var):
        return env.get(e)
    if isinstance(e, E.Cast):
        return _lane_values(e.value, env)
    if isinstance(e, E.Select):
        c = _lane_values(e.condition, env)
        if c is None:
            return None
        if np.ndim(c) == 0 or np.all(c) or not np.any(c):
            taken = bool(np.ravel(c)[0]) if np.ndim(c) else bool(c)
            return _lane_values(e.true_value if taken else e.false_value, env)
        a, b = _lane_values(e.true_value, env), _lane_values(e.false_value, env)
        return None if a is None or b is None else np.where(c, a, b)
    op = _ARRAY_OPS.get(type(e))
    if op is None:
        return None
    a, b = _lane_values(e.a, env), _lane_values(e.b, env)
    return None if a is None or b is None else op(a, b)


def shared_accesses(func, max_iterations: int = 64, warp_threads: int = 32, warps: int = 1) -> list:
    """The shared-memory loads and stores of a lowered per-thread PrimFunc (`tilex.engine.pipeline.lower_to_tir`)
    as :class:`SharedAccess` es: each evaluated for the lanes of the first `warps` warps (threadIdx.x = 0..31 for
    warp 0; other thread and block indices 0) that the enclosing conditions let through (one the model cannot
    evaluate lets every lane through) in every iteration of
    its enclosing loops (the first `max_iterations`); a vectorized loop
    around it makes the access that many elements wide (16-byte pieces past 16 bytes). Buffers are assumed to
    start 128-byte aligned. Accesses through intrinsics (ldmatrix, cp.async, TMA, wgmma descriptors) are not
    read yet, nor ones whose address depends on a symbolic size."""
    found = {}  # (buffer name, kind, id of the node) -> SharedAccess
    threads = {}

    def record(buf, indices, kind, loops, lets, node, conds):
        nbytes = tvm.DataType(str(buf.dtype)).bits // 8
        if nbytes == 0:
            return  # sub-byte elements (int4, float4_e2m1fn tiles): not modelled
        flat = indices[0] if len(indices) == 1 else row_major_offset(indices, buf.shape)
        lanes = 1
        if isinstance(flat, tirx.Ramp):
            if not (isinstance(flat.stride, tirx.IntImm) and flat.stride.value == 1):
                return
            lanes, flat = int(flat.lanes), flat.base
        vec = [lp for lp in loops if lp.kind == tirx.ForKind.VECTORIZED]
        outer = [lp for lp in loops if lp.kind != tirx.ForKind.VECTORIZED]
        flat = substitute(flat, lets)
        lane_var = vec[-1].loop_var if vec else None
        if vec and not _contiguous_lanes(flat, lane_var, int(vec[-1].extent), threads, outer):
            # lanes that are not consecutive elements: the vectorizer leaves one scalar access per lane
            outer, vec = loops, []
        if vec:
            lanes *= int(vec[-1].extent)
            flat = substitute(flat, {lane_var: tirx.const(0, dtype_of(lane_var))})
        width = lanes * nbytes
        if width > 16 and width % 16:
            return
        pieces = max(1, width // 16)
        width = min(width, 16)
        zero = {var: 0 for var in threads.values()}
        extents = []
        for lp in outer:
            lo = _const(lp.min, zero) if lp.min is not None else 0
            n = _const(lp.extent, zero)
            if lo is None:
                return
            # a loop whose trip count depends on the block (a persistent kernel's tile loop): its first iteration
            extents.append(range(lo, lo + n) if n is not None and isinstance(lp.extent, tirx.IntImm) else [lo])
        size = 1
        for d in buf.shape:
            size *= int(d) if isinstance(d, tirx.IntImm) else 0
        tid = threads.get("threadIdx.x")
        accesses = []
        for values in itertools.islice(itertools.product(*extents), max_iterations):
            bind = dict(zero)
            bind.update((lp.loop_var, v) for lp, v in zip(outer, values))
            for warp in range(warps if tid is not None else 1):
                if tid is not None:  # every lane of the warp at once
                    lanes_at = np.arange(warp_threads, dtype=np.int64) + warp * warp_threads
                    bind[tid] = lanes_at
                    taken = np.ones(warp_threads, dtype=bool)
                    for c, want in conds:  # lanes the enclosing conditions leave out (a producer warp's branch)
                        v = _lane_values(c, bind)
                        if v is not None:
                            taken &= np.broadcast_to(np.asarray(v) == int(want), taken.shape)
                    a = _lane_values(flat, bind) if taken.any() else 0
                    if a is None:
                        return
                    addrs = [int(x) * nbytes for x in np.broadcast_to(a, taken.shape)[taken]]
                else:
                    addrs = []
                    if all(_const(c, bind) in (None, int(want)) for c, want in conds):
                        a = _const(flat, bind)
                        if a is None:
                            return
                        addrs.append(a * nbytes)
                for p in range(pieces if addrs else 0):
                    accesses.append(WarpAccess(tuple(x + 16 * p for x in addrs), width, buf.name))
        key = (buf.name, kind, node)
        if key not in found:
            found[key] = SharedAccess(buf.name, kind, accesses, size * nbytes)

    def loads_in(expr, loops, lets, conds):
        def on_load(n):
            if _is_shared(n.source):
                record(n.source, list(n.indices), "ld", loops, lets, n, conds)
        walk(expr, (BufferLoadNode, on_load))

    def visit(s, loops, lets, conds):
        """Visit `s` under the conditions `conds` ([(condition, taken)]); returns the bindings in scope after it (a
        flat Bind reaches the statements after it)."""
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                lets = visit(x, loops, lets, conds)
        elif isinstance(s, tirx.Bind):
            loads_in(s.value, loops, lets, conds)
            return {**lets, s.var: substitute(s.value, lets)}
        elif isinstance(s, tirx.For):
            visit(s.body, loops + [s], lets, conds)
        elif isinstance(s, tirx.AttrStmt):
            if s.attr_key == "thread_extent":
                threads[s.node.thread_tag] = s.node.var
            visit(s.body, loops, lets, conds)
        elif isinstance(s, tirx.IfThenElse):
            loads_in(s.condition, loops, lets, conds)
            cond = substitute(s.condition, lets)
            visit(s.then_case, loops, lets, conds + [(cond, True)])
            if s.else_case is not None:
                visit(s.else_case, loops, lets, conds + [(cond, False)])
        elif isinstance(s, tirx.LetStmt):
            loads_in(s.value, loops, lets, conds)
            visit(s.body, loops, {**lets, s.var: substitute(s.value, lets)}, conds)
        elif isinstance(s, tirx.BufferStore):
            loads_in(s.value, loops, lets, conds)
            if _is_shared(s.buffer):
                record(s.buffer, list(s.indices), "st", loops, lets, s, conds)
        elif isinstance(s, tirx.Evaluate):
            loads_in(s.value, loops, lets, conds)
        elif hasattr(s, "body"):
            visit(s.body, loops, lets, conds)
        return lets

    # thread bindings first (launch_thread attributes wrap the body)
    walk(func.body, (tirx.AttrStmt, lambda a: threads.__setitem__(a.node.thread_tag, a.node.var)
                     if a.attr_key == "thread_extent" else None))
    visit(func.body, [], {}, [])
    return list(found.values())


def bank_conflicts(func, **kw) -> dict:
    """Per shared buffer of a lowered PrimFunc: modelled conflicts of its loads and stores (warp 0, every loop
    iteration), how many access sites (instructions in the code) were read, and the swizzle :func:`synthesize` proposes with the
    conflicts left under it: ``{buffer: {"ld": n, "st": n, "sites": n, "swizzle": Swizzle, "after": n}}``."""
    out = {}
    for acc in shared_accesses(func, **kw):
        row = out.setdefault(acc.buffer, {"ld": 0, "st": 0, "sites": 0, "accesses": [],
                                          "bytes": acc.buffer_bytes})
        row[acc.kind] += acc.conflicts
        row["sites"] += 1
        row["accesses"].extend(acc.accesses)
    for row in out.values():
        accesses = row.pop("accesses")
        row["swizzle"], row["after"] = synthesize(accesses, row.pop("bytes") or 1)
    return out
