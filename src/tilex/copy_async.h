// cp.async (sm80+) global->shared copies used by software-pipelined T.copy.
#pragma once
#include <cstdint>

#include "tilex/arch.h"

namespace tilex {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Copy N bytes (4, 8 or 16) from global to shared without blocking; completion is tracked by commit/wait groups.
template <int N>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "n"(N));
  }
#elif defined(__CUDA_ARCH__)
  static_assert(arch_unsupported<N>::value, "tilex::cp_async: cp.async needs sm_80+");
#endif
}

// As cp_async, but when `pred` is false nothing is read and the N shared bytes are zero-filled (ragged tiles).
template <int N>
__device__ __forceinline__ void cp_async_zfill(void* smem, const void* gmem, bool pred) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  int src_bytes = pred ? N : 0;
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(smem)), "l"(gmem), "n"(N),
                 "r"(src_bytes));
  }
#elif defined(__CUDA_ARCH__)
  static_assert(arch_unsupported<N>::value, "tilex::cp_async_zfill: cp.async needs sm_80+");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#elif defined(__CUDA_ARCH__)
  tilex_error_cp_async_requires_sm_80();
#endif
}

// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#elif defined(__CUDA_ARCH__)
  static_assert(arch_unsupported<N>::value, "tilex::cp_async_wait: cp.async needs sm_80+");
#endif
}

}  // namespace tilex
