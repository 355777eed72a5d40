"""Per-thread random numbers in tile programs (TileLang's ``T.rng_init``, ``T.rng_rand``, ``T.rng_rand_float``):
cuRAND's device API as TileLang exposes it, on the Philox4x32-10 generator of ``src/tilex/rng.h``.

``T.rng_init`` allocates the thread's generator state (a per-thread array of uint32 words) where it is written and
starts it; ``T.rng_rand`` / ``T.rng_rand_float`` draw from the state of the kernel's latest ``T.rng_init`` in
program order, as TileLang's code generator does. Each thread draws its own sequence, one value per call, in the
order its statements run.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as _ir

from tilex.ir import intrin
from tilex.ir.visit import dtype_of
from tilex.language.kernel import current_kernel
from tilex.language.options import constant

__all__ = ["rng_init", "rng_rand", "rng_rand_float"]

#: the generator tilex implements (cuRAND's name, TileLang's default)
PHILOX = "curandStatePhilox4_32_10_t"
#: cuRAND's other generators, named by TileLang and not implemented by tilex
_CURAND_ONLY = ("curandStateMRG32k3a_t", "curandStateXORWOW_t")


def _uint64_arg(api, name, value):
    v = constant(value)
    if isinstance(v, bool) or isinstance(v, float):
        raise TypeError(f"{api}: {name} must be an int or an integer expression, got {value!r}")
    if isinstance(v, int):
        return tirx.const(v % (1 << 64), "uint64")
    if tvm.ir.is_prim_expr(value) and tvm.DataType(dtype_of(value)).type_code in (tvm.DataTypeCode.INT,
                                                                                tvm.DataTypeCode.UINT):
        return value
    raise TypeError(f"{api}: {name} must be an int or an integer expression, got {value!r}")


def rng_init(seed, seq=None, off=0, generator=PHILOX):
    """Start this thread's random generator: output `off` of subsequence `seq` of `seed` (cuRAND's
    ``curand_init(seed, seq, off, &state)``; the three taken as 64-bit unsigned integers). `seq` defaults to the
    thread's global index ``threadIdx.x + blockIdx.x * blockDim.x``, so every thread of the grid draws its own
    sequence. Only cuRAND's Philox4_32_10 generator (the default) is implemented: ``curandStateXORWOW_t`` and
    ``curandStateMRG32k3a_t`` raise NotImplementedError (their skip-ahead needs cuRAND's precomputed tables)."""
    api = "T.rng_init"
    if generator in _CURAND_ONLY:
        raise NotImplementedError(f"{api}(generator={generator!r}) is not supported by tilex: it generates "
                                  f"cuRAND's {PHILOX} sequence itself; the XORWOW and MRG32k3a generators need "
                                  f"cuRAND's precomputed skip-ahead tables (use the default generator)")
    if generator != PHILOX:
        raise ValueError(f"{api}: unknown generator {generator!r}; expected {PHILOX!r} (or one of {_CURAND_ONLY}, "
                         f"which tilex does not implement)")
    kernel = current_kernel(api)
    if seq is None:
        seq = kernel.thread_index(0) + kernel.block_index(0) * kernel.threads[0]
    args = [_uint64_arg(api, name, value) for name, value in (("seed", seed), ("seq", seq), ("off", off))]
    state = _ir.alloc_buffer((intrin.RNG_STATE_WORDS,), "uint32", scope="local")
    IRBuilder.name("rng_state", state)
    kernel.rng_state = state
    return intrin.rng_init(_address(state), *args).value


def _state(api):
    state = current_kernel(api).rng_state
    if state is None:
        raise ValueError(f"{api} draws from the generator of a T.rng_init earlier in the kernel; call "
                         f"T.rng_init(seed, ...) first")
    return _address(state)


def _address(state):
    return tirx.address_of(tirx.BufferLoad(state, [tirx.const(0, "int32")]))


def rng_rand():
    """The next 32 random bits of this thread's generator (a uint32; cuRAND's ``curand``)."""
    return intrin.rng_rand(_state("T.rng_rand()"))


def rng_rand_float(bit=32, dist="uniform"):
    """The next random float of this thread's generator: ``float32`` (`bit` 32) or ``float64`` (`bit` 64), uniform
    in (0, 1] (`dist` "uniform") or standard normal ("normal"), as cuRAND's ``curand_uniform`` /
    ``curand_normal`` (``_double``) compute them."""
    api = "T.rng_rand_float"
    if isinstance(bit, bool) or constant(bit) not in (32, 64):
        raise ValueError(f"{api}: bit must be 32 or 64, got {bit!r}")
    if dist not in ("uniform", "normal"):
        raise ValueError(f"{api}: dist must be 'uniform' or 'normal', got {dist!r}")
    return intrin.rng_float(_state(api), dist, int(constant(bit)))
