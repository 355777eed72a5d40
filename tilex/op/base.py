"""The tile-operator interface and the contexts the passes hand to it."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import tvm
from tvm import tirx
from tvm.script import tirx as script_tirx

from tilex.ir.intrin import encode_tensor_map
from tilex.ir.visit import row_major_offset, substitute, walk
from tilex.layout import Fragment


class InferLevel(enum.IntEnum):
    """Layout-inference priority: strict operators pin layouts first, free loops choose last."""

    STRICT = 0
    COMMON = 1
    FREE = 2


class LayoutConflictError(ValueError):
    """Two operators want different layouts for one buffer."""


class LayoutConversionWarning(UserWarning):
    """Layout inference settled a layout conflict by converting a fragment between two layouts (the message says
    where and how: register moves or a round trip through shared memory)."""


class TileOpError(ValueError):
    """A tile operator was used in a way tilex does not support (with the reason)."""


def scope_of(buffer) -> str:
    return buffer.scope()


def is_global(buffer):
    return scope_of(buffer) in ("global", "")


def is_shared(buffer):
    return scope_of(buffer).startswith("shared")


def is_fragment(buffer):
    return scope_of(buffer) == "local.fragment"


def is_local(buffer):
    return scope_of(buffer) == "local"


@dataclass
class InferContext:
    """What an operator may read while inferring layouts."""

    layout_map: dict
    threads: int
    target: object = None
    analyzer: object = field(default_factory=tvm.sym.Analyzer)
    reducers: frozenset = frozenset()  # the T.alloc_reducer fragments (op.reducer)


@dataclass
class LowerContext:
    """What an operator may use while lowering itself to per-thread TIR."""

    layout_map: dict
    thread_var: tirx.Var
    threads: int
    target: object
    analyzer: object
    remap: dict  # logical buffer -> physical (flattened / per-thread) buffer
    lane_vars: list = field(default_factory=list)  # vector-lane loop vars created by the partitioner
    async_mma: int = 0  # 1: inside a pipelined loop whose wgmma may stay in flight; 2: warp-specialized consumer
    host_init: list = field(default_factory=list)  # host statements (tensor maps) to run before the launch
    # a program that synchronizes itself (T.ws, T.alloc_barrier, ...): the shared tiles that only TMA loads write,
    # ordered by the program's mbarriers (its MMAs on them need no fence or barrier of their own)
    async_only: frozenset = frozenset()
    tensor_maps: dict = field(default_factory=dict)
    reducers: frozenset = frozenset()  # the T.alloc_reducer fragments (op.reducer)

    def tensor_map(self, buffer, box, swizzle_bytes):
        """The (host-encoded) TMA tensor map of a global buffer (rank 1..5) for `box`, one extent per dimension,
        innermost first ((cols, rows) for a 2-d buffer); maps differing in box or swizzle are distinct."""
        key = (buffer, tuple(box), swizzle_bytes)
        if key not in self.tensor_maps:
            tmap = tirx.Var(f"{buffer.name}_tmap{len(self.tensor_maps)}", script_tirx.handle("tensormap").ty)
            self.host_init.extend(encode_tensor_map(tmap, buffer, box, swizzle_bytes))
            self.tensor_maps[key] = tmap
        return self.tensor_maps[key]

    def layout(self, buffer):
        return self.layout_map.get(buffer)

    def physical_index(self, buffer, indices):
        """(physical buffer, flat index list) for a logical access ``buffer[indices]``.

        Shared buffers go through their layout (row-major if none); fragments through their Fragment's local
        index (valid only where this thread owns the element); other buffers are left as they are.
        """
        if buffer not in self.remap:
            return buffer, list(indices)
        phys = self.remap[buffer]
        lay = self.layout_map.get(buffer)
        if is_fragment(buffer):
            assert isinstance(lay, Fragment), f"fragment {buffer.name} has no layout"
            return phys, [lay.local_offset(list(indices))]
        if lay is None:
            return phys, [row_major_offset(indices, buffer.shape)]
        return phys, [self.layout_offset(lay, indices)]

    def layout_offset(self, lay, indices):
        """Offset of element `indices` under the shared-memory Layout `lay`."""
        lane = self._lane_in(indices[-1]) if indices else None
        if lane is not None:
            # a vector access: the partitioner proved that the lanes are contiguous in this layout, so address
            # the vector's first element through the layout and add the lane (a swizzle's xor would otherwise
            # hide the contiguity from TVM's vectorizer)
            zero = {lane: tirx.const(0, "int32")}
            base = [substitute(i, zero) for i in indices]
            step = self.analyzer.simplify(indices[-1] - base[-1])
            if all(self.analyzer.can_prove_equal(a, b) for a, b in zip(indices[:-1], base[:-1])):
                return lay.offset(base, self.analyzer) + step
        return lay.offset(list(indices))

    def _lane_in(self, expr):
        if not self.lane_vars:
            return None
        found = []

        def on_var(v):
            for lv in self.lane_vars:
                if v.same_as(lv):
                    found.append(lv)

        walk(expr, (tvm.ir.Var, on_var))
        return found[0] if found else None

    def load(self, buffer, indices):
        phys, idx = self.physical_index(buffer, indices)
        return tirx.BufferLoad(phys, idx)

    def store(self, buffer, value, indices):
        phys, idx = self.physical_index(buffer, indices)
        return tirx.BufferStore(phys, value, idx)


class TileOp:
    """A tile-level operator carried by a TIR Call. Subclasses set `op_name` via @register_tile_op."""

    op_name = "tilex.?"
    free_rank = 0  # order among operators at the free level: weak users (fill) choose last

    @classmethod
    def from_call(cls, call):  # pragma: no cover - abstract
        raise NotImplementedError

    def buffers(self):
        """Buffers this operator touches (used to propagate layout changes)."""
        return []

    def infer_layout(self, ctx: InferContext, level: InferLevel) -> dict:
        return {}

    def reads_writes(self, buffer) -> tuple[bool, bool]:
        """(whether the operator reads `buffer`'s old values, whether it writes `buffer`): what a layout
        conversion around it must carry in and out. Unknown means both."""
        return True, True

    def takes_shared(self, buffer) -> bool:
        """Whether the operator works as well with `buffer` in shared memory as in registers (a fragment in
        conflict can then be staged through shared memory instead of converted)."""
        return False

    def stages_swizzled_shared(self, ctx: LowerContext) -> bool:
        """Whether `lower` allocates a swizzled shared tile of its own (it needs the 1 KB alignment that
        LowerTileOps gives dynamic shared memory when such tiles exist)."""
        return False

    def lower(self, ctx: LowerContext):  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self):
        return self.op_name
