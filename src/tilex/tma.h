// Hopper bulk tensor copies (TMA), mbarriers, register reallocation and named barriers for warp-specialized
// pipelines.
#pragma once
#include <cstdint>

#include "tilex/arch.h"
#include "tilex/copy_async.h"

namespace tilex {

__device__ __forceinline__ void mbar_init(void* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// Make barrier initialization visible to the async proxy (TMA) and to the other threads after the next barrier.
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

__device__ __forceinline__ void mbar_arrive_expect_tx(void* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// Add `bytes` to the transaction count the barrier's current phase waits for, without arriving (the caller's
// arrival, or other threads', completes the phase once the bytes have landed).
__device__ __forceinline__ void mbar_expect_tx(void* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// Arrive on the barrier once every cp.async this thread issued before has landed, without adding to the arrivals
// the phase expects (the barrier's count includes this arrival).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(void* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_cp_async_requires_sm_80();
#endif
}

__device__ __forceinline__ void mbar_arrive(void* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// Block until the barrier phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(void* bar, int parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n.reg .pred done;\n"
      "TILEX_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra.uni TILEX_WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// 1-d tensor-map load of one box (a vector) into shared memory, completing on the barrier like tma_load_2d.
__device__ __forceinline__ void tma_load_1d(void* smem, uint64_t tensor_map, void* bar, int c0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n" ::"r"(
          smem_addr(smem)),
      "l"(tensor_map), "r"(smem_addr(bar)), "r"(c0)
      : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// 2-d tensor-map load of one box into shared memory, completing `bytes` on the barrier.
__device__ __forceinline__ void tma_load_2d(void* smem, uint64_t tensor_map, void* bar, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::
          "r"(smem_addr(smem)),
      "l"(tensor_map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// 3-d, 4-d and 5-d tensor-map loads of one box (coordinates innermost dimension first), completing on the barrier
// like tma_load_2d.
__device__ __forceinline__ void tma_load_3d(void* smem, uint64_t tensor_map, void* bar, int c0, int c1, int c2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(smem_addr(smem)),
      "l"(tensor_map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

__device__ __forceinline__ void tma_load_4d(void* smem, uint64_t tensor_map, void* bar, int c0, int c1, int c2,
                                            int c3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_addr(smem)),
      "l"(tensor_map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

__device__ __forceinline__ void tma_load_5d(void* smem, uint64_t tensor_map, void* bar, int c0, int c1, int c2,
                                            int c3, int c4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::"r"(smem_addr(smem)),
      "l"(tensor_map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// The same box multicast into the shared memory of every CTA of the cluster named in `cta_mask` (same offsets),
// completing `bytes` on each one's barrier at the offset of `bar`.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem, uint64_t tensor_map, void* bar, int c0, int c1,
                                                      int cta_mask) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(smem_addr(smem)),
      "l"(tensor_map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(static_cast<uint16_t>(cta_mask))
      : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// Arrive on the barrier at the offset of `bar` in the shared memory of cluster CTA `cta`.
__device__ __forceinline__ void mbar_arrive_cluster(void* bar, int cta) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(bar)), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_clusters_require_sm_90();
#endif
}

// All threads of all CTAs of the cluster.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_clusters_require_sm_90();
#endif
}

// Tensor-map writes of one shared-memory box into global memory, bulk-group operations (bulk_commit, then
// bulk_wait_read before the box is rewritten); coordinates innermost first, out-of-bounds parts of the box are not
// written. OP and MODE name the instruction: "cp.async", "" stores the box (tma_store_2d .. 5d: a tile of a
// matrix, or of a batched or multi-head tensor with extents 1 in the outer dimensions); "cp.reduce.async",
// ".add.tile" adds it to global memory element by element, done by the TMA unit (tma_reduce_add_2d .. 5d).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TILEX_TMA_TO_GLOBAL(OP, MODE, N, COORDS, ...)                                                              \
  asm volatile(OP ".bulk.tensor." #N "d.global.shared::cta" MODE ".bulk_group [%0, {" COORDS "}], [%1];\n"         \
               ::"l"(tensor_map), "r"(smem_addr(smem)), __VA_ARGS__ : "memory")
#elif defined(__CUDA_ARCH__)
#define TILEX_TMA_TO_GLOBAL(OP, MODE, N, COORDS, ...) tilex_error_tma_mbarrier_requires_sm_90()
#else
#define TILEX_TMA_TO_GLOBAL(OP, MODE, N, COORDS, ...) (void)tensor_map
#endif
#define TILEX_TMA_STORE(N, COORDS, ...) TILEX_TMA_TO_GLOBAL("cp.async", "", N, COORDS, __VA_ARGS__)
#define TILEX_TMA_REDUCE_ADD(N, COORDS, ...) TILEX_TMA_TO_GLOBAL("cp.reduce.async", ".add.tile", N, COORDS, __VA_ARGS__)
__device__ __forceinline__ void tma_store_2d(uint64_t tensor_map, void* smem, int c0, int c1) {
  TILEX_TMA_STORE(2, "%2, %3", "r"(c0), "r"(c1));
}
__device__ __forceinline__ void tma_store_3d(uint64_t tensor_map, void* smem, int c0, int c1, int c2) {
  TILEX_TMA_STORE(3, "%2, %3, %4", "r"(c0), "r"(c1), "r"(c2));
}
__device__ __forceinline__ void tma_store_4d(uint64_t tensor_map, void* smem, int c0, int c1, int c2, int c3) {
  TILEX_TMA_STORE(4, "%2, %3, %4, %5", "r"(c0), "r"(c1), "r"(c2), "r"(c3));
}
__device__ __forceinline__ void tma_store_5d(uint64_t tensor_map, void* smem, int c0, int c1, int c2, int c3,
                                             int c4) {
  TILEX_TMA_STORE(5, "%2, %3, %4, %5, %6", "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4));
}
__device__ __forceinline__ void tma_reduce_add_2d(uint64_t tensor_map, void* smem, int c0, int c1) {
  TILEX_TMA_REDUCE_ADD(2, "%2, %3", "r"(c0), "r"(c1));
}
__device__ __forceinline__ void tma_reduce_add_3d(uint64_t tensor_map, void* smem, int c0, int c1, int c2) {
  TILEX_TMA_REDUCE_ADD(3, "%2, %3, %4", "r"(c0), "r"(c1), "r"(c2));
}
__device__ __forceinline__ void tma_reduce_add_4d(uint64_t tensor_map, void* smem, int c0, int c1, int c2, int c3) {
  TILEX_TMA_REDUCE_ADD(4, "%2, %3, %4, %5", "r"(c0), "r"(c1), "r"(c2), "r"(c3));
}
__device__ __forceinline__ void tma_reduce_add_5d(uint64_t tensor_map, void* smem, int c0, int c1, int c2, int c3,
                                                  int c4) {
  TILEX_TMA_REDUCE_ADD(5, "%2, %3, %4, %5, %6", "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4));
}
#undef TILEX_TMA_STORE
#undef TILEX_TMA_REDUCE_ADD
#undef TILEX_TMA_TO_GLOBAL

__device__ __forceinline__ void bulk_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_tma_mbarrier_requires_sm_90();
#endif
}

// Wait until at most N bulk groups of this thread still read their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#elif defined(__CUDA_ARCH__)
  static_assert(arch_unsupported<N>::value, "tilex::bulk_wait_read: TMA needs sm_90+");
#endif
}

// Wait until at most N bulk groups of this thread are still in flight (their global writes done, not only their
// shared-memory reads).
template <int N>
__device__ __forceinline__ void bulk_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#elif defined(__CUDA_ARCH__)
  static_assert(arch_unsupported<N>::value, "tilex::bulk_wait: TMA needs sm_90+");
#endif
}

// Marker for the CUDA postprocessor (the kernel's __cluster_dims__); emits nothing.
template <int N>
__device__ __forceinline__ void cluster_dims() {}

template <int N>
__device__ __forceinline__ void reg_alloc() {
#if defined(TILEX_HAS_SETMAXNREG)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#elif defined(__CUDA_ARCH__)
  static_assert(arch_unsupported<N>::value,
                "tilex::reg_alloc: setmaxnreg needs an arch-specific target (sm_90a, sm_100a, sm_120a, ...)");
#endif
}

// Marker for the CUDA postprocessor (the minimum of the kernel's __launch_bounds__); emits nothing.
template <int N>
__device__ __forceinline__ void min_blocks_per_sm() {}

template <int N>
__device__ __forceinline__ void reg_dealloc() {
#if defined(TILEX_HAS_SETMAXNREG)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#elif defined(__CUDA_ARCH__)
  static_assert(arch_unsupported<N>::value,
                "tilex::reg_dealloc: setmaxnreg needs an arch-specific target (sm_90a, sm_100a, sm_120a, ...)");
#endif
}

// Barrier among the first `nthreads` threads only (barrier 1; barrier 0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int nthreads) {
  asm volatile("bar.sync 1, %0;\n" ::"r"(nthreads) : "memory");
}

// Wait on named barrier `id` until `nthreads` threads have arrived or waited on it (the caller counts).
__device__ __forceinline__ void named_barrier_wait(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

// Arrive on named barrier `id` (of `nthreads` threads) without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int nthreads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

}  // namespace tilex
