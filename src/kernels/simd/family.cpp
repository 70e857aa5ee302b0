// The SIMD family: Highway-dispatched kernels for the best x86 target the CPU
// runs (AVX-512 or AVX2+FMA+F16C), with the target forced by MHC_ISA when asked.
#include <cstdlib>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "kernels/kernels.hpp"
#include "kernels/simd/simd.hpp"

namespace mhc::kernels {
namespace {

int64_t target_of(const char* name) {
  const std::string want(name);
  if (want == "avx512") return HWY_AVX3;
  if (want == "avx2") return HWY_AVX2;
  return 0;
}

}  // namespace

// The SIMD targets this build has and this CPU runs, best first (lowest bit).
static int64_t usable_targets() {
  return hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX2) & HWY_TARGETS;
}

const char* simd_best_name() {
  const int64_t usable = usable_targets();
  if (usable & HWY_AVX3) return "avx512";
  if (usable & HWY_AVX2) return "avx2";
  return nullptr;
}

// Restricts Highway's dispatch to the named target; false if it is not usable here.
bool simd_force(const char* name) {
  const int64_t target = target_of(name);
  if (target == 0 || !(usable_targets() & target)) return false;
  hwy::SetSupportedTargetsForTest(target);
  return true;
}

const Family* simd_family() {
  static const Family family = {"simd",
                                simd::forward_scratch_floats,
                                simd::backward_scratch_floats,
                                simd::forward_tokens,
                                simd::backward_chunk_floats,
                                simd::backward_token_stats,
                                simd::backward_columns,
                                simd::backward_rows,
                                simd::backward_finish_columns};
  return &family;
}

}  // namespace mhc::kernels
