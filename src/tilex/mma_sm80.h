// ldmatrix + mma.sync (sm80+) building blocks for T.gemm on tensor cores.
#pragma once
#include <cstdint>

#include "tilex/arch.h"

namespace tilex {

// Four 8x8 b16 matrices from shared memory; lane l supplies the row address of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(void* dst, const void* smem) {
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))));
}

__device__ __forceinline__ void ldmatrix_x4_trans(void* dst, const void* smem) {
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))));
}

__device__ __forceinline__ void ldmatrix_x2(void* dst, const void* smem) {
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))));
}

__device__ __forceinline__ void ldmatrix_x2_trans(void* dst, const void* smem) {
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))));
}

// D(16x8, f32) += A(16x16, row) * B(16x8, col): a = 4 regs, b = 2 regs, c = 4 floats (in place).
__device__ __forceinline__ void mma_m16n8k16_f16(void* c_, const void* a_, const void* b_) {
  float* c = reinterpret_cast<float*>(c_);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_m16n8k16_bf16(void* c_, const void* a_, const void* b_) {
  float* c = reinterpret_cast<float*>(c_);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// f16 inputs accumulating in f16: c = 2 regs of f16x2 (c0 c1 | c2 c3, the f32 accumulator's element order).
__device__ __forceinline__ void mma_m16n8k16_f16_acc_f16(void* c_, const void* a_, const void* b_) {
  uint32_t* c = reinterpret_cast<uint32_t*>(c_);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
      : "+r"(c[0]), "+r"(c[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// float32 -> tf32 rounded to nearest, ties away from zero (T.tfloat32(x)); the result is a float whose 13 low
// mantissa bits are 0, which the tf32 MMAs read exactly.
__device__ __forceinline__ float round_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r & 0xffffe000u);
}

// tf32 inputs, m16n8k8: A (16x8, row: 4 regs), B (8x8, col: 2 regs), C 4 floats. Each float32 operand is rounded
// to the nearest tf32 first (cvt.rna, idempotent on values already tf32): as TileLang stores a T.tfloat32 tile
// rounded, and closer to float32 than the tensor cores' own reading of the register (its top 19 bits, truncated).
__device__ __forceinline__ void mma_m16n8k8_tf32(void* c_, const void* a_, const void* b_) {
  float* c = reinterpret_cast<float*>(c_);
  const float* af = reinterpret_cast<const float*>(a_);
  const float* bf = reinterpret_cast<const float*>(b_);
  uint32_t a[4], b[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = __float_as_uint(round_tf32(af[i]));
#pragma unroll
  for (int i = 0; i < 2; ++i) b[i] = __float_as_uint(round_tf32(bf[i]));
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 8-bit operands, m16n8k32: A (16x32, row: 4 regs of 4 bytes), B (32x8, col: 2 regs), C 4 accumulators.
// TA / TB pick each operand's type: 0 = s8 / e4m3, 1 = u8 / e5m2. Integers accumulate in s32 (sm_80+), float8
// in f32 (sm_89+; on an older arch a used float8 wrapper is a compile error).
#define TILEX_MMA_K32(ACC, REG, TYA, TYB)                                                                      \
  asm volatile("mma.sync.aligned.m16n8k32.row.col." ACC "." TYA "." TYB "." ACC                               \
               " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                          \
               : "+" REG(c[0]), "+" REG(c[1]), "+" REG(c[2]), "+" REG(c[3])                                  \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

template <int TA, int TB>
__device__ __forceinline__ void mma_m16n8k32_i8(void* c_, const void* a_, const void* b_) {
  int32_t* c = reinterpret_cast<int32_t*>(c_);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_);
  if constexpr (TA == 0 && TB == 0) {
    TILEX_MMA_K32("s32", "r", "s8", "s8");
  } else if constexpr (TA == 0 && TB == 1) {
    TILEX_MMA_K32("s32", "r", "s8", "u8");
  } else if constexpr (TA == 1 && TB == 0) {
    TILEX_MMA_K32("s32", "r", "u8", "s8");
  } else {
    TILEX_MMA_K32("s32", "r", "u8", "u8");
  }
}

template <int TA, int TB>
__device__ __forceinline__ void mma_m16n8k32_f8(void* c_, const void* a_, const void* b_) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  static_assert(arch_unsupported<TA, TB>::value, "tilex::mma_m16n8k32_f8: float8 mma.sync needs sm_89+");
#else
  float* c = reinterpret_cast<float*>(c_);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_);
  if constexpr (TA == 0 && TB == 0) {
    TILEX_MMA_K32("f32", "f", "e4m3", "e4m3");
  } else if constexpr (TA == 0 && TB == 1) {
    TILEX_MMA_K32("f32", "f", "e4m3", "e5m2");
  } else if constexpr (TA == 1 && TB == 0) {
    TILEX_MMA_K32("f32", "f", "e5m2", "e4m3");
  } else {
    TILEX_MMA_K32("f32", "f", "e5m2", "e5m2");
  }
#endif
}

// 4-bit integer operands, m16n8k64: A (16x64, row: 4 regs of 8 values), B (64x8, col: 2 regs), C 4 int32.
// TA / TB: 0 = s4, 1 = u4.
template <int TA, int TB>
__device__ __forceinline__ void mma_m16n8k64_i4(void* c_, const void* a_, const void* b_) {
  int32_t* c = reinterpret_cast<int32_t*>(c_);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_);
#define TILEX_MMA_K64(TYA, TYB)                                                                                 \
  asm volatile("mma.sync.aligned.m16n8k64.row.col.s32." TYA "." TYB ".s32"                                    \
               " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                          \
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
  if constexpr (TA == 0 && TB == 0) {
    TILEX_MMA_K64("s4", "s4");
  } else if constexpr (TA == 0 && TB == 1) {
    TILEX_MMA_K64("s4", "u4");
  } else if constexpr (TA == 1 && TB == 0) {
    TILEX_MMA_K64("u4", "s4");
  } else {
    TILEX_MMA_K64("u4", "u4");
  }
#undef TILEX_MMA_K64
}

#undef TILEX_MMA_K32

}  // namespace tilex
