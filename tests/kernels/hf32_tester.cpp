// HF32 rounding (SPEC §7) on every target: the scalar form against the bit
// formula written out here, and each target's vector form against the scalar,
// bitwise, on edge values and random ones.
#include <cstdint>
#include <cstring>

#include "kernels/common/hf32.hpp"
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

using mhc::kernels::common::round_hf32;

// SPEC's formula on the int32 pattern, with arithmetic shifts.
uint32_t spec_formula(uint32_t u) {
  const int32_t b = int32_t(u);
  return uint32_t(((b >> 12) + 1) >> 1 << 13);
}

std::vector<uint32_t> edge_patterns() {
  std::vector<uint32_t> out = {0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x3f801000u, 0x3f800fffu,
                               0x3f801fffu, 0x3f803000u, 0xbf801000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                               0xff800000u, 0x00000001u, 0x00001000u, 0x007fffffu, 0x80001000u, 0x7fc00000u,
                               0xffc00000u, 0x7f800001u, 0x7fa00000u, 0x7f801000u, 0x7ffff000u, 0xfffff000u};
  Rng rng(7);
  for (int i = 0; i < 4000; ++i) out.push_back(uint32_t(rng.next() >> 32));
  return out;
}

TEST(Hf32, ScalarRoundingIsTheBitFormulaAndKeepsNaN) {
  for (uint32_t u : edge_patterns()) {
    const float r = round_hf32(from_bits(u));
    if (std::isnan(from_bits(u))) {
      EXPECT_EQ(bits(r), u) << std::hex << u;  // NaN kept as it is
      continue;
    }
    EXPECT_EQ(bits(r), spec_formula(u)) << std::hex << u;
    EXPECT_EQ(bits(r) & 0x1fffu, 0u) << std::hex << u;  // 10 stored bits
  }
  // Half away from zero: 1 + 2^-11 (half of HF32's last place) goes up, just below stays.
  EXPECT_EQ(round_hf32(from_bits(0x3f801000u)), from_bits(0x3f802000u));
  EXPECT_EQ(round_hf32(from_bits(0x3f800fffu)), 1.0f);
  EXPECT_EQ(round_hf32(from_bits(0xbf801000u)), from_bits(0xbf802000u));
  EXPECT_EQ(round_hf32(from_bits(0x7f7fffffu)), INFINITY);  // the carry reaches the exponent
  EXPECT_EQ(round_hf32(INFINITY), INFINITY);
  EXPECT_EQ(round_hf32(-INFINITY), -INFINITY);
}

// The bit formula alone maps a NaN with a low payload to Inf, and one with bits
// 12-22 all set to a signed zero: SPEC's "NaN stays NaN" needs the exception
// round_hf32 makes.
TEST(Hf32, TheBitFormulaAloneLosesSomeNaNs) {
  EXPECT_EQ(spec_formula(0x7f800001u), 0x7f800000u);  // +Inf
  EXPECT_EQ(spec_formula(0x7ffff000u), 0x80000000u);  // -0
  EXPECT_EQ(spec_formula(0xfffff000u), 0x00000000u);  // +0
  for (uint32_t u : {0x7f800001u, 0x7ffff000u, 0xfffff000u}) EXPECT_EQ(bits(round_hf32(from_bits(u))), u);
}

TEST(Hf32, EveryTargetRoundsAsTheScalarForm) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    const std::vector<uint32_t> patterns = edge_patterns();
    for (int64_t count : {int64_t(patterns.size()), int64_t(m->lanes - 1), int64_t(3)}) {
      std::vector<float> values(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) values[size_t(i)] = from_bits(patterns[size_t(i)]);
      std::vector<float> want = values;
      for (float& v : want) v = round_hf32(v);
      m->round_hf32(values.data(), count);
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(bits(values[size_t(i)]), bits(want[size_t(i)])) << m->target << " " << i;
    }
  }
}

}  // namespace
}  // namespace mhc_kernel_test
