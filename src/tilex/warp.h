// Warp primitives of tile programs (T.shfl_*, T.warp_reduce_*): shuffles of any value of up to 8 bytes, and
// reductions of one value per lane over the 32 lanes of a warp.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tilex {

namespace warp_detail {

// The 32- or 64-bit word that carries a value of T through a shuffle (its bits, zero-padded).
template <typename T>
using carrier_t = typename std::conditional<(sizeof(T) <= 4), unsigned, unsigned long long>::type;

template <typename T, typename Shuffle>
__device__ __forceinline__ T shuffle_bits(T v, Shuffle shuffle) {
  static_assert(sizeof(T) <= 8, "tilex warp shuffles move values of at most 8 bytes");
  carrier_t<T> word = 0;
  memcpy(&word, &v, sizeof(T));
  word = shuffle(word);
  T out;
  memcpy(&out, &word, sizeof(T));
  return out;
}

}  // namespace warp_detail

// __shfl_sync / __shfl_xor_sync / __shfl_down_sync / __shfl_up_sync for any type of up to 8 bytes (float16,
// bfloat16, float8, integers, pairs): the value travels as its bits.
template <typename T>
__device__ __forceinline__ T shfl_sync(unsigned mask, T v, int src_lane, int width) {
  return warp_detail::shuffle_bits(v, [&](auto w) { return __shfl_sync(mask, w, src_lane, width); });
}

template <typename T>
__device__ __forceinline__ T shfl_xor_sync(unsigned mask, T v, int lane_mask, int width) {
  return warp_detail::shuffle_bits(v, [&](auto w) { return __shfl_xor_sync(mask, w, lane_mask, width); });
}

template <typename T>
__device__ __forceinline__ T shfl_down_sync(unsigned mask, T v, unsigned delta, int width) {
  return warp_detail::shuffle_bits(v, [&](auto w) { return __shfl_down_sync(mask, w, delta, width); });
}

template <typename T>
__device__ __forceinline__ T shfl_up_sync(unsigned mask, T v, unsigned delta, int width) {
  return warp_detail::shuffle_bits(v, [&](auto w) { return __shfl_up_sync(mask, w, delta, width); });
}

namespace warp_detail {

struct Sum {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return b > a ? b : a; }
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
  __device__ __forceinline__ __half operator()(__half a, __half b) const { return __hmax(a, b); }
  __device__ __forceinline__ __nv_bfloat16 operator()(__nv_bfloat16 a, __nv_bfloat16 b) const {
    return __hmax(a, b);
  }
};
struct Min {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; }
  __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return fmin(a, b); }
  __device__ __forceinline__ __half operator()(__half a, __half b) const { return __hmin(a, b); }
  __device__ __forceinline__ __nv_bfloat16 operator()(__nv_bfloat16 a, __nv_bfloat16 b) const {
    return __hmin(a, b);
  }
};
struct BitAnd {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a & b; }
};
struct BitOr {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a | b; }
};

// One value per lane combined over the full warp; every lane gets the result. 32-bit integers take the sm_80
// warp reduction instructions (redux.sync), everything else a butterfly of xor shuffles.
template <typename Op, typename T>
__device__ __forceinline__ T warp_reduce(T v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same<T, int>::value || std::is_same<T, unsigned>::value) {
    if constexpr (std::is_same<Op, Sum>::value) return __reduce_add_sync(0xffffffffu, v);
    if constexpr (std::is_same<Op, Max>::value) return __reduce_max_sync(0xffffffffu, v);
    if constexpr (std::is_same<Op, Min>::value) return __reduce_min_sync(0xffffffffu, v);
    if constexpr (std::is_same<Op, BitAnd>::value) return __reduce_and_sync(0xffffffffu, (unsigned)v);
    if constexpr (std::is_same<Op, BitOr>::value) return __reduce_or_sync(0xffffffffu, (unsigned)v);
  }
#endif
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = Op()(v, shfl_xor_sync(0xffffffffu, v, offset, 32));
  }
  return v;
}

}  // namespace warp_detail

template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T v) { return warp_detail::warp_reduce<warp_detail::Sum>(v); }
template <typename T>
__device__ __forceinline__ T warp_reduce_max(T v) { return warp_detail::warp_reduce<warp_detail::Max>(v); }
template <typename T>
__device__ __forceinline__ T warp_reduce_min(T v) { return warp_detail::warp_reduce<warp_detail::Min>(v); }
template <typename T>
__device__ __forceinline__ T warp_reduce_bitand(T v) { return warp_detail::warp_reduce<warp_detail::BitAnd>(v); }
template <typename T>
__device__ __forceinline__ T warp_reduce_bitor(T v) { return warp_detail::warp_reduce<warp_detail::BitOr>(v); }

}  // namespace tilex
