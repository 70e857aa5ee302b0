// Every target the CPU runs has its microkernel table, so no tester passes by testing nothing.
#include <cstdlib>

#include "targets.hpp"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

namespace mhc_kernel_test {
namespace {

// fp32 lanes of a family's vectors on this CPU.
int expected_lanes(mhc::Isa isa) {
  switch (isa) {
    case mhc::Isa::avx512: return 16;
    case mhc::Isa::avx2: return 8;
    case mhc::Isa::neon: return 4;
#if defined(__aarch64__)
    case mhc::Isa::sve:
    case mhc::Isa::sve2: return (prctl(PR_SVE_GET_VL) & PR_SVE_VL_LEN_MASK) / 4;
#endif
    default: return 0;
  }
}

TEST(KernelTargets, EverySimdTargetThisCpuRunsHasItsTable) {
#if defined(MHC_WITH_SIMD)
  for (mhc::Isa isa : kSimdFamilies) {
    if (!mhc::kernels::simd::runs(isa)) continue;
    const Microkernels* m = mhc::kernels::simd::microkernels(isa);
    ASSERT_NE(m, nullptr) << mhc::isa_name(isa);
    EXPECT_STREQ(m->target, mhc::isa_name(isa));
    EXPECT_EQ(m->lanes, expected_lanes(isa)) << mhc::isa_name(isa);
  }
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    EXPECT_TRUE(mhc::kernels::simd::runs(mhc::Isa::avx512));
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(mhc::kernels::simd::runs(mhc::Isa::avx2));
  }
#elif defined(__aarch64__)
  // What the kernel reports, against the families' availability (SVE's up to 512-bit vectors).
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  const bool sve = (hwcap & HWCAP_SVE) != 0 && expected_lanes(mhc::Isa::sve) <= 16;
  EXPECT_EQ(mhc::kernels::simd::runs(mhc::Isa::neon), (hwcap & HWCAP_ASIMD) != 0 && (hwcap & HWCAP_AES) != 0);
  EXPECT_EQ(mhc::kernels::simd::runs(mhc::Isa::sve), sve);
  EXPECT_EQ(mhc::kernels::simd::runs(mhc::Isa::sve2), sve && (hwcap2 & HWCAP2_SVE2) != 0);
  EXPECT_FALSE(mhc::kernels::simd::runs(mhc::Isa::avx512));
  EXPECT_FALSE(mhc::kernels::simd::runs(mhc::Isa::avx2));
#endif
#else
  GTEST_SKIP() << "built without the SIMD kernels";
#endif
}

// With neither MHC_ISA nor set_isa, calls run the registry's first entry this CPU runs;
// MHC_EXPECT_ISA (scripts/test_arm64.sh, per emulated CPU) names the family that must be.
TEST(Registry, DispatchChoosesTheBestFamilyThisCpuRuns) {
  if (const char* forced = std::getenv("MHC_ISA"); forced != nullptr && *forced != '\0')
    GTEST_SKIP() << "MHC_ISA=" << forced << " chooses the family";
  EXPECT_STREQ(mhc::isa(), mhc::kernels::best_available().name);
  if (const char* want = std::getenv("MHC_EXPECT_ISA"); want != nullptr && *want != '\0') {
    EXPECT_STREQ(mhc::isa(), want);
  }
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
