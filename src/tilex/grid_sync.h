// A barrier across every thread of every block of the grid (T.sync_grid), for kernels launched cooperatively:
// tilex.transform.grid_sync marks a kernel that calls it for TVM's cooperative launch (every block resident at
// once, or the launch fails) and includes this header in that kernel's file only -- cooperative_groups.h
// roughly doubles the compile time of a small kernel.
#pragma once
#include <cooperative_groups.h>

namespace tilex {

// Every thread of every block waits here until all have arrived; global-memory writes made before it by any thread
// of the grid are visible after it to every thread (cooperative_groups' grid sync fences them).
__device__ __forceinline__ void sync_grid() { cooperative_groups::this_grid().sync(); }

}  // namespace tilex
