// acl/acl_base.h's helpers: aclFloatToFloat16 / aclFloat16ToFloat against two
// independent references (a nearest-value search over every binary16 value
// computed in double, and the compiler's _Float16 where it has one), and
// aclDataTypeSize for every aclDataType.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"

extern "C" size_t mhc_test_data_type_size(int dtype);

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The value of a finite binary16 code, from the format's definition.
double half_value(uint16_t code) {
  const int e = (code >> 10) & 0x1f, m = code & 0x3ff;
  const double magnitude = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), e - 25);
  return (code & 0x8000) ? -magnitude : magnitude;
}

// The non-negative finite binary16 values, ascending (codes 0 .. 0x7bff).
const std::vector<double>& finite_halves() {
  static const std::vector<double> table = [] {
    std::vector<double> t;
    for (uint32_t c = 0; c <= 0x7bff; ++c) t.push_back(half_value(uint16_t(c)));
    return t;
  }();
  return table;
}

// Round to nearest, ties to the even code, by searching the value table.
uint16_t reference_half(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7c00;  // half-way between 65504 and 2^16, and beyond
  const std::vector<double>& t = finite_halves();
  const size_t hi = size_t(std::lower_bound(t.begin(), t.end(), a) - t.begin());
  if (hi == t.size()) return sign | 0x7bff;
  if (t[hi] == a || hi == 0) return uint16_t(sign | hi);
  const size_t lo = hi - 1;
  const double below = a - t[lo], above = t[hi] - a;
  const size_t nearest = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return uint16_t(sign | nearest);
}

bool is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

// The compiler's half type: _Float16, or on aarch64 __fp16 (GCC 12 has no C++ _Float16 there).
#if defined(__aarch64__)
#define MHC_TEST_COMPILER_HALF __fp16
#elif defined(__FLT16_MANT_DIG__)
#define MHC_TEST_COMPILER_HALF _Float16
#endif

// Both references agree with the conversion of f (NaN: NaN, sign kept).
void expect_converts(float f) {
  const uint16_t got = aclFloatToFloat16(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(is_half_nan(got)) << std::hex << bits(f) << " -> " << got;
    EXPECT_EQ(got & 0x8000, (bits(f) >> 16) & 0x8000) << std::hex << bits(f);
    return;
  }
  ASSERT_EQ(got, reference_half(f)) << std::hex << "float bits " << bits(f) << " (" << f << ")";
#ifdef MHC_TEST_COMPILER_HALF
  const MHC_TEST_COMPILER_HALF h = static_cast<MHC_TEST_COMPILER_HALF>(f);
  uint16_t hb;
  std::memcpy(&hb, &h, 2);
  ASSERT_EQ(got, hb) << std::hex << "float bits " << bits(f) << " (the compiler's half)";
#endif
}

TEST(AclFloat16, EveryHalfRoundTripsThroughFloatExactly) {
  for (uint32_t c = 0; c <= 0xffff; ++c) {
    const float f = aclFloat16ToFloat(aclFloat16(c));
    if ((c & 0x7c00) != 0x7c00) ASSERT_EQ(double(f), half_value(uint16_t(c))) << std::hex << c;
    else ASSERT_EQ(std::isnan(f), is_half_nan(uint16_t(c))) << std::hex << c;  // Inf or NaN
    ASSERT_EQ(aclFloatToFloat16(f), c) << std::hex << c;  // NaNs too: payload and sign kept
  }
  EXPECT_EQ(bits(aclFloat16ToFloat(0x8000)), 0x80000000u);  // -0
  EXPECT_TRUE(std::isinf(aclFloat16ToFloat(0x7c00)) && aclFloat16ToFloat(0xfc00) < 0);
}

TEST(AclFloat16, HalfWayPointsRoundToEvenAndTheirNeighboursToNearest) {
  const std::vector<double>& t = finite_halves();
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    const float mid = float((t[i] + t[i + 1]) / 2);  // exact: 12 significant bits
    ASSERT_EQ(double(mid), (t[i] + t[i + 1]) / 2);
    for (float sign : {1.0f, -1.0f}) {
      const float m = sign * mid;
      EXPECT_EQ(aclFloatToFloat16(m) & 0x7fff, i % 2 == 0 ? i : i + 1) << "tie after code " << i;
      EXPECT_EQ(aclFloatToFloat16(std::nextafter(m, 0.0f)) & 0x7fff, i) << "below the tie after code " << i;
      EXPECT_EQ(aclFloatToFloat16(std::nextafter(m, sign * INFINITY)) & 0x7fff, i + 1) << "above, code " << i;
      expect_converts(m);
      expect_converts(std::nextafter(m, 0.0f));
      expect_converts(std::nextafter(m, sign * INFINITY));
    }
  }
}

TEST(AclFloat16, SubnormalsAreExactAndTinyValuesRoundToEven) {
  for (int m = 1; m < 1024; ++m) {
    const float f = std::ldexp(float(m), -24);
    EXPECT_EQ(aclFloatToFloat16(f), m);
    EXPECT_EQ(aclFloatToFloat16(-f), 0x8000 | m);
  }
  const float quantum = std::ldexp(1.0f, -24);
  EXPECT_EQ(aclFloatToFloat16(quantum / 2), 0);                                     // tie: to 0 (even)
  EXPECT_EQ(aclFloatToFloat16(std::nextafter(quantum / 2, 1.0f)), 1);               // just above: 2^-24
  EXPECT_EQ(aclFloatToFloat16(3 * quantum / 2), 2);                                 // tie between 1 and 2
  EXPECT_EQ(aclFloatToFloat16(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(aclFloatToFloat16(-std::numeric_limits<float>::denorm_min()), 0x8000);  // -0
  EXPECT_EQ(aclFloatToFloat16(std::ldexp(1023.5f, -24)), 0x400);  // rounds up into the smallest normal
  EXPECT_EQ(aclFloatToFloat16(-0.0f), 0x8000);
}

TEST(AclFloat16, OverflowGivesInfAndInfAndNanAreKept) {
  EXPECT_EQ(aclFloatToFloat16(65504.0f), 0x7bff);
  EXPECT_EQ(aclFloatToFloat16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(aclFloatToFloat16(65520.0f), 0x7c00);  // the tie rounds to even: Inf
  EXPECT_EQ(aclFloatToFloat16(-65520.0f), 0xfc00);
  EXPECT_EQ(aclFloatToFloat16(1e10f), 0x7c00);
  EXPECT_EQ(aclFloatToFloat16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(aclFloatToFloat16(INFINITY), 0x7c00);
  EXPECT_EQ(aclFloatToFloat16(-INFINITY), 0xfc00);
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0x7f802000u, 0xff800001u})
    expect_converts(from_bits(nan));
  EXPECT_TRUE(std::isnan(aclFloat16ToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(aclFloat16ToFloat(0xfc01)));
}

// A sweep over the float bit patterns (every 65521st, both signs, all
// exponents) and pseudo-random ones, against both references.
TEST(AclFloat16, AgreesWithTheReferencesOnASweepOfAllFloats) {
  for (uint64_t b = 0; b <= 0xffffffffull; b += 65521) expect_converts(from_bits(uint32_t(b)));
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    // Concentrate on the binary16 range: exponents 2^-26 .. 2^17.
    const uint32_t exponent = 101 + (state >> 27) % 44;
    expect_converts(from_bits((state & 0x807fffffu) | (exponent << 23)));
  }
}

TEST(AclDataTypeSize, EveryDataTypeAndUnknownValues) {
  const struct {
    aclDataType type;
    size_t size;
  } kSizes[] = {{ACL_FLOAT, 4},      {ACL_FLOAT16, 2}, {ACL_INT8, 1},       {ACL_INT32, 4},
                {ACL_UINT8, 1},      {ACL_INT16, 2},   {ACL_UINT16, 2},     {ACL_UINT32, 4},
                {ACL_INT64, 8},      {ACL_UINT64, 8},  {ACL_DOUBLE, 8},     {ACL_BOOL, 1},
                {ACL_STRING, 0},     {ACL_COMPLEX64, 8}, {ACL_COMPLEX128, 16}, {ACL_BF16, 2},
                {ACL_DT_UNDEFINED, 0}};
  for (const auto& s : kSizes) EXPECT_EQ(aclDataTypeSize(s.type), s.size) << int(s.type);
  // CANN's numbers, which programs hard-code (SPEC §7).
  EXPECT_EQ(int(ACL_FLOAT), 0);
  EXPECT_EQ(int(ACL_FLOAT16), 1);
  EXPECT_EQ(int(ACL_INT16), 6);
  EXPECT_EQ(int(ACL_BOOL), 12);
  EXPECT_EQ(int(ACL_BF16), 27);
  for (int unknown : {5, 14, 15, 18, 26, 28, 99, -7, 1 << 20})
    EXPECT_EQ(mhc_test_data_type_size(unknown), 0u) << unknown;
  EXPECT_EQ(mhc_test_data_type_size(27), 2u);
}

}  // namespace
