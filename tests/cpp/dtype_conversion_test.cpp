// bf16 / fp16 conversions (src/core/dtype.hpp): round to nearest, ties to even,
// fp16 subnormals, overflow to Inf, NaN kept NaN; checked against an independent
// float64 rounding (and the compiler's _Float16 where it has one), exhaustively
// over 16-bit round trips and at every tie; and h_in's stores going through them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "test_util.hpp"

namespace mhc_test {
namespace {

using mhc::core::bf16_to_float;
using mhc::core::bits_float;
using mhc::core::float_bits;
using mhc::core::float_to_bf16;
using mhc::core::float_to_fp16;
using mhc::core::fp16_to_float;

// ---------------------------------------------------------------- the independent rounding

// Value of a non-negative 16-bit pattern up to the Inf pattern, which counts as
// the next binade's first value (so that rounding to it means overflow).
double decode_fp16(uint16_t p) {
  const int e = p >> 10, m = p & 0x3ff;
  return e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), e - 25);
}
double decode_bf16(uint16_t p) {
  const int e = p >> 7, m = p & 0x7f;
  return e == 0 ? std::ldexp(double(m), -133) : std::ldexp(double(128 + m), e - 134);
}

// Nearest pattern to a >= 0, ties to the even pattern, in float64 arithmetic (exact here).
uint16_t nearest_pattern(double a, double (*decode)(uint16_t), uint16_t inf) {
  uint16_t lo = 0, hi = inf;  // largest p with decode(p) <= a, by bisection
  if (a >= decode(inf)) return inf;
  while (hi - lo > 1) {
    const uint16_t mid = uint16_t((lo + hi) / 2);
    (decode(mid) <= a ? lo : hi) = mid;
  }
  const double below = a - decode(lo), above = decode(uint16_t(lo + 1)) - a;
  if (below < above) return lo;
  if (above < below) return uint16_t(lo + 1);
  return (lo & 1) ? uint16_t(lo + 1) : lo;
}

// The expected conversion; NaN results are reported as 0xffff (any NaN is fine).
constexpr uint16_t kAnyNaN = 0xffff;
uint16_t expected_fp16(float f) {
  if (std::isnan(f)) return kAnyNaN;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  return uint16_t(sign | nearest_pattern(std::fabs(double(f)), decode_fp16, 0x7c00));
}
uint16_t expected_bf16(float f) {
  if (std::isnan(f)) return kAnyNaN;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  return uint16_t(sign | nearest_pattern(std::fabs(double(f)), decode_bf16, 0x7f80));
}
bool is_fp16_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

::testing::AssertionResult converts_fp16(float f) {
  const uint16_t got = float_to_fp16(f), want = expected_fp16(f);
  const bool ok = want == kAnyNaN ? is_fp16_nan(got) && ((got & 0x8000) != 0) == std::signbit(f) : got == want;
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << f << " (bits 0x" << std::hex << float_bits(f)
                                       << ") -> fp16 0x" << got << ", expected 0x" << want;
}
::testing::AssertionResult converts_bf16(float f) {
  const uint16_t got = float_to_bf16(f), want = expected_bf16(f);
  const bool ok = want == kAnyNaN ? is_bf16_nan(got) && ((got & 0x8000) != 0) == std::signbit(f) : got == want;
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << f << " (bits 0x" << std::hex << float_bits(f)
                                       << ") -> bf16 0x" << got << ", expected 0x" << want;
}

// ---------------------------------------------------------------- exhaustive round trips

TEST(Fp16, EveryValueRoundTripsThroughFp32) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = fp16_to_float(uint16_t(h));
    if (is_fp16_nan(uint16_t(h))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(is_fp16_nan(float_to_fp16(f))) << std::hex << h;
      ASSERT_EQ(float_to_fp16(f) & 0x8000, h & 0x8000) << "NaN sign, 0x" << std::hex << h;
      continue;
    }
    // fp16 -> fp32 is exact: the independent decoding gives the same value.
    const double magnitude = (h & 0x7fff) == 0x7c00 ? INFINITY : decode_fp16(uint16_t(h & 0x7fff));
    ASSERT_EQ(double(f), (h & 0x8000) ? -magnitude : magnitude) << std::hex << h;
    ASSERT_EQ(float_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Bf16, EveryValueRoundTripsThroughFp32) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_float(uint16_t(h));
    ASSERT_EQ(float_bits(f), h << 16);
    if (is_bf16_nan(uint16_t(h))) {
      ASSERT_TRUE(is_bf16_nan(float_to_bf16(f))) << std::hex << h;
      ASSERT_EQ(float_to_bf16(f) & 0x8000, h & 0x8000) << std::hex << h;
      continue;
    }
    ASSERT_EQ(float_to_bf16(f), h) << std::hex << h;
  }
}

// ---------------------------------------------------------------- every tie, and its neighbours

// For each pair of adjacent 16-bit values: the exact midpoint (a tie: to the even
// one) and the floats just below and above it.
TEST(Fp16, EveryTieRoundsToEvenAndItsNeighboursToNearest) {
  for (uint32_t p = 0; p < 0x7c00; ++p) {
    const double mid = (decode_fp16(uint16_t(p)) + decode_fp16(uint16_t(p + 1))) / 2;
    const float tie = float(mid);
    ASSERT_EQ(double(tie), mid) << "midpoint must be exact in fp32";
    for (float f : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, INFINITY)}) {
      ASSERT_TRUE(converts_fp16(f));
      ASSERT_TRUE(converts_fp16(-f));
    }
    ASSERT_EQ(float_to_fp16(tie), (p & 1) ? p + 1 : p) << "tie above 0x" << std::hex << p;
  }
}

TEST(Bf16, EveryTieRoundsToEvenAndItsNeighboursToNearest) {
  for (uint32_t p = 0; p < 0x7f80; ++p) {
    const double mid = (decode_bf16(uint16_t(p)) + decode_bf16(uint16_t(p + 1))) / 2;
    const float tie = float(mid);
    ASSERT_EQ(double(tie), mid);
    for (float f : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, INFINITY)}) {
      ASSERT_TRUE(converts_bf16(f));
      ASSERT_TRUE(converts_bf16(-f));
    }
    ASSERT_EQ(float_to_bf16(tie), (p & 1) ? p + 1 : p) << "tie above 0x" << std::hex << p;
  }
}

// The compiler's half type: libgcc's soft-float conversion on x86-64, the FCVT
// instruction on aarch64 (whose GCC 12 has no _Float16 in C++, only __fp16).
#if defined(__aarch64__) && !defined(__clang__)
#define MHC_TEST_COMPILER_HALF __fp16
#elif defined(__FLT16_MAX__) && !defined(__clang__)
#define MHC_TEST_COMPILER_HALF _Float16
#endif

// A sweep of all fp32 bit patterns (every 4099th, all exponents and signs, NaNs included).
TEST(Fp16AndBf16, SweepOfAllFloatBitPatterns) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
    const float f = bits_float(uint32_t(u));
    ASSERT_TRUE(converts_fp16(f));
    ASSERT_TRUE(converts_bf16(f));
#if defined(MHC_TEST_COMPILER_HALF)
    if (!std::isnan(f)) {  // the compiler's own conversion agrees
      const MHC_TEST_COMPILER_HALF h = static_cast<MHC_TEST_COMPILER_HALF>(f);
      uint16_t hb;
      std::memcpy(&hb, &h, 2);
      ASSERT_EQ(float_to_fp16(f), hb) << std::hexfloat << f;
    }
#endif
  }
}

TEST(Fp16, ChosenCases) {
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3c00);          // tie, down to even
  EXPECT_EQ(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);      // tie, up to even
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);  // just above the tie
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);                 // largest finite
  EXPECT_EQ(float_to_fp16(65519.996f), 0x7bff);               // just below the overflow tie
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);                 // the tie rounds to even: Inf
  EXPECT_EQ(float_to_fp16(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(float_to_fp16(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_fp16(-INFINITY), 0xfc00);
  EXPECT_EQ(float_to_fp16(0x1p-14f), 0x0400);                 // smallest normal
  EXPECT_EQ(float_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);      // tie between 0x03ff and 0x0400: even
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);                 // smallest subnormal
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);                 // tie between 0 and 2^-24: even (0)
  EXPECT_EQ(float_to_fp16(0x1p-25f + 0x1p-40f), 0x0001);      // just above it
  EXPECT_EQ(float_to_fp16(3 * 0x1p-25f), 0x0002);             // tie 1.5 quanta: 2
  EXPECT_EQ(float_to_fp16(5 * 0x1p-25f), 0x0002);             // tie 2.5 quanta: 2
  EXPECT_EQ(float_to_fp16(-3 * 0x1p-25f), 0x8002);
  EXPECT_EQ(float_to_fp16(0x1p-149f), 0x0000);                // fp32 subnormal: to zero
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(NAN)));
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(bits_float(0x7f800001u))));  // NaN payload only in low bits
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(bits_float(0xff800001u))));
}

TEST(Bf16, ChosenCases) {
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);             // tie, down to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);         // tie, up to even
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f0000u)), 0x7f7f);    // largest finite
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f8000u)), 0x7f80);    // overflow tie: even is Inf
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7fffffu)), 0x7f80);    // FLT_MAX: Inf
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x00008000u)), 0x0000);    // subnormal tie: even (0)
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000u)), 0x0002);    // subnormal tie: up to even
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(NAN)));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits_float(0x7f800001u))));  // must not become Inf
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits_float(0xffffffffu))));
  EXPECT_EQ(float_to_bf16(bits_float(0xff800001u)) & 0x8000, 0x8000);
}

// ---------------------------------------------------------------- h_in's stores

// N = 2, D = 1, phi = 0: m = 0, so z_pre = bias exactly. bias = 100 gives
// h_pre = 1 (σ(100) rounds to 1), bias = 0 gives h_pre = 1/2, hc_eps = 0: then
// h_in = h_pre·(x0 + x1) exactly in fp32, and only the store rounds it. One token a case.
struct StoreCase {
  float x0, x1;
  float bias;   // 100 (h_pre = 1) or 0 (h_pre = 1/2)
  uint16_t h_in;  // expected bits; kAnyNaN for NaN
};

void expect_h_in_stores(DType dtype, const std::vector<StoreCase>& cases) {
  for (const StoreCase& sc : cases) {
    Config c;
    c.N = 2; c.D = 1; c.B = 1; c.S = 1; c.dtype = dtype; c.form = FForm::two_entry; c.gamma = false;
    c.hc_eps = 0;
    Operands o = make_operands(c);
    o.x.set(0, sc.x0);
    o.x.set(1, sc.x1);
    if (!std::isnan(sc.x0)) {
      ASSERT_EQ(o.x.get(0), double(sc.x0)) << "case input must be representable";
    }
    ASSERT_EQ(o.x.get(1), double(sc.x1)) << "case input must be representable";
    for (int64_t i = 0; i < o.phi.numel(); ++i) o.phi.set(i, 0.0);
    o.bias.set(0, sc.bias);
    o.bias.set(1, sc.bias);
    const mhc::Status st = mhc::pre_forward(forward_inputs(o), forward_outputs(o), o.options);
    ASSERT_TRUE(st.ok()) << st.message();
    const uint16_t got = uint16_t(o.h_in.bits(0));
    const float h_pre = sc.bias == 0 ? 0.5f : 1.0f;
    const float exact = h_pre * sc.x0 + h_pre * sc.x1;
    SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " h_in of x = (" << std::hexfloat << sc.x0 << ", "
                                      << sc.x1 << "), h_pre " << h_pre << ": 0x" << std::hex << got);
    if (sc.h_in == kAnyNaN) {
      EXPECT_TRUE(dtype == DType::fp16 ? is_fp16_nan(got) : is_bf16_nan(got));
      continue;
    }
    EXPECT_EQ(got, sc.h_in);
    EXPECT_EQ(got, dtype == DType::fp16 ? float_to_fp16(exact) : float_to_bf16(exact));
  }
}

TEST(HInStore, Fp16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  expect_h_in_stores(DType::fp16, {
      {1.0f, 0x1p-11f, 100, 0x3c00},              // tie: down to even
      {1.0f + 0x1p-10f, 0x1p-11f, 100, 0x3c02},   // tie: up to even
      {1.0f, 0x1p-11f + 0x1p-21f, 100, 0x3c01},   // just above the tie
      {65504.0f, 16.0f, 100, 0x7c00},             // 65520: overflow tie, to Inf
      {65504.0f, 8.0f, 100, 0x7bff},              // 65512: down to the largest finite
      {-65504.0f, -32.0f, 100, 0xfc00},
      {3 * 0x1p-24f, 0.0f, 0, 0x0002},            // 1.5·2^-24: subnormal tie, to 2
      {5 * 0x1p-24f, 0.0f, 0, 0x0002},            // 2.5·2^-24: to 2
      {0x1p-24f, 0.0f, 0, 0x0000},                // 0.5·2^-24: to 0
      {7 * 0x1p-24f, 0.0f, 0, 0x0004},            // 3.5·2^-24: to 4
      {-3 * 0x1p-24f, 0.0f, 0, 0x8002},
      {NAN, 1.0f, 100, kAnyNaN},
  });
}

TEST(HInStore, Bf16RoundsToNearestEvenWithOverflowAndNaN) {
  const float bf16_max = bits_float(0x7f7f0000u);
  expect_h_in_stores(DType::bf16, {
      {1.0f, 0x1p-8f, 100, 0x3f80},               // tie: down to even
      {1.0f + 0x1p-7f, 0x1p-8f, 100, 0x3f82},     // tie: up to even
      {1.0f, 0x1p-8f + 0x1p-15f, 100, 0x3f81},    // above the tie
      {bf16_max, 0x1p119f, 100, 0x7f80},          // overflow tie: Inf
      {-bf16_max, -0x1p119f, 100, 0xff80},
      {bf16_max, 0x1p118f, 100, 0x7f7f},          // below the tie: largest finite
      {0x1p-126f + 0x1p-133f, 0.0f, 0, 0x0040},   // (2^-126 + 2^-133)/2: subnormal tie, even
      {NAN, 1.0f, 100, kAnyNaN},
  });
}

}  // namespace
}  // namespace mhc_test
