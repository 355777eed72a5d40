// Atomic read-modify-write helpers used by T.atomic_add / T.atomic_max / T.atomic_min.
//
// Scalar:  tilex::atomic_add(T* addr, V val)  (also atomic_max, atomic_min): `val` is converted to T first.
//   add: float, double, half, bfloat16, int32, uint32, int64, uint64
//   max/min: int32, uint32, int64, uint64 natively; float/double through the sign trick (one native integer atomic,
//            correct for negative values and for -0.0 < +0.0); half/bfloat16 through a 16-bit compare-and-swap loop.
//   NaN operands of a float max/min give an unspecified result.
// Vector:  tilex::atomic_add_vec<Global>(T* addr, T v0, ..., T v{N-1}) adds N consecutive elements starting at
//   `addr` (N a power of two, `addr` aligned to N elements). It uses the widest hardware vector atomic available:
//   sm_90 global memory: float2/float4 atomicAdd, red.global.add.noftz.v{2,4}.{f16x2,bf16x2} (up to 8 halves);
//   otherwise __half2 / __nv_bfloat162 (sm80+) pairs; other types element by element.
// None of these return the previous value. For that, and for a memory order:
// Fetch:   tilex::atomic_fetch<Kind, Order>(T* addr, V val) -> the value before (Kind 0 add, 1 max, 2 min; Order 0
//   relaxed, 1 acquire, 2 release, 3 acq_rel, 4 seq_cst; device scope): one PTX atom.{sem}.gpu, seq_cst as a
//   fence.sc.gpu then acq_rel. add: int32, uint32, int64, uint64, float, double; max/min: the integer types.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace tilex {
namespace atomic_detail {

// ---- add ----------------------------------------------------------------------------------------------------------
__device__ __forceinline__ void add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void add(int32_t* p, int32_t v) { atomicAdd(reinterpret_cast<int*>(p), static_cast<int>(v)); }
__device__ __forceinline__ void add(uint32_t* p, uint32_t v) {
  atomicAdd(reinterpret_cast<unsigned int*>(p), static_cast<unsigned int>(v));
}
// two's complement: adding the unsigned image of a signed value is the signed addition
__device__ __forceinline__ void add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void add(uint64_t* p, uint64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// ---- max / min on integers ------------------------------------------------------------------------------------------
__device__ __forceinline__ void amax(int32_t* p, int32_t v) { atomicMax(reinterpret_cast<int*>(p), static_cast<int>(v)); }
__device__ __forceinline__ void amin(int32_t* p, int32_t v) { atomicMin(reinterpret_cast<int*>(p), static_cast<int>(v)); }
__device__ __forceinline__ void amax(uint32_t* p, uint32_t v) {
  atomicMax(reinterpret_cast<unsigned int*>(p), static_cast<unsigned int>(v));
}
__device__ __forceinline__ void amin(uint32_t* p, uint32_t v) {
  atomicMin(reinterpret_cast<unsigned int*>(p), static_cast<unsigned int>(v));
}
__device__ __forceinline__ void amax(int64_t* p, int64_t v) {
  atomicMax(reinterpret_cast<long long*>(p), static_cast<long long>(v));
}
__device__ __forceinline__ void amin(int64_t* p, int64_t v) {
  atomicMin(reinterpret_cast<long long*>(p), static_cast<long long>(v));
}
__device__ __forceinline__ void amax(uint64_t* p, uint64_t v) {
  atomicMax(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void amin(uint64_t* p, uint64_t v) {
  atomicMin(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// ---- max / min on float and double: the sign trick ------------------------------------------------------------------
// IEEE floats with the sign bit clear are ordered like their bit patterns read as signed integers; floats with the
// sign bit set are ordered in reverse of their bit patterns read as unsigned integers, and every one of those
// patterns is larger (unsigned) than any pattern with the sign bit clear and smaller (signed) than it. So:
//   max(x, v): v sign clear -> signed atomicMax of the bits; v sign set (negative or -0.0) -> unsigned atomicMin.
//   min(x, v): v sign clear -> signed atomicMin;             v sign set                   -> unsigned atomicMax.
// The test is on the sign bit, not on v >= 0, so that -0.0 goes the unsigned way (max(-1.0, -0.0) = -0.0).
__device__ __forceinline__ void amax(float* p, float v) {
  int b = __float_as_int(v);
  if (b >= 0) {
    atomicMax(reinterpret_cast<int*>(p), b);
  } else {
    atomicMin(reinterpret_cast<unsigned int*>(p), static_cast<unsigned int>(b));
  }
}
__device__ __forceinline__ void amin(float* p, float v) {
  int b = __float_as_int(v);
  if (b >= 0) {
    atomicMin(reinterpret_cast<int*>(p), b);
  } else {
    atomicMax(reinterpret_cast<unsigned int*>(p), static_cast<unsigned int>(b));
  }
}
__device__ __forceinline__ void amax(double* p, double v) {
  long long b = __double_as_longlong(v);
  if (b >= 0) {
    atomicMax(reinterpret_cast<long long*>(p), b);
  } else {
    atomicMin(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(b));
  }
}
__device__ __forceinline__ void amin(double* p, double v) {
  long long b = __double_as_longlong(v);
  if (b >= 0) {
    atomicMin(reinterpret_cast<long long*>(p), b);
  } else {
    atomicMax(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(b));
  }
}

// ---- value conversion (explicit intrinsics: independent of the __CUDA_NO_HALF_CONVERSIONS__ family) ------------------
template <typename V>
__device__ __forceinline__ float to_float(V v) {
  if constexpr (std::is_same_v<V, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<V, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return static_cast<float>(v);
  }
}

template <typename T, typename V>
__device__ __forceinline__ T convert(V v) {
  if constexpr (std::is_same_v<T, V>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(to_float(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(to_float(v));
  } else if constexpr (std::is_same_v<V, __half> || std::is_same_v<V, __nv_bfloat16>) {
    return static_cast<T>(to_float(v));
  } else {
    return static_cast<T>(v);
  }
}

// ---- max / min on 16-bit floats: compare-and-swap loop --------------------------------------------------------------
template <bool IsMax, typename H>
__device__ __forceinline__ void cas_minmax16(H* p, H v) {
  unsigned short* addr = reinterpret_cast<unsigned short*>(p);
  const unsigned short want = *reinterpret_cast<const unsigned short*>(&v);
  const float fv = to_float(v);
  unsigned short old = *reinterpret_cast<volatile unsigned short*>(addr);
  while (true) {
    const float fc = to_float(*reinterpret_cast<const H*>(&old));
    // replace when v wins; among equal zeros, +0.0 beats -0.0 for max and -0.0 beats +0.0 for min
    const bool zeros = fv == 0.0f && fc == 0.0f;
    const bool replace = IsMax ? (fv > fc || (zeros && signbit(fc) && !signbit(fv)))
                               : (fv < fc || (zeros && !signbit(fc) && signbit(fv)));
    if (!replace) return;
    const unsigned short seen = atomicCAS(addr, old, want);
    if (seen == old) return;
    old = seen;
  }
}
__device__ __forceinline__ void amax(__half* p, __half v) { cas_minmax16<true>(p, v); }
__device__ __forceinline__ void amin(__half* p, __half v) { cas_minmax16<false>(p, v); }
__device__ __forceinline__ void amax(__nv_bfloat16* p, __nv_bfloat16 v) { cas_minmax16<true>(p, v); }
__device__ __forceinline__ void amin(__nv_bfloat16* p, __nv_bfloat16 v) { cas_minmax16<false>(p, v); }

// two 16-bit floats as the 32-bit register image of a __half2 / __nv_bfloat162 (x = low half)
template <typename T>
__device__ __forceinline__ unsigned int pack2(T lo, T hi) {
  const unsigned int a = *reinterpret_cast<const unsigned short*>(&lo);
  const unsigned int b = *reinterpret_cast<const unsigned short*>(&hi);
  return a | (b << 16);
}

// ---- N consecutive elements ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kSm90VectorAtomics = true;  // float2/float4 atomicAdd and red.global.v*.{f16x2,bf16x2}
#else
constexpr bool kSm90VectorAtomics = false;
#endif

template <typename T>
constexpr bool is_half_like = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T>
__device__ __forceinline__ void red_global_f16x2(T* p, unsigned int a, unsigned int b) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("red.global.add.noftz.v2.f16x2 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b) : "memory");
  } else {
    asm volatile("red.global.add.noftz.v2.bf16x2 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b) : "memory");
  }
}

template <typename T>
__device__ __forceinline__ void red_global_f16x2(T* p, unsigned int a, unsigned int b, unsigned int c,
                                                 unsigned int d) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("red.global.add.noftz.v4.f16x2 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d)
                 : "memory");
  } else {
    asm volatile("red.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d)
                 : "memory");
  }
}

template <int N, bool Global, typename T>
__device__ __forceinline__ void add_n(T* p, const T* v) {
  static_assert(N >= 1 && (N & (N - 1)) == 0, "vector width must be a power of two");
  if constexpr (std::is_same_v<T, float> && Global && kSm90VectorAtomics && N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      atomicAdd(reinterpret_cast<float4*>(p + i), make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]));
    }
  } else if constexpr (std::is_same_v<T, float> && Global && kSm90VectorAtomics && N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      atomicAdd(reinterpret_cast<float2*>(p + i), make_float2(v[i], v[i + 1]));
    }
  } else if constexpr (is_half_like<T> && Global && kSm90VectorAtomics && N % 8 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 8) {
      red_global_f16x2(p + i, pack2(v[i], v[i + 1]), pack2(v[i + 2], v[i + 3]), pack2(v[i + 4], v[i + 5]),
                       pack2(v[i + 6], v[i + 7]));
    }
  } else if constexpr (is_half_like<T> && Global && kSm90VectorAtomics && N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      red_global_f16x2(p + i, pack2(v[i], v[i + 1]), pack2(v[i + 2], v[i + 3]));
    }
  } else if constexpr (is_half_like<T> && N % 2 == 0) {
    using H2 = typename std::conditional<std::is_same_v<T, __half>, __half2, __nv_bfloat162>::type;
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      H2 h;
      h.x = v[i];
      h.y = v[i + 1];
      atomicAdd(reinterpret_cast<H2*>(p + i), h);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) add(p + i, v[i]);
  }
}

}  // namespace atomic_detail

// Scalar atomics: *addr = *addr (op) val, with val converted to the element type of addr.
template <typename T, typename V>
__device__ __forceinline__ void atomic_add(T* addr, V val) {
  atomic_detail::add(addr, atomic_detail::convert<T>(val));
}
template <typename T, typename V>
__device__ __forceinline__ void atomic_max(T* addr, V val) {
  atomic_detail::amax(addr, atomic_detail::convert<T>(val));
}
template <typename T, typename V>
__device__ __forceinline__ void atomic_min(T* addr, V val) {
  atomic_detail::amin(addr, atomic_detail::convert<T>(val));
}

namespace atomic_detail {
// atom.<sem>.gpu.<op>.<ptx type>, returning the old value (sm_70+ for the memory-order qualifiers)
#define TILEX_ATOM_FETCH(SEM, OP, PT, CT, REG)                                                          \
  __device__ __forceinline__ CT fetch_##OP##_##SEM(CT* p, CT v) {                                        \
    CT old;                                                                                              \
    asm volatile("atom." #SEM ".gpu." #OP "." #PT " %0, [%1], %2;" : "=" REG(old) : "l"(p), REG(v) : "memory"); \
    return old;                                                                                          \
  }
#define TILEX_ATOM_INT(SEM, OP)                                \
  TILEX_ATOM_FETCH(SEM, OP, s32, int, "r")                     \
  TILEX_ATOM_FETCH(SEM, OP, u32, unsigned int, "r")            \
  TILEX_ATOM_FETCH(SEM, OP, s64, long long, "l")               \
  TILEX_ATOM_FETCH(SEM, OP, u64, unsigned long long, "l")
#define TILEX_ATOM_SEM(SEM)                                    \
  TILEX_ATOM_INT(SEM, add)                                     \
  TILEX_ATOM_INT(SEM, max)                                     \
  TILEX_ATOM_INT(SEM, min)                                     \
  TILEX_ATOM_FETCH(SEM, add, f32, float, "f")                  \
  TILEX_ATOM_FETCH(SEM, add, f64, double, "d")
TILEX_ATOM_SEM(relaxed)
TILEX_ATOM_SEM(acquire)
TILEX_ATOM_SEM(release)
TILEX_ATOM_SEM(acq_rel)
#undef TILEX_ATOM_SEM
#undef TILEX_ATOM_INT
#undef TILEX_ATOM_FETCH

template <int Kind, int Sem, typename T>
__device__ __forceinline__ T fetch(T* p, T v) {
#define TILEX_ATOM_PICK(OP)                                           \
  if constexpr (Sem == 0) return fetch_##OP##_relaxed(p, v);          \
  else if constexpr (Sem == 1) return fetch_##OP##_acquire(p, v);     \
  else if constexpr (Sem == 2) return fetch_##OP##_release(p, v);     \
  else return fetch_##OP##_acq_rel(p, v);
  if constexpr (Kind == 0) {
    TILEX_ATOM_PICK(add)
  } else if constexpr (Kind == 1) {
    TILEX_ATOM_PICK(max)
  } else {
    TILEX_ATOM_PICK(min)
  }
#undef TILEX_ATOM_PICK
}

// the PTX register type of each element type (int64_t may be long or long long)
template <typename T>
struct ptx_int {
  using type = std::conditional_t<sizeof(T) == 4, std::conditional_t<std::is_signed_v<T>, int, unsigned int>,
                                  std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>>;
};
}  // namespace atomic_detail

template <int Kind, int Order, typename T, typename V>
__device__ __forceinline__ T atomic_fetch(T* addr, V val) {
  static_assert(Kind >= 0 && Kind <= 2 && Order >= 0 && Order <= 4, "tilex::atomic_fetch: no such kind or order");
  if constexpr (Order == 4) {
    asm volatile("fence.sc.gpu;" ::: "memory");
  }
  constexpr int sem = Order == 4 ? 3 : Order;
  const T v = atomic_detail::convert<T>(val);
  if constexpr (std::is_floating_point_v<T>) {
    static_assert(Kind == 0, "tilex::atomic_fetch: max/min with a returned value are integer-only");
    return atomic_detail::fetch<Kind, sem>(addr, v);
  } else {
    using P = typename atomic_detail::ptx_int<T>::type;
    return static_cast<T>(atomic_detail::fetch<Kind, sem>(reinterpret_cast<P*>(addr), static_cast<P>(v)));
  }
}

// addr[0..N) += (v0, ..., v{N-1}); Global: addr is in global memory (enables the sm_90 vector atomics).
template <bool Global, typename T, typename... V>
__device__ __forceinline__ void atomic_add_vec(T* addr, V... vals) {
  const T v[sizeof...(V)] = {atomic_detail::convert<T>(vals)...};
  atomic_detail::add_n<static_cast<int>(sizeof...(V)), Global>(addr, v);
}

}  // namespace tilex
