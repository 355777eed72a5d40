"""The hand-written-kernel ("expert") layer: programs that manage their own synchronization (TileLang's names).

A program that uses these names is compiled as written: tilex's automatic warp specialization and software
pipelining leave it alone (its ``T.Pipelined`` loops run serially, the function attribute
``tilex.manual_synchronization`` says why), its mbarriers and waits are the ones it writes.

Barriers
  ``T.alloc_barrier(arrive_counts)``: mbarriers in shared memory, initialized once when the block starts (thread 0
  sets each one's arrival count, fences the initialization for the async proxy, and the block synchronizes);
  ``T.mbarrier_wait_parity`` / ``T.barrier_wait`` (wait until the phase of that parity completed),
  ``T.mbarrier_arrive`` / ``T.barrier_arrive`` (every thread that runs it arrives), ``T.mbarrier_expect_tx``,
  ``T.mbarrier_arrive_expect_tx`` (transaction bytes), ``T.named_barrier_arrive`` (``bar.arrive id, count``),
  ``T.fence_proxy_async``.
TMA and async copies
  ``T.tma_copy`` (a load: expect_tx + TMA boxes by one thread, no wait; a store: TMA boxes + commit, no wait),
  ``T.tma_store_arrive`` / ``T.tma_store_wait``, ``T.async_copy`` (cp.async + commit, no wait),
  ``T.ptx_cp_async`` (one thread's cp.async through ``T.access_ptr`` pointers), ``T.cp_async_barrier_noinc``
  (arrive on an mbarrier when this thread's cp.async copies land), ``T.ptx_commit_group`` / ``T.ptx_wait_group``.
Warp-group roles and registers
  ``with T.ws(*warp_group_ids):`` a region run by those warp groups (128 threads each): ``if threadIdx.x // 128 ==
  g``; its tile operators run on its threads and its barriers are named barriers over them
  (`tilex.transform.thread_regions`). ``T.set_max_nreg`` (``setmaxnreg``); ``T.no_set_max_nreg``,
  ``T.disable_warp_group_reg_alloc``, ``T.annotate_producer_reg_dealloc``, ``T.annotate_consumer_reg_alloc``:
  register-split hints of TileLang's automatic warp specialization, accepted and without effect (tilex's own
  split follows occupancy; in a T.ws program, as in TileLang, the program's ``T.set_max_nreg`` calls are the split).
Explicit MMA
  ``T.wgmma_gemm`` (warpgroup MMAs issued and committed, no wait; no mma.sync fallback), ``T.wait_wgmma``.
Workspaces
  ``T.access_ptr`` (the address of a buffer element, with its access mask, through the buffer's layout);
  ``T.alloc_global`` (a global-memory workspace the host allocates for each call, shared by the program's
  kernels).
Grid barrier
  ``T.sync_grid`` (every thread of every block; the kernel is launched cooperatively, `tilex.transform.grid_sync`).
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as _ir

from tilex.ir import intrin
from tilex.ir.names import ACCESS_PTR_OP, BARRIER_INIT_OP, THREAD_RANGE
from tilex.ir.visit import BufferLoadNode, BufferRegionNode, dtype_of, is_op_call
from tilex.language.dtypes import canonical_dtype
from tilex.language.kernel import NAMED_BARRIERS, current_kernel, integer_arg
from tilex.language.options import as_bool, as_int, constant, no_annotations, positive_extents, unsupported
from tilex.language.tileop import EVICTION_POLICIES
from tilex.op.explicit_async import async_copy_call, tma_copy_call, wgmma_gemm_call
from tilex.op.gemm import GemmWarpPolicy

__all__ = ["alloc_barrier", "barrier_arrive", "barrier_wait", "mbarrier_wait_parity", "mbarrier_arrive",
           "mbarrier_expect_tx", "mbarrier_arrive_expect_tx", "named_barrier_arrive", "fence_proxy_async",
           "tma_copy", "tma_store_arrive", "tma_store_wait", "async_copy", "ptx_cp_async", "cp_async_barrier_noinc",
           "ptx_commit_group", "ptx_wait_group",
           "ws", "set_max_nreg", "inc_max_nreg", "dec_max_nreg", "no_set_max_nreg", "disable_warp_group_reg_alloc",
           "annotate_producer_reg_dealloc", "annotate_consumer_reg_alloc", "wgmma_gemm", "wait_wgmma",
           "access_ptr", "alloc_global", "sync_grid"]

WARP_GROUP = 128  # threads of a warp group
MAX_ARRIVE_COUNT = (1 << 20) - 1  # the PTX ISA's limit on an mbarrier's expected arrivals
MAX_TX_COUNT = (1 << 20) - 1  # ... and on its transaction count
_BARRIER_SCOPES = ("shared", "shared.dyn")


# ---- barriers -------------------------------------------------------------------------------------------------------
def alloc_barrier(arrive_count):
    """``n`` mbarriers in shared memory, one per entry of `arrive_count` (an int: one barrier): ``bars =
    T.alloc_barrier([128] * 2)``, then ``bars[i]`` (a single barrier is used as ``bar`` or ``bar[0]``).

    Each is initialized once, before anything else of the block runs past this point: thread 0 gives it its
    arrival count (how many arrivals complete a phase), fences the initialization for the async proxy (TMA), and
    the block synchronizes. Write it directly in the ``T.Kernel`` body (not inside a loop, a condition or a
    ``T.ws`` region)."""
    api = "T.alloc_barrier"
    counts = list(arrive_count) if isinstance(arrive_count, (list, tuple)) else [arrive_count]
    if not counts:
        raise ValueError(f"{api}: arrive_count must name at least one barrier, got {arrive_count!r}")
    counts = [as_int(api, "arrive_count", c, minimum=1, maximum=MAX_ARRIVE_COUNT) for c in counts]
    current_kernel(api)
    frames = IRBuilder.current().frames
    if type(frames[-1]).__name__ != "LaunchThreadFrame":
        raise ValueError(f"{api} must be written directly in the T.Kernel body (not inside a loop, a condition or a "
                         f"T.ws region): its barriers are initialized once, when the block starts")
    bars = _ir.alloc_buffer((len(counts),), "uint64", scope="shared")
    _ir.evaluate(tirx.call_intrin("void", BARRIER_INIT_OP, tirx.BufferLoad(bars, [tirx.const(0, "int32")]),
                                  *[tirx.const(c, "int32") for c in counts]))
    return bars


def _barrier(api, mbarrier):
    """The address of one mbarrier: `mbarrier` is ``bars[i]`` or a one-barrier buffer."""
    if isinstance(mbarrier, BufferLoadNode):
        buf, index = mbarrier.source, list(mbarrier.indices)
    elif tirx.is_buffer_var(mbarrier):
        buf = mbarrier
        n = constant(buf.shape[0]) if len(buf.shape) == 1 else None
        if n != 1:
            raise ValueError(f"{api}: '{buf.name}' holds {list(buf.shape)} barriers; name one: {buf.name}[i]")
        index = [tirx.const(0, "int32")]
    else:
        raise TypeError(f"{api}: the barrier must be an mbarrier from T.alloc_barrier (bar or bars[i]), got "
                        f"{mbarrier!r}")
    if str(buf.dtype) != "uint64" or str(buf.scope()) not in _BARRIER_SCOPES or len(buf.shape) != 1:
        raise TypeError(f"{api}: '{buf.name}' ({buf.dtype}, {list(buf.shape)} in '{buf.scope()}') is not an mbarrier "
                        f"array (T.alloc_barrier)")
    i = constant(index[0]) if len(index) == 1 else None
    n = constant(buf.shape[0])
    if isinstance(i, int) and isinstance(n, int) and not 0 <= i < n:
        raise ValueError(f"{api}: barrier index {i} is out of range for '{buf.name}', which holds {n} "
                         f"barrier{'s' if n != 1 else ''}")
    return tirx.BufferLoad(buf, index)


def _barrier_ptr(api, mbarrier):
    return tirx.address_of(_barrier(api, mbarrier))


def _count(api, name, value, maximum):
    v = integer_arg(api, name, value)
    if isinstance(v, int):
        v = as_int(api, name, v, minimum=0, maximum=maximum)
    return v


def mbarrier_wait_parity(mbarrier, parity):
    """Wait (every thread that runs it) until the phase of `parity` (0 or 1, an int or an integer expression) of
    the mbarrier has completed. A fresh barrier counts the phase before its first as completed with parity 1, so a
    producer's first wait on parity ``1`` returns at once."""
    api = "T.mbarrier_wait_parity"
    ptr = _barrier_ptr(api, mbarrier)
    return intrin.mbar_wait(ptr, integer_arg(api, "parity", parity)).value


def barrier_wait(mbarrier, parity):
    """``T.mbarrier_wait_parity(mbarrier, parity)``."""
    return mbarrier_wait_parity(mbarrier, parity)


def mbarrier_arrive(mbarrier, cta_id=None):
    """Every thread that runs it arrives once on the mbarrier (its arrival count completes a phase, with the
    transaction bytes it expects). `cta_id` (a remote arrive on a cluster barrier) is not supported."""
    api = "T.mbarrier_arrive"
    if cta_id is not None:
        unsupported(api, "cta_id", cta_id, "cluster barriers (T.alloc_cluster_barrier) are not supported by tilex")
    return intrin.mbar_arrive(_barrier_ptr(api, mbarrier)).value


def barrier_arrive(mbarrier):
    """``T.mbarrier_arrive(mbarrier)``."""
    return mbarrier_arrive(mbarrier)


def mbarrier_expect_tx(mbarrier, tx):
    """Every thread that runs it adds `tx` bytes to the transaction count of the mbarrier's current phase (without
    arriving): the phase completes once they have landed (TMA loads) and its arrivals are in."""
    api = "T.mbarrier_expect_tx"
    return intrin.mbar_expect_tx(_barrier_ptr(api, mbarrier), _count(api, "tx", tx, MAX_TX_COUNT)).value


def mbarrier_arrive_expect_tx(mbarrier, tx):
    """Every thread that runs it arrives on the mbarrier and adds `tx` transaction bytes to its phase."""
    api = "T.mbarrier_arrive_expect_tx"
    return intrin.mbar_arrive_expect_tx(_barrier_ptr(api, mbarrier), _count(api, "tx", tx, MAX_TX_COUNT)).value


def named_barrier_arrive(barrier_id, thread_count):
    """Arrive on named barrier `barrier_id` (1..15; 0 is ``__syncthreads``') of `thread_count` threads (a multiple
    of 32) without waiting (``bar.arrive``): the threads that wait there with ``T.sync_threads(barrier_id,
    thread_count)`` go on once all have arrived or waited."""
    api = "T.named_barrier_arrive"
    bar = integer_arg(api, "barrier_id", barrier_id)
    if isinstance(bar, int):
        bar = as_int(api, "barrier_id", bar, minimum=0, maximum=NAMED_BARRIERS - 1)
    count = integer_arg(api, "thread_count", thread_count)
    if isinstance(count, int):
        count = as_int(api, "thread_count", count, minimum=32)
        if count % 32:
            raise ValueError(f"{api}: thread_count must be a multiple of 32 (whole warps), got {count}")
        kernel = current_kernel(api)
        if count > kernel.num_threads:
            raise ValueError(f"{api}: thread_count {count} is more than the block's {kernel.num_threads} threads")
    return intrin.named_barrier_arrive(bar, count).value


def fence_proxy_async():
    """``fence.proxy.async.shared::cta``: this thread's shared-memory writes become visible to the async proxy
    (TMA stores, warpgroup MMAs of other threads after a barrier)."""
    return intrin.fence_proxy_async().value


# ---- TMA and async copies ---------------------------------------------------------------------------------------------
def tma_copy(src, dst, *, barrier=None, cluster_mask=None, leader_scope_threads=None, eviction_policy=None,
             annotations=None):
    """A TMA copy the program synchronizes itself.

    A load (global -> shared, `barrier` required): the first of the threads running it adds the tile's bytes to
    `barrier`'s transaction count (``mbarrier.expect_tx``) and issues the TMA boxes; nobody waits. The program
    arrives on the barrier (``T.barrier_arrive``, as its arrival count says) and waits for it
    (``T.mbarrier_wait_parity``). A store (shared -> global, no barrier): the threads fence their writes of the tile
    and meet at a barrier, the first issues the boxes and commits the bulk group; nobody waits for it
    (``T.tma_store_wait``). The tile gets the wgmma swizzle layout TMA writes (a gemm reading it wants the same).

    Not supported (NotImplementedError): `cluster_mask` (multicast), `leader_scope_threads`, an `eviction_policy`
    other than ``"evict_normal"``, `annotations`."""
    api = "T.tma_copy"
    if cluster_mask is not None:
        unsupported(api, "cluster_mask", cluster_mask, "tilex issues no multicast TMA loads of its own in "
                                                       "hand-written programs")
    if leader_scope_threads is not None:
        unsupported(api, "leader_scope_threads", leader_scope_threads,
                    "the first thread of the threads running the copy issues it")
    if isinstance(eviction_policy, int) and not isinstance(eviction_policy, bool) and 0 <= eviction_policy < 3:
        eviction_policy = EVICTION_POLICIES[eviction_policy]
    if eviction_policy is not None and eviction_policy not in EVICTION_POLICIES:
        raise ValueError(f"{api}: eviction_policy must be one of {EVICTION_POLICIES} or None, got {eviction_policy!r}")
    if eviction_policy not in (None, "evict_normal"):
        unsupported(api, "eviction_policy", eviction_policy, "TMA copies use the default cache policy")
    no_annotations(api, annotations)
    bar = _barrier(api, barrier) if barrier is not None else None
    return tma_copy_call(src, dst, bar)


def tma_store_arrive():
    """Commit this thread's TMA stores issued since the last commit as one bulk group
    (``cp.async.bulk.commit_group``)."""
    return intrin.bulk_commit().value


def tma_store_wait(count=0, read=True):
    """Wait until at most `count` bulk groups of this thread are in flight: with `read` (the default) until their
    shared-memory tiles have been read (they may be rewritten), else until their global writes are done."""
    api = "T.tma_store_wait"
    n = as_int(api, "count", count, minimum=0)
    return (intrin.bulk_wait_read(n) if as_bool(api, "read", read) else intrin.bulk_wait(n)).value


def async_copy(src, dst, *, coalesced_width=None, annotations=None, loop_layout=None):
    """A global -> shared tile copy as ``cp.async`` chunks (4, 8 or 16 bytes; elements outside the global tensor
    are filled with zeros) followed by ``cp.async.commit_group``; nobody waits: the program waits with
    ``T.ptx_wait_group``, and the barrier before other threads read the tile is placed as usual. Not supported
    (NotImplementedError): `coalesced_width`, `annotations`, `loop_layout`."""
    api = "T.async_copy"
    if coalesced_width is not None:
        unsupported(api, "coalesced_width", coalesced_width, "tilex picks the chunk width from the layouts")
    if loop_layout is not None:
        unsupported(api, "loop_layout", loop_layout, "copy loops take their layout from layout inference")
    no_annotations(api, annotations)
    return async_copy_call(src, dst)


def ptx_cp_async(dst_access_ptr, src_access_ptr, num_elems, predicate=None):
    """One ``cp.async`` of `num_elems` elements (4, 8 or 16 bytes) from global to shared memory by this thread:
    ``T.ptx_cp_async(T.access_ptr(S[i, j], "w", 8), T.access_ptr(A[r, c], "r", 8), 8)``. With `predicate` false
    the destination is filled with zeros instead. The program commits and waits (``T.ptx_commit_group`` /
    ``T.ptx_wait_group``, or ``T.cp_async_barrier_noinc``)."""
    api = "T.ptx_cp_async"
    bits = _pointee_bits(api, "dst_access_ptr", dst_access_ptr)
    _pointee_bits(api, "src_access_ptr", src_access_ptr)
    n = as_int(api, "num_elems", num_elems, minimum=1)
    nbytes = n * bits // 8
    if nbytes not in (4, 8, 16) or n * bits % 8:
        raise ValueError(f"{api}: {n} elements of {bits} bits are {n * bits / 8:g} bytes; cp.async copies 4, 8 or "
                         f"16 bytes")
    if predicate is None:
        return intrin.cp_async(nbytes, dst_access_ptr, src_access_ptr).value
    return intrin.cp_async_zfill(nbytes, dst_access_ptr, src_access_ptr, predicate).value


def _pointee_bits(api, name, ptr):
    """Bits of the elements a pointer from T.access_ptr (or TVM's T.tvm_access_ptr) points at."""
    if is_op_call(ptr, ACCESS_PTR_OP):
        return tvm.DataType(dtype_of(ptr.args[0])).bits
    if is_op_call(ptr, "tirx.tvm_access_ptr"):
        return tvm.DataType(dtype_of(ptr.args[0])).bits
    raise TypeError(f"{api}: {name} must be a pointer from T.access_ptr, got {ptr!r}")


def cp_async_barrier_noinc(barrier):
    """``cp.async.mbarrier.arrive.noinc``: this thread arrives on the mbarrier once every cp.async it issued before
    has landed; the arrival is one of those the barrier's count expects (a producer of 128 threads each arriving
    so completes a barrier of count 128)."""
    return intrin.cp_async_mbar_arrive_noinc(_barrier_ptr("T.cp_async_barrier_noinc", barrier)).value


def ptx_commit_group():
    """``cp.async.commit_group``: this thread's cp.async copies since the last commit form one group."""
    return intrin.cp_async_commit().value


def ptx_wait_group(num):
    """``cp.async.wait_group num``: wait until at most `num` (a constant) cp.async groups of this thread are in
    flight."""
    return intrin.cp_async_wait(as_int("T.ptx_wait_group", "num", num, minimum=0)).value


# ---- warp-group roles and registers ------------------------------------------------------------------------------------
_OPEN_WS: list = []


class _WarpGroups:
    """The frames of a ``with T.ws(...)`` region (see :func:`ws`)."""

    def __init__(self, groups):
        self.groups = groups
        self._frames = []

    def __enter__(self):
        api = f"T.ws({', '.join(str(g) for g in self.groups)})"
        kernel = current_kernel(api)
        threads = kernel.num_threads
        if threads % WARP_GROUP:
            raise ValueError(f"{api}: the block has {threads} threads, not whole warp groups of {WARP_GROUP}")
        have = threads // WARP_GROUP
        for g in self.groups:
            if g >= have:
                raise ValueError(f"{api}: the block has {have} warp group{'s' if have != 1 else ''} ({threads} "
                                 f"threads), so there is no warp group {g}")
        if _OPEN_WS:
            raise ValueError(f"{api} inside another T.ws region: T.ws regions do not nest")
        first, end = self.groups[0], self.groups[-1] + 1
        wg = tirx.floordiv(kernel.linear_thread_index(), WARP_GROUP)
        if end - first == 1:
            cond = wg == first
        elif first == 0:
            cond = wg < end
        else:
            cond = tirx.And(wg >= first, wg < end)
        self._frames = [_ir.If(cond), _ir.Then(),
                        _ir.attr(tirx.const(first * WARP_GROUP, "int32"), THREAD_RANGE,
                                 tirx.const((end - first) * WARP_GROUP, "int32"))]
        for f in self._frames:
            f.__enter__()
        _OPEN_WS.append(self)
        return None

    def __exit__(self, *exc):
        _OPEN_WS.remove(self)
        for f in reversed(self._frames):
            f.__exit__(*exc)
        self._frames = []


def ws(*warp_group_ids):
    """``with T.ws(1):`` a region run only by warp group 1 (threads 128..255): ``if threadIdx.x // 128 == 1``.
    ``T.ws(0, 1)`` runs on warp groups 0 and 1 (they must be consecutive). Tile operators inside run on the
    region's threads (a gemm in a 128-thread region is one warpgroup's), fragments they use belong to those
    threads, and the barriers they need are named barriers over them; the program orders the regions among
    themselves (T.alloc_barrier and its waits)."""
    if not warp_group_ids:
        raise ValueError("T.ws needs at least one warp group index")
    groups = sorted({as_int("T.ws", "warp_group_ids", g, minimum=0) for g in warp_group_ids})
    if groups[-1] - groups[0] + 1 != len(groups):
        raise NotImplementedError(f"T.ws{tuple(warp_group_ids)}: warp groups that are not consecutive are not "
                                  f"supported by tilex (a region's tile operators run on one interval of threads)")
    return _WarpGroups(groups)


def set_max_nreg(reg_count, is_inc):
    """``setmaxnreg``: the warp group running it raises (`is_inc` 1) or lowers (0) its registers per thread to
    `reg_count` (24..256, a multiple of 8); every thread of the warp group must run it. sm_90a-class targets."""
    api = "T.set_max_nreg"
    n = as_int(api, "reg_count", reg_count, minimum=24, maximum=256)
    if n % 8:
        raise ValueError(f"{api}: reg_count must be a multiple of 8, got {n}")
    inc = as_int(api, "is_inc", is_inc, minimum=0, maximum=1)
    return (intrin.reg_alloc(n) if inc else intrin.reg_dealloc(n)).value


def inc_max_nreg(reg_count):
    """``T.set_max_nreg(reg_count, 1)``."""
    return set_max_nreg(reg_count, 1)


def dec_max_nreg(reg_count):
    """``T.set_max_nreg(reg_count, 0)``."""
    return set_max_nreg(reg_count, 0)


def no_set_max_nreg():
    """A hint to TileLang's automatic warp specialization (no register reallocation). Accepted and without effect:
    tilex's automatic warp specialization sets its registers from occupancy, and a T.ws program's registers are its
    own ``T.set_max_nreg`` calls."""
    return None


def disable_warp_group_reg_alloc():
    """``T.no_set_max_nreg()`` (accepted, without effect)."""
    return no_set_max_nreg()


def _reg_hint(api, reg_count):
    as_int(api, "reg_count", reg_count, minimum=24, maximum=240)
    return None


def annotate_producer_reg_dealloc(reg_count=24):
    """A hint to TileLang's automatic warp specialization (the producer's registers, 24..240). Accepted and
    without effect: tilex's automatic warp specialization sets its register split from occupancy."""
    return _reg_hint("T.annotate_producer_reg_dealloc", reg_count)


def annotate_consumer_reg_alloc(reg_count=240):
    """A hint to TileLang's automatic warp specialization (the consumers' registers, 24..240). Accepted and
    without effect: tilex's automatic warp specialization sets its register split from occupancy."""
    return _reg_hint("T.annotate_consumer_reg_alloc", reg_count)


# ---- explicit MMA -------------------------------------------------------------------------------------------------------
def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False,
               annotations=None):
    """``C += A @ B`` on warpgroup MMAs, issued and committed without a wait: the program waits with
    ``T.wait_wgmma(n)`` before it reads C (or lets A / B change). `clear_accum` may be a run-time condition
    (``clear_accum=(j == 0)``). No mma.sync fallback: a target or operands warpgroup MMAs cannot take are an
    error. Shared operands that only ``T.tma_copy`` writes are read as they
    are (the program's mbarrier wait ordered them); otherwise they are fenced and synchronized first."""
    api = "T.wgmma_gemm"
    transpose_A = as_bool(api, "transpose_A", transpose_A)
    transpose_B = as_bool(api, "transpose_B", transpose_B)
    p = constant(policy)
    if isinstance(p, bool) or not isinstance(p, int) or p not in {int(x) for x in GemmWarpPolicy}:
        raise ValueError(f"{api}: policy must be a T.GemmWarpPolicy, got {policy!r}")
    if isinstance(constant(clear_accum), (bool, int)) or not tvm.ir.is_prim_expr(clear_accum):
        clear_accum = as_bool(api, "clear_accum", clear_accum)
    elif tvm.DataType(dtype_of(clear_accum)).type_code not in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) \
            and dtype_of(clear_accum) != "bool":
        raise TypeError(f"{api}: clear_accum must be a bool or a boolean expression, got {clear_accum!r}")
    no_annotations(api, annotations)
    return wgmma_gemm_call(A, B, C, transpose_A, transpose_B, GemmWarpPolicy(p), clear_accum)


def wait_wgmma(id):  # noqa: A002 - TileLang's spelling
    """``wgmma.wait_group id``: wait until at most `id` (a constant) committed warpgroup-MMA groups of this
    warpgroup are in flight."""
    return intrin.wgmma_wait(as_int("T.wait_wgmma", "id", id, minimum=0)).value


# ---- workspaces ------------------------------------------------------------------------------------------------------
_ACCESS_MASKS = {"r": 1, "w": 2, "rw": 3}


def access_ptr(base, access_type="r", *extents, offset=0, extent=None, ignore_last_ndim=0):
    """The address of a buffer element as a pointer expression that records how it is used: `base` is ``A[i, j]``
    (that element), a slice (its first element) or a buffer (its first element); `access_type` "r", "w", "rw" (or
    1, 2, 3) tells the barrier planning what the pointer's user does with `extent` elements (default: one for an
    element, the slice's or the buffer's size; ``*extents`` multiply to it). `offset` moves a 1-d buffer's
    element; ``ignore_last_ndim=k`` takes the last k indices as 0. A shared tile's element is addressed through
    its layout (swizzle), so `extent` elements are contiguous only where the layout keeps them so."""
    api = "T.access_ptr"
    if len(extents) == 1 and isinstance(extents[0], (list, tuple)):
        extents = tuple(extents[0])
    if isinstance(access_type, str):
        if access_type not in _ACCESS_MASKS:
            raise ValueError(f"{api}: access_type must be one of {sorted(_ACCESS_MASKS)} or 1..3, got "
                             f"{access_type!r}")
        mask = _ACCESS_MASKS[access_type]
    else:
        mask = as_int(api, "access_type", access_type, minimum=1, maximum=3)
    if isinstance(base, BufferLoadNode):
        buf, mins, size = base.source, list(base.indices), None
    elif isinstance(base, BufferRegionNode):
        buf, mins = base.source, [r.min for r in base.region]
        size = 1
        for r in base.region:
            size = size * r.extent
    elif tirx.is_buffer_var(base):
        buf, mins = base, [tirx.const(0, "int32") for _ in base.shape]
        size = 1
        for s in base.shape:
            size = size * s
    else:
        raise TypeError(f"{api}: base must be a buffer, a buffer slice or a buffer element, got {base!r}")
    if str(buf.scope()) == "local.fragment":
        raise TypeError(f"{api}: '{buf.name}' is a fragment, whose elements are spread over threads: no pointer "
                        f"names them")
    skip = as_int(api, "ignore_last_ndim", ignore_last_ndim, minimum=0)
    if skip:
        mins = mins[:max(0, len(mins) - skip)] + [tirx.const(0, "int32")] * min(skip, len(mins))
    off = constant(offset)
    if not (isinstance(off, int) and off == 0):
        if len(mins) != 1:
            raise ValueError(f"{api}: offset is for a 1-d buffer; index '{buf.name}' ({len(mins)}-d) instead")
        mins = [mins[0] + offset]
    if extent is not None:
        n = extent
    elif extents:
        if len(extents) > len(buf.shape):
            raise ValueError(f"{api}: {len(extents)} extents for the {len(buf.shape)}-d buffer '{buf.name}'")
        n = 1
        for e in extents:
            n = n * e
    else:
        n = 1 if size is None else size
    n = integer_arg(api, "extent", n)
    if isinstance(n, int):
        n = as_int(api, "extent", n, minimum=1)
    load = tirx.BufferLoad(buf, [tirx.const(m, "int32") if isinstance(m, int) else m for m in mins])
    return tirx.call_intrin("handle", ACCESS_PTR_OP, load, n, tirx.const(mask, "int32"))


def alloc_global(shape, dtype, scope="global"):
    """A workspace in global memory, allocated by the host side of the compiled function for each call:
    ``partial = T.alloc_global([batch, heads, num_split, dim], "float16")``, as in TileLang.

    Written before the program's ``T.Kernel`` blocks (or inside one: it is hoisted out,
    `tilex.transform.hoist_global_buffers`), it is one buffer for the whole call, so one kernel can write it and a
    later ``T.Kernel`` of the same ``T.prim_func`` read it (a split-KV pass and its combine). TVM's host code takes
    it from TVM's device workspace pool (``TVMBackendAllocWorkspace``, not torch's allocator) before the first
    launch and gives it back after the last one; its contents are not initialized. The pool belongs to the calling
    host thread and reuses a freed workspace for that thread's next call, which the stream orders after the launches
    of this one. So calls made from one thread on several streams at once may share it, and a CUDA graph that
    captured a call keeps an address the pool may hand out again or free: there, allocate the workspace with torch
    and pass it as a ``T.Tensor`` argument (TileLang's advice too).

    `shape` may use the program's parameters and symbolic sizes (the host evaluates it before the launch), never a
    block or thread index; `scope` is ``"global"``."""
    api = "T.alloc_global"
    if scope != "global":
        unsupported(api, "scope", scope, "a workspace lives in 'global' memory")
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not shape:
        raise ValueError(f"{api}: the shape must have at least one dimension")
    positive_extents(api, "shape dimensions", shape)
    shape = tuple(integer_arg(api, "shape", e) for e in shape)
    return _ir.alloc_buffer(shape, canonical_dtype(dtype), scope="global")


# ---- grid-wide barrier ---------------------------------------------------------------------------------------------
def sync_grid():
    """A barrier across every thread of every block of the grid (TileLang's ``T.sync_grid``): no thread goes on
    until all have arrived, and the global-memory writes made before it are visible after it (a persistent kernel's
    split-KV partial results, combined once every block has written them).

    The kernel is launched cooperatively (every block resident on the GPU at once; the driver refuses a grid that
    cannot be, instead of it hanging): a grid of constant size that cannot fit the multiprocessors at once, given
    its threads and shared memory, is a ValueError when it compiles. Every thread of every block must reach each
    ``T.sync_grid``: one under a condition or in a loop that threads or blocks may run differently is a ValueError
    (`tilex.transform.grid_sync`)."""
    current_kernel("T.sync_grid")
    return intrin.sync_grid().value
