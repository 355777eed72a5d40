"""`import tilex.language as T`: the TileLang-style frontend (TVMScript's `T` plus tile-level constructs)."""
# ruff: noqa: F401,F403
from tvm.script.tirx import *  # the TVMScript surface: math, T.serial, T.if_then_else, ...
from tvm.script.tirx import Buffer
from tilex.language.dtypes import *  # T.float16, T.half, T.int4, T.dtype, ...: tilex's dtype objects over TVMScript's
from tilex.language.dtypes import TYPES as _DTYPES

bool = _DTYPES["bool"]  # noqa: A001 - T.bool is a dtype, as in TileLang (TVMScript's is a function)

from tilex.language.atomic import atomic_add, atomic_addx2, atomic_addx4, atomic_max, atomic_min
from tilex.language.layouts import Fragment, Layout, annotate_layout, make_swizzled_layout
from tilex.language.allocate import alloc_fragment, alloc_local, alloc_shared, alloc_var, reshape, view
from tilex.language.debug import print  # noqa: A004 - T.print, as in TileLang
from tilex.language.kernel import Kernel, get_thread_binding, sync_threads
from tilex.language.rasterize import use_swizzle
from tilex.language.expert import (access_ptr, alloc_barrier, alloc_global, annotate_consumer_reg_alloc,
                                   annotate_producer_reg_dealloc, async_copy, barrier_arrive, barrier_wait,
                                   dec_max_nreg, disable_warp_group_reg_alloc, fence_proxy_async,
                                   inc_max_nreg, mbarrier_arrive, mbarrier_arrive_expect_tx, mbarrier_expect_tx,
                                   mbarrier_wait_parity, named_barrier_arrive, no_set_max_nreg, ptx_commit_group,
                                   ptx_wait_group, set_max_nreg, tma_copy, tma_store_arrive, tma_store_wait,
                                   wait_wgmma, wgmma_gemm, ws)
from tilex.language.expert import cp_async_barrier_noinc, ptx_cp_async
from tilex.language.expert import sync_grid
from tilex.language.reducer import alloc_reducer, finalize_reducer, reducer_init, reducer_update
from tilex.language.symbolic import dynamic, symbolic
from tilex.language.random import rng_init, rng_rand, rng_rand_float
from tilex.language.eager import const, empty
from tilex.language.loop import (Parallel, Persistent, Pipelined, Serial, Unroll, Vectorized, serial, unroll,
                                 vectorized)
from tilex.language.parser import prim_func
from tilex.language.tileop import (GemmWarpPolicy, clear, copy, dequantize, fill, gemm, reduce, reduce_abssum,
                                   reduce_absmax, reduce_max, reduce_min, reduce_sum)
from tilex.language.tileop import cummax, cumsum, reduce_bitand, reduce_bitor, reduce_bitxor
from tilex.language.tileop import c2d_im2col, im2col
from tilex.language.tileop import gemm_sp
from tilex.language.warp import (activemask, all_sync, any_sync, ballot, ballot_sync, get_lane_idx, get_warp_group_idx,
                                 get_warp_idx, get_warp_idx_sync, shfl_down, shfl_sync, shfl_up, shfl_xor, sync_warp,
                                 warp_reduce_bitand, warp_reduce_bitor, warp_reduce_max, warp_reduce_min,
                                 warp_reduce_sum)
from tilex.language.builtin import (annotate_l2_hit_ratio, annotate_min_blocks_per_sm, annotate_restrict_buffers,
                                    annotate_safe_value, clamp, device_assert, dp4a, fma, get_block_binding,
                                    get_block_bindings, get_block_extent, get_block_extents, get_thread_bindings,
                                    get_thread_extent, get_thread_extents, import_source, pdl_sync, pdl_trigger)
from tilex.language.builtin import reinterpret  # TileLang's order (value, dtype) and TVMScript's (dtype, value)
from tilex import dtypes as _lowbit

# the low-bit types of tilex.dtypes TVM has no dtype for (T.float6_e3m2, T.float4_e2m1, ...) as LowBitType, for
# T.dequantize; those TVM has (T.int3, T.uint4, T.float8_e5m2, ...) are dtype objects above, which it accepts too
for _t in _lowbit.ALL_TYPES:
    globals().setdefault(_t.name, _t)
del _t

from tilex.language.dtypes import canonical_dtype
from tilex.language.proxy import (FragmentBuffer, LocalBuffer, SharedBuffer, StridedTensor, Tensor, make_tensor,
                                  make_tensor_from_addr, ptr)


def __getattr__(name):
    """T.int and T.float (int32, float32): dtypes kept out of this module's globals, where they would shadow the
    builtins; TileLang's tile-scheduler classes (T.PersistentTileScheduler, T.BaseTileScheduler) raise
    NotImplementedError naming them."""
    if name in ("int", "float"):
        return _DTYPES[name]
    if name in ("PersistentTileScheduler", "BaseTileScheduler"):  # TileLang's stateful tile schedulers
        raise NotImplementedError(f"T.{name} is not supported by tilex: write the persistent loop with "
                                  f"T.Persistent(domain, wave_size, index) or a T.serial loop over the waves")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def ceildiv(a, b, span=None):
    """Ceiling division for ints and TIR expressions (`b` must be positive when it is a constant; `span` is
    accepted for TileLang's signature and not used)."""
    from tvm import tirx

    bv = b.value if isinstance(b, tirx.IntImm) else b
    if type(bv) is int and bv <= 0:  # (`bool` is TVMScript's dtype here)
        raise ValueError(f"T.ceildiv: the divisor must be positive, got {b}")
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return tirx.floordiv(a + b - 1, b)
