// Warp-level helpers for tile reductions.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace tilex {

template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, 32);
}

}  // namespace tilex
