// Which Highway target's table serves a kernel family: for the HWY_ONCE part of a
// file compiled for every target (after foreach_target.h and highway.h), where each
// target's namespace N_<TARGET> holds its own copy of a table or function.
#pragma once

#include "hwy/highway.h"
#include "mhc/mhc.hpp"

namespace mhc::kernels::simd {

// The entry of `isa` among the targets' (nullptr where this build has none).
template <class Pointer>
Pointer per_target(Isa isa, Pointer avx512, Pointer avx2, Pointer sve2, Pointer sve, Pointer neon) {
  switch (isa) {
    case Isa::avx512: return avx512;
    case Isa::avx2: return avx2;
    case Isa::sve2: return sve2;
    case Isa::sve: return sve;
    case Isa::neon: return neon;
    default: return nullptr;
  }
}

}  // namespace mhc::kernels::simd

#if HWY_TARGETS & HWY_AVX3
#define MHC_SIMD_IN_AVX512(name) &N_AVX3::name
#else
#define MHC_SIMD_IN_AVX512(name) nullptr
#endif
#if HWY_TARGETS & HWY_AVX2
#define MHC_SIMD_IN_AVX2(name) &N_AVX2::name
#else
#define MHC_SIMD_IN_AVX2(name) nullptr
#endif
#if HWY_TARGETS & HWY_SVE2
#define MHC_SIMD_IN_SVE2(name) &N_SVE2::name
#else
#define MHC_SIMD_IN_SVE2(name) nullptr
#endif
#if HWY_TARGETS & HWY_SVE
#define MHC_SIMD_IN_SVE(name) &N_SVE::name
#else
#define MHC_SIMD_IN_SVE(name) nullptr
#endif
#if HWY_TARGETS & HWY_NEON
#define MHC_SIMD_IN_NEON(name) &N_NEON::name
#else
#define MHC_SIMD_IN_NEON(name) nullptr
#endif

// &N_<target>::name for the target of `isa`, as a Pointer (nullptr where none).
#define MHC_SIMD_PER_TARGET(Pointer, isa, name)                                                            \
  ::mhc::kernels::simd::per_target<Pointer>(isa, MHC_SIMD_IN_AVX512(name), MHC_SIMD_IN_AVX2(name),      \
                                            MHC_SIMD_IN_SVE2(name), MHC_SIMD_IN_SVE(name), MHC_SIMD_IN_NEON(name))
