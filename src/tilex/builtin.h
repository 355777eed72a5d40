// Device utilities of tile programs: T.dp4a, T.device_assert, named barriers of the whole block
// (T.sync_threads(id)), programmatic dependent launch (T.pdl_sync / T.pdl_trigger), and the markers the CUDA
// postprocessor (tilex/engine/nvcc.py) applies to the kernel's signature (T.annotate_min_blocks_per_sm,
// T.annotate_restrict_buffers).
#pragma once
#include <cassert>
#include <cstdint>
#include <cstring>

#include "tilex/arch.h"

namespace tilex {

// *c += the dot product of the four signed bytes at a and b (one __dp4a); the pointers need no alignment.
__device__ __forceinline__ void dp4a(const void* a, const void* b, int* c) {
  int a4, b4;
  memcpy(&a4, a, 4);
  memcpy(&b4, b, 4);
  *c = __dp4a(a4, b4, *c);
}

// A failed condition stops the kernel the way a device-side assert does (the launch reports
// cudaErrorAssert), after printing `msg` with the block and thread indices.
__device__ __forceinline__ void device_assert(bool cond, const char* msg, const char* file, unsigned line) {
  if (!cond) {
    __assert_fail(msg, file, line, "T.device_assert");
  }
}

// bar.sync on named barrier `id` by every thread of the block.
__device__ __forceinline__ void bar_sync(int id) { asm volatile("bar.sync %0;\n" ::"r"(id) : "memory"); }

// griddepcontrol.wait: wait until the grids this one depends on (programmatic dependent launch) have completed
// and their memory is visible; at once when the kernel was not launched as a dependent.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_griddepcontrol_requires_sm_90();
#endif
}

// griddepcontrol.launch_dependents: a dependent grid may be scheduled once every block issued this (or exited).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  tilex_error_griddepcontrol_requires_sm_90();
#endif
}

// Marker for the CUDA postprocessor (the minimum of the kernel's __launch_bounds__ the program asked for with
// T.annotate_min_blocks_per_sm); emits nothing.
template <int N>
__device__ __forceinline__ void min_blocks_hint() {}

// Marker for the CUDA postprocessor: the hex-encoded source text (T.import_source, T.Kernel(prelude=)) it moves to
// the top of the file, once per distinct text; the postprocessor removes every such line, so this never runs.
__device__ __forceinline__ void import_source(const char*) {}

// Marker for the CUDA postprocessor: the kernel parameters named here lose their __restrict__ (they may alias,
// T.annotate_restrict_buffers); emits nothing.
template <typename... Ptrs>
__device__ __forceinline__ void may_alias(Ptrs...) {}

}  // namespace tilex
