// Every target the CPU runs has its microkernel table, so no tester passes by testing nothing.
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

TEST(KernelTargets, EverySimdTargetThisCpuRunsHasItsTable) {
#if defined(MHC_WITH_SIMD)
  for (mhc::Isa isa : {mhc::Isa::avx512, mhc::Isa::avx2}) {
    if (!mhc::kernels::simd::runs(isa)) continue;
    const Microkernels* m = mhc::kernels::simd::microkernels(isa);
    ASSERT_NE(m, nullptr) << mhc::isa_name(isa);
    EXPECT_STREQ(m->target, mhc::isa_name(isa));
    EXPECT_EQ(m->lanes, isa == mhc::Isa::avx512 ? 16 : 8);
  }
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    EXPECT_TRUE(mhc::kernels::simd::runs(mhc::Isa::avx512));
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(mhc::kernels::simd::runs(mhc::Isa::avx2));
  }
#endif
#else
  GTEST_SKIP() << "built without the SIMD kernels";
#endif
}

}  // namespace
}  // namespace mhc_kernel_test
