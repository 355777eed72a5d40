// Per-thread random numbers of tile programs (T.rng_init, T.rng_rand, T.rng_rand_float): the Philox4x32-10
// counter-based generator with cuRAND's state conventions (curand_init's seed / subsequence / offset, curand,
// curand_uniform, curand_normal and their double forms), written here so that no cuRAND header is needed. The
// state lives in a per-thread array of RNG_STATE_WORDS 32-bit words the frontend allocates; only 4-byte
// alignment is assumed.
#pragma once
#include <cstdint>
#include <cstring>

namespace tilex {

constexpr int RNG_STATE_WORDS = 16;

// The state, word by word: the 128-bit counter, the 64-bit key, the four outputs of the current counter, the
// index of the next output to hand out (0..3), and the second value of the last Box-Muller pair (float, double)
// with its flag.
struct PhiloxState {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t out[4];
  uint32_t index;
  uint32_t has_normal;
  uint32_t has_normal_double;
  float normal;
  uint32_t normal_double[2];
};
static_assert(sizeof(PhiloxState) == 4 * RNG_STATE_WORDS, "tilex::PhiloxState must fill the state words");

namespace rng_detail {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kKey0 = 0x9E3779B9u;
constexpr uint32_t kKey1 = 0xBB67AE85u;
constexpr float kTwoPow32Inv = 2.3283064e-10f;
constexpr float kTwoPow32Inv2Pi = 2.3283064e-10f * 6.2831855f;
constexpr double kTwoPow53Inv = 1.1102230246251565e-16;

__device__ __forceinline__ PhiloxState* state(uint32_t* words) { return reinterpret_cast<PhiloxState*>(words); }

// Ten Philox rounds of the state's counter under its key, into out[].
__device__ __forceinline__ void generate(PhiloxState* s) {
  uint32_t c0 = s->ctr[0], c1 = s->ctr[1], c2 = s->ctr[2], c3 = s->ctr[3];
  uint32_t k0 = s->key[0], k1 = s->key[1];
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0 = __umulhi(kMul0, c0), lo0 = kMul0 * c0;
    uint32_t hi1 = __umulhi(kMul1, c2), lo1 = kMul1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kKey0;
    k1 += kKey1;
  }
  s->out[0] = c0;
  s->out[1] = c1;
  s->out[2] = c2;
  s->out[3] = c3;
}

// counter += n (the low 64 bits, carrying into the high ones).
__device__ __forceinline__ void advance(PhiloxState* s, unsigned long long n) {
  uint32_t lo = static_cast<uint32_t>(n), hi = static_cast<uint32_t>(n >> 32);
  s->ctr[0] += lo;
  if (s->ctr[0] < lo) ++hi;
  s->ctr[1] += hi;
  if (hi <= s->ctr[1]) return;
  if (++s->ctr[2]) return;
  ++s->ctr[3];
}

// The high 64 bits of the counter += n: the start of subsequence n.
__device__ __forceinline__ void advance_high(PhiloxState* s, unsigned long long n) {
  uint32_t lo = static_cast<uint32_t>(n), hi = static_cast<uint32_t>(n >> 32);
  s->ctr[2] += lo;
  if (s->ctr[2] < lo) ++hi;
  s->ctr[3] += hi;
}

__device__ __forceinline__ double to_double(uint32_t x, uint32_t y) {
  unsigned long long z = static_cast<unsigned long long>(x) ^ (static_cast<unsigned long long>(y) << (53 - 32));
  return z * kTwoPow53Inv + kTwoPow53Inv / 2.0;
}

}  // namespace rng_detail

// The generator of `seed` at output `offset` of subsequence `subsequence` (2^66 outputs apart), as curand_init.
__device__ __forceinline__ void rng_init(uint32_t* words, unsigned long long seed, unsigned long long subsequence,
                                         unsigned long long offset) {
  PhiloxState* s = rng_detail::state(words);
  s->ctr[0] = s->ctr[1] = s->ctr[2] = s->ctr[3] = 0;
  s->key[0] = static_cast<uint32_t>(seed);
  s->key[1] = static_cast<uint32_t>(seed >> 32);
  s->has_normal = s->has_normal_double = 0;
  s->normal = 0.0f;
  s->normal_double[0] = s->normal_double[1] = 0;
  rng_detail::advance_high(s, subsequence);
  s->index = static_cast<uint32_t>(offset & 3);
  rng_detail::advance(s, offset / 4);
  rng_detail::generate(s);
}

// The next 32 random bits (curand).
__device__ __forceinline__ uint32_t rng_rand(uint32_t* words) {
  PhiloxState* s = rng_detail::state(words);
  uint32_t value = s->out[s->index & 3];
  if (++s->index == 4) {
    rng_detail::advance(s, 1);
    rng_detail::generate(s);
    s->index = 0;
  }
  return value;
}

// A float uniform in (0, 1] (curand_uniform).
__device__ __forceinline__ float rng_uniform(uint32_t* words) {
  return rng_rand(words) * rng_detail::kTwoPow32Inv + rng_detail::kTwoPow32Inv / 2.0f;
}

// A standard normal float (curand_normal): Box-Muller on two outputs, the second value kept for the next call.
__device__ __forceinline__ float rng_normal(uint32_t* words) {
  PhiloxState* s = rng_detail::state(words);
  if (s->has_normal) {
    s->has_normal = 0;
    return s->normal;
  }
  uint32_t x = rng_rand(words), y = rng_rand(words);
  float u = x * rng_detail::kTwoPow32Inv + rng_detail::kTwoPow32Inv / 2.0f;
  float v = y * rng_detail::kTwoPow32Inv2Pi + rng_detail::kTwoPow32Inv2Pi / 2.0f;
  float r = sqrtf(-2.0f * logf(u)), sn, cs;
  __sincosf(v, &sn, &cs);
  s->normal = cs * r;
  s->has_normal = 1;
  return sn * r;
}

// A double uniform in (0, 1] from two outputs (curand_uniform_double).
__device__ __forceinline__ double rng_uniform_double(uint32_t* words) {
  uint32_t x = rng_rand(words), y = rng_rand(words);
  return rng_detail::to_double(x, y);
}

// A standard normal double (curand_normal_double): Box-Muller on four outputs, the second value kept.
__device__ __forceinline__ double rng_normal_double(uint32_t* words) {
  PhiloxState* s = rng_detail::state(words);
  double kept;
  if (s->has_normal_double) {
    s->has_normal_double = 0;
    memcpy(&kept, s->normal_double, sizeof(kept));
    return kept;
  }
  uint32_t x0 = rng_rand(words), x1 = rng_rand(words), y0 = rng_rand(words), y1 = rng_rand(words);
  double u = rng_detail::to_double(x0, x1);
  unsigned long long zy = static_cast<unsigned long long>(y0) ^ (static_cast<unsigned long long>(y1) << (53 - 32));
  double v = zy * (rng_detail::kTwoPow53Inv * 2.0) + rng_detail::kTwoPow53Inv;
  double r = sqrt(-2.0 * log(u)), sn, cs;
  sincospi(v, &sn, &cs);
  kept = cs * r;
  memcpy(s->normal_double, &kept, sizeof(kept));
  s->has_normal_double = 1;
  return sn * r;
}

}  // namespace tilex
