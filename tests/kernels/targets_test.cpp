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

// A table that does not apply to every call has a base that runs the rest and
// finishes its items; every entry has both operators' tables.
TEST(Registry, EveryEntryIsComplete) {
  for (const mhc::kernels::Implementation& impl : mhc::kernels::implementations()) {
    SCOPED_TRACE(impl.name);
    ASSERT_NE(impl.pre_forward, nullptr);
    ASSERT_NE(impl.pre_backward, nullptr);
    if (impl.pre_forward->applies != nullptr) {
      ASSERT_NE(impl.pre_forward_base, nullptr);
      EXPECT_NE(impl.pre_forward_base->finish_tokens, nullptr);
      EXPECT_EQ(impl.pre_forward_base->applies, nullptr);
    }
  }
}

}  // namespace
}  // namespace mhc_kernel_test
