// The AMX family's operand microkernels (phi_parts.hpp, x_rows.hpp): phi.gamma
// split into three bf16 parts whose sum is exact (for |value| >= 2^-110), fp16 x
// into two, and the sums
// of squares taken from the tiles' rows, against their stated forms, bitwise.
#include "core/dtype.hpp"
#include "targets.hpp"
#if defined(MHC_WITH_AMX)
#include "kernels/amx/phi_parts.hpp"
#include "kernels/amx/x_rows.hpp"
#endif

namespace mhc_kernel_test {
namespace {

#if defined(MHC_WITH_AMX)
namespace amx = mhc::kernels::amx;

// These need AVX-512 (F, BW) only, not the tiles.
bool amx_runs() { return mhc::kernels::simd::runs(mhc::Isa::avx512); }

float bf16(uint16_t h) { return mhc::core::bf16_to_float(h); }

TEST(AmxPhiParts, ThreeBf16PartsSumExactlyToTheValue) {
  if (!amx_runs()) GTEST_SKIP() << "this CPU has no AVX-512";
  Rng rng(21);
  for (int round = 0; round < 500; ++round) {
    float values[32];
    for (float& v : values) {
      const float scale = std::ldexp(1.0f, int(rng.below(60)) - 30);
      v = rng.uniform(-1, 1) * scale;
    }
    if (round == 0) values[3] = 0.0f, values[4] = -0.0f, values[5] = 0x1p-110f, values[6] = -0x1.fffffep-100f;
    uint16_t parts[3 * 32];
    ASSERT_TRUE(amx::split_step(values, parts));
    for (int i = 0; i < 32; ++i) {
      const double hi = bf16(parts[i]), mid = bf16(parts[32 + i]), lo = bf16(parts[64 + i]);
      ASSERT_EQ(hi + mid + lo, double(values[i])) << "value " << i << " of round " << round;
      ASSERT_EQ(bits(float(hi)), bits(values[i]) & 0xffff0000u) << "hi is the truncation to 8 significant bits";
    }
  }
}

// Below 2^-110 the parts reach the subnormal range, which tdpbf16ps flushes to
// zero: the split is no longer exact there, but it loses less than 2^-126.
TEST(AmxPhiParts, ValuesBelowTheTilesRangeLoseLessThanTheSmallestNormal) {
  if (!amx_runs()) GTEST_SKIP() << "this CPU has no AVX-512";
  float values[32];
  for (int i = 0; i < 32; ++i) values[i] = (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.2345678f, -111 - 2 * i);
  values[31] = 1e-40f;  // subnormal
  uint16_t parts[3 * 32];
  ASSERT_TRUE(amx::split_step(values, parts));
  for (int i = 0; i < 32; ++i) {
    const double sum = double(bf16(parts[i])) + double(bf16(parts[32 + i])) + double(bf16(parts[64 + i]));
    EXPECT_LT(std::fabs(sum - double(values[i])), 0x1p-126) << "value " << i;
  }
}

TEST(AmxPhiParts, NonFiniteValuesAreReported) {
  if (!amx_runs()) GTEST_SKIP() << "this CPU has no AVX-512";
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    float values[32] = {};
    values[17] = bad;
    uint16_t parts[3 * 32];
    EXPECT_FALSE(amx::split_step(values, parts));
    if (std::isnan(bad)) EXPECT_TRUE(std::isnan(bf16(parts[17])));
    else EXPECT_EQ(bf16(parts[17]), bad);
  }
}

TEST(AmxXParts, Fp16RowAsTwoExactBf16PartsAndItsSquares) {
  if (!amx_runs()) GTEST_SKIP() << "this CPU has no AVX-512";
  Rng rng(22);
  for (int round = 0; round < 200; ++round) {
    uint16_t row[32];
    float x[32];
    for (int i = 0; i < 32; ++i) {
      mhc::core::store_element(row, DType::fp16, i, rng.uniform(-60000, 60000) * std::ldexp(1.0f, -int(rng.below(24))));
      x[i] = mhc::core::load_element(row, DType::fp16, i);
    }
    alignas(64) uint16_t hi[32], lo[32];
    alignas(64) float sq[16], want_sq[16];
    for (int l = 0; l < 16; ++l) sq[l] = want_sq[l] = rng.uniform(0, 1);
    amx::fp16_parts(row, hi, lo, sq);
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(double(bf16(hi[i])) + double(bf16(lo[i])), double(x[i])) << "element " << i;
    }
    for (int l = 0; l < 16; ++l) {  // first the row's first 16, then its second 16
      want_sq[l] = std::fma(x[l], x[l], want_sq[l]);
      want_sq[l] = std::fma(x[16 + l], x[16 + l], want_sq[l]);
      ASSERT_EQ(bits(sq[l]), bits(want_sq[l])) << "lane " << l;
    }
  }
}

TEST(AmxXParts, SquaresOfBf16RowsEvenThenOddColumns) {
  if (!amx_runs()) GTEST_SKIP() << "this CPU has no AVX-512";
  Rng rng(23);
  const int64_t rows = 5, stride_bytes = 96;
  std::vector<uint16_t> data(size_t(rows * stride_bytes / 2));
  for (size_t i = 0; i < data.size(); ++i) mhc::core::store_element(data.data(), DType::bf16, int64_t(i), rng.uniform(-4, 4));
  alignas(64) float sq[rows * 16], want[rows * 16];
  for (int i = 0; i < rows * 16; ++i) sq[i] = want[i] = rng.uniform(0, 1);
  amx::accumulate_squares(data.data(), stride_bytes, rows, sq);
  for (int64_t r = 0; r < rows; ++r)
    for (int l = 0; l < 16; ++l) {
      const float even = bf16(data[size_t(r * stride_bytes / 2 + 2 * l)]);
      const float odd = bf16(data[size_t(r * stride_bytes / 2 + 2 * l + 1)]);
      float w = std::fma(even, even, want[r * 16 + l]);
      w = std::fma(odd, odd, w);
      ASSERT_EQ(bits(sq[r * 16 + l]), bits(w)) << "row " << r << " lane " << l;
    }
}
#else
TEST(AmxPhiParts, NotBuilt) { GTEST_SKIP() << "built without the AMX kernels"; }
#endif

}  // namespace
}  // namespace mhc_kernel_test
