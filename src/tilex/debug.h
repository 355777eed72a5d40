// T.print support: device printf with the printing block and thread in front of every line.
#pragma once
#include <cstdio>

namespace tilex {

// `fmt` is built by tilex/language/debug.py: six %d conversions (blockIdx.x/y/z, threadIdx.x/y/z: the hardware
// indices, supplied here), one %d per index in `idx`, then the value's conversion. The value's type `V` is given
// explicitly by the caller and matches that conversion (a literal like `7` still reaches a %lld as a long long).
template <typename V, typename... Idx>
__device__ __forceinline__ void debug_print(const char* fmt, V value, Idx... idx) {
  printf(fmt, (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)threadIdx.x, (int)threadIdx.y,
         (int)threadIdx.z, static_cast<int>(idx)..., value);
}

}  // namespace tilex
