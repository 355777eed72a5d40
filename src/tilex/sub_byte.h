// Sub-byte elements (1-, 2- and 4-bit: int4, uint4, float4_e2m1fn, ...) in memory: what
// tilex/transform/sub_byte_access.py calls for a store of such an element, or a cast of a float to such a float.
#pragma once
#include <cstdint>
#include <math.h>

namespace tilex {

// The code of the low-bit float nearest x (ties to even), saturated to the largest finite magnitude (NaN as well,
// keeping its sign), for the finite-only float types of at most 4 bits (e2m1: float4_e2m1fn). Zeros keep their sign.
template <int Exp, int Man>
__host__ __device__ __forceinline__ uint32_t encode_float_code(float x) {
  static_assert(Exp >= 1 && Man >= 0 && 1 + Exp + Man <= 4, "tilex::encode_float_code: a float of at most 4 bits");
  constexpr int kBits = 1 + Exp + Man, kBias = (1 << (Exp - 1)) - 1;
  constexpr int kEmin = 1 - kBias, kEmax = (1 << Exp) - 1 - kBias;
  constexpr uint32_t kLargest = (1u << (kBits - 1)) - 1u;  // every exponent and mantissa bit set
  const uint32_t sign = signbit(x) ? (1u << (kBits - 1)) : 0u;
  const float a = fabsf(x);
  if (!(a < ldexpf(2.0f - ldexpf(1.0f, -Man), kEmax))) return sign | kLargest;  // past the largest, or NaN
  if (a < ldexpf(1.0f, kEmin)) {
    // subnormal: a multiple of 2^(emin - Man); rounding up to 2^Man gives the smallest normal's code
    return sign | static_cast<uint32_t>(rintf(ldexpf(a, Man - kEmin)));
  }
  int k;
  frexpf(a, &k);  // a = f * 2^k, 0.5 <= f < 1
  int e = k - 1;
  uint32_t q = static_cast<uint32_t>(rintf(ldexpf(a, Man - e)));  // 2^Man <= q <= 2^(Man + 1)
  if (q == (2u << Man)) {
    q = 1u << Man;
    ++e;
  }
  if (e > kEmax) return sign | kLargest;
  return sign | (static_cast<uint32_t>(e + kBias) << Man) | (q - (1u << Man));
}

// Store the low bits of `code` (`mask`) at bit `shift` of the 32-bit word at `word` (shared or global memory),
// leaving the word's other bits as they are: other threads may be storing the codes beside it at the same time.
__device__ __forceinline__ void store_code(uint32_t* word, uint32_t shift, uint32_t mask, uint32_t code) {
  atomicAnd(word, ~(mask << shift));
  atomicOr(word, (code & mask) << shift);
}

}  // namespace tilex
