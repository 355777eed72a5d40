// Stream-K fixup for persistent GEMM kernels. A worker (block, or cluster of blocks) runs its share of the
// stream-K iterations in order: first the end of some output tile (a contributor: it leaves its fp32 partial
// accumulators in global memory and raises a flag), last the start of another tile (its owner: it adds the
// contributors' partials to its own and writes the tile). Contributors wait for nobody, and they run their
// piece at the start of their share while owners finish at its end, so an owner's wait is short and never
// circular.
#pragma once
#include <cstdint>

#include "tilex/tma.h"

namespace tilex {

// The launch's workspace (one per launch stream, handed in by the host: tilex.streamk_workspace) holds FLAGS int
// flags, one per block, then one partial per block (float4 per thread per 4 words, thread-minor for coalescing):
// tilex.ir.intrin.streamk_workspace_bytes. It starts zeroed; a contributor counts its flag up and the owner counts
// it down, so each launch leaves the flags zero for the next on its stream (a set-and-clear flag could be cleared
// under a waiting owner). Every stream-K kernel puts its flags in the same first FLAGS ints, so the partials of one
// kernel never land where another reads its flags.

// The worker whose share of the `wsk` stream-K iterations holds iteration u (shares are [w*wsk/workers, ...)).
__device__ __forceinline__ int streamk_worker_of(long long u, int workers, long long wsk) {
  return (int)(((u + 1) * workers - 1) / wsk);
}

__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Called by every consumer thread after the K loop of a segment [lo, hi) of stream-K tile t that is not the
// whole tile. workspace: the launch's; acc: the thread's WORDS fp32 accumulators; pid: block index;
// cluster/rank: blocks per worker and this block's rank; n: iterations per tile. Returns 1 in owners (acc then
// holds the tile's sum), 0 otherwise.
template <int WORDS, int THREADS, int SLOTS, int FLAGS>
__device__ __forceinline__ int streamk_fixup(float* workspace, float* acc, int tid, int t, int lo, int pid,
                                             int cluster, int rank, int workers, long long wsk, int n) {
  static_assert(WORDS % 4 == 0, "stream-K partials are exchanged as float4");
  static_assert(SLOTS <= FLAGS && FLAGS % 4 == 0, "one flag per block, the partials 16-byte aligned after them");
  constexpr int Q = WORDS / 4;
  int* flags = reinterpret_cast<int*>(workspace);
  float4* ws = reinterpret_cast<float4*>(flags + FLAGS);
  if (lo > 0) {
#pragma unroll
    for (int i = 0; i < Q; ++i) {
      __stcg(&ws[((long long)pid * Q + i) * THREADS + tid],
             make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    }
    __threadfence();
    named_barrier_sync(THREADS);
    if (tid == 0) atomicAdd(&flags[pid], 1);
    return 0;
  }
  const int c0 = streamk_worker_of((long long)t * n, workers, wsk);
  const int c1 = streamk_worker_of((long long)t * n + n - 1, workers, wsk);
  for (int c = c0 + 1; c <= c1; ++c) {
    const int other = c * cluster + rank;
    while (ld_acquire_gpu(&flags[other]) == 0) {
    }
#pragma unroll
    for (int i = 0; i < Q; ++i) {
      const float4 v = __ldcg(&ws[((long long)other * Q + i) * THREADS + tid]);
      acc[4 * i] += v.x;
      acc[4 * i + 1] += v.y;
      acc[4 * i + 2] += v.z;
      acc[4 * i + 3] += v.w;
    }
  }
  named_barrier_sync(THREADS);
  if (tid == 0) {
    for (int c = c0 + 1; c <= c1; ++c) atomicSub(&flags[c * cluster + rank], 1);
  }
  return 1;
}

}  // namespace tilex
