// Which instructions the arch being compiled has, and how a wrapper fails on an arch that lacks its instruction:
// never an empty body (a kernel would run and return garbage) but a compile error. The table tilex's lowerings
// consult is tilex/ir/hardware.py (ARCH_FEATURES); these guards agree with it.
#pragma once

// setmaxnreg: arch-specific ('a') or family-specific ('f') targets of sm_90 and later (sm_90a, sm_100a/f,
// sm_103a/f, sm_110a/f, sm_120a/f, sm_121a/f); not plain sm_90 / sm_100 / sm_120.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(__CUDA_ARCH_FEAT_SM100_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM103_ALL) || defined(__CUDA_ARCH_FEAT_SM110_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) || \
    (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 900)
#define TILEX_HAS_SETMAXNREG 1
#endif

namespace tilex {

// A template wrapper instantiated on an arch without its instruction fails with
// static_assert(arch_unsupported<...>::value, "..."): false, but only once instantiated.
template <int...>
struct arch_unsupported {
  static constexpr bool value = false;
};

}  // namespace tilex

// A non-template wrapper used on such an arch calls one of these: declared, never defined, so ptxas stops with
// "Unresolved extern function 'tilex_error_...'" naming what is missing (a wrapper nobody calls emits nothing).
extern "C" __device__ void tilex_error_cp_async_requires_sm_80(void);
extern "C" __device__ void tilex_error_wgmma_requires_sm_90a(void);
extern "C" __device__ void tilex_error_tma_mbarrier_requires_sm_90(void);
extern "C" __device__ void tilex_error_clusters_require_sm_90(void);
extern "C" __device__ void tilex_error_griddepcontrol_requires_sm_90(void);
