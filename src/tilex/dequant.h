// Scales and zero-points of decoded low-bit weights (T.dequantize): one pair of 16-bit floats (one register of a
// decoded chunk, see tilex/lowbit.h) at a time, both halves with one instruction.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tilex {

// p[0..1] *= s
__device__ __forceinline__ void scale_pair_f16(void* p, __half s) {
  __half2* h = reinterpret_cast<__half2*>(p);
  *h = __hmul2(*h, __half2half2(s));
}

// p[0..1] = (p[0..1] - z) * s  (the difference is exact for integer codes and zeros)
__device__ __forceinline__ void scale_zero_pair_f16(void* p, __half s, __half z) {
  __half2* h = reinterpret_cast<__half2*>(p);
  *h = __hmul2(__hsub2(*h, __half2half2(z)), __half2half2(s));
}

// p[0..1] = p[0..1] * s + b  (b = -(z * s) rounded once: one fma for codes of at most 4 bits, whose zeros are
// small enough that the rounding of b stays far below a quantization step)
__device__ __forceinline__ void scale_shift_pair_f16(void* p, __half s, __half b) {
  __half2* h = reinterpret_cast<__half2*>(p);
  *h = __hfma2(*h, __half2half2(s), __half2half2(b));
}

// p[0..1] -= z
__device__ __forceinline__ void zero_pair_f16(void* p, __half z) {
  __half2* h = reinterpret_cast<__half2*>(p);
  *h = __hsub2(*h, __half2half2(z));
}

__device__ __forceinline__ void scale_pair_bf16(void* p, __nv_bfloat16 s) {
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(p);
  *h = __hmul2(*h, __bfloat162bfloat162(s));
}

__device__ __forceinline__ void scale_zero_pair_bf16(void* p, __nv_bfloat16 s, __nv_bfloat16 z) {
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(p);
  *h = __hmul2(__hsub2(*h, __bfloat162bfloat162(z)), __bfloat162bfloat162(s));
}

// p[0..1] = p[0..1] * s + b
__device__ __forceinline__ void scale_shift_pair_bf16(void* p, __nv_bfloat16 s, __nv_bfloat16 b) {
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(p);
  *h = __hfma2(*h, __bfloat162bfloat162(s), __bfloat162bfloat162(b));
}

__device__ __forceinline__ void zero_pair_bf16(void* p, __nv_bfloat16 z) {
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(p);
  *h = __hsub2(*h, __bfloat162bfloat162(z));
}

}  // namespace tilex
