// Approximate float32 math on the multi-function unit (one MUFU instruction each), used for T.exp2 / T.exp
// unless the kernel was compiled with tilex.disable_fast_math (tilex/transform/fast_math.py).
#pragma once

namespace tilex {

// 2^x by ex2.approx.ftz: relative error about 2^-22, denormal results flushed to zero; 2^-inf = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// e^x as 2^(x log2 e).
__device__ __forceinline__ float exp_approx(float x) { return exp2_approx(x * 1.4426950408889634f); }

}  // namespace tilex
