// MhcPost and MhcPostBackward (SPEC §11) against references, through every face on
// every kernel family this build and CPU run, in one process (driver/post.hpp):
//   - against float64 (kernels/reference/post.hpp) within the rounding bounds of
//     SPEC's fp32 order, and bitwise against an fp32 model of that order written
//     here (signed zeros included); every face and family the same bits;
//   - H enters transposed (a non-symmetric H that fails otherwise);
//   - grad_x in fp32 and in x's dtype; grad_h_res given or not, with or without h_res.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "driver_check.hpp"
#include "post_util.hpp"

namespace mhc_test::layer {
namespace {

// ------------------------------------------------------------------ SPEC's fp32 order, modelled here

uint32_t bits_of(double v) { return mhc::core::float_bits(float(v)); }  // the sign of a zero kept

float rne_to(DType t, float v) {  // the cast to the output dtype, as a float
  uint32_t raw = 0;
  mhc::core::store_element(&raw, t, 0, v);
  return mhc::core::load_element(&raw, t, 0);
}

// Every output of one token computed in SPEC §11's fp32 order (product first, then
// each term added for i ascending; each sum in index order from its first term, as
// the kernels do since 2f899f4 (the two conventions differ only in a -0 result);
// each operation rounded: this file is built with -ffp-contract=off), bitwise.
void check_spec_order(Bag& b, const PCase& c, const std::string& family) {
  const int64_t N = c.N, D = c.D;
  auto f = [](const Tensor& t, int64_t i) { return float(t.get(i)); };
  const Tensor &x = b["x"], &ho = b["h_out"], &hp = b["h_post"], &g = b["grad_out"];
  const DType gxt = b["grad_x"].dtype();
  for (int64_t t = 0; t < c.T(); ++t) {
    auto H = [&](int64_t i, int64_t j) { return float(b["h_res"].get((t * N + i) * N + j)); };
    for (int64_t j = 0; j < N; ++j)
      for (int64_t d = 0; d < D; ++d) {
        float acc;
        if (c.h_res) {
          acc = f(hp, t * N + j) * f(ho, t * D + d);
          for (int64_t i = 0; i < N; ++i) acc = acc + H(i, j) * f(x, (t * N + i) * D + d);
        } else {
          acc = f(x, (t * N + j) * D + d) + f(hp, t * N + j) * f(ho, t * D + d);
        }
        ASSERT_EQ(bits_of(b["out"].get((t * N + j) * D + d)), bits_of(rne_to(c.dtype, acc)))
            << family << " out token " << t << " (" << j << "," << d << ")";
        float gx;
        if (c.h_res) {
          gx = H(j, 0) * f(g, (t * N + 0) * D + d);
          for (int64_t k = 1; k < N; ++k) gx = gx + H(j, k) * f(g, (t * N + k) * D + d);
        } else
          gx = f(g, (t * N + j) * D + d);
        ASSERT_EQ(bits_of(b["grad_x"].get((t * N + j) * D + d)), bits_of(rne_to(gxt, gx))) << family << " grad_x";
      }
    for (int64_t d = 0; d < D; ++d) {
      float acc = f(hp, t * N) * f(g, (t * N) * D + d);
      for (int64_t j = 1; j < N; ++j) acc = acc + f(hp, t * N + j) * f(g, (t * N + j) * D + d);
      ASSERT_EQ(bits_of(b["grad_h_out"].get(t * D + d)), bits_of(rne_to(c.dtype, acc))) << family << " grad_h_out";
    }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = f(x, (t * N + i) * D) * f(g, (t * N + j) * D);
        for (int64_t d = 1; d < D; ++d) acc = acc + f(x, (t * N + i) * D + d) * f(g, (t * N + j) * D + d);
        ASSERT_EQ(b["grad_h_res"].bits((t * N + i) * N + j), mhc::core::float_bits(acc)) << family << " grad_h_res";
      }
    for (int64_t j = 0; j < N; ++j) {
      float acc = f(ho, t * D) * f(g, (t * N + j) * D);
      for (int64_t d = 1; d < D; ++d) acc = acc + f(ho, t * D + d) * f(g, (t * N + j) * D + d);
      ASSERT_EQ(b["grad_h_post"].bits(t * N + j), mhc::core::float_bits(acc)) << family << " grad_h_post";
    }
  }
}

// The driver with SPEC's order checked bitwise on every run.
struct PostDriverWithSpecOrder : driver::PostDriver {
  void also_check(const PCase& c, driver::Face, Bag& b, const std::string& where, driver::Report&) const {
    check_spec_order(b, c, where);
  }
};

class PostOracle : public ::testing::TestWithParam<PCase> {};

TEST_P(PostOracle, EveryFaceAndFamilyWithinTheFp32BoundsOfFloat64InSpecOrder) {
  expect_driver_passes(PostDriverWithSpecOrder(), GetParam(), GetParam().name());
}

std::vector<PCase> oracle_cases() {
  std::vector<PCase> out;
  uint64_t seed = 1;
  for (int64_t N : {1, 2, 3, 4, 5, 8, 13})
    for (int64_t D : {1, 15, 17, 64, 300})
      for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
        PCase c;
        c.N = N, c.D = D, c.dtype = dtype, c.S = 3, c.seed = seed++;
        c.h_res = seed % 4 != 0;
        c.grad_x_fp32 = seed % 3 == 0;
        out.push_back(c);
      }
  PCase bsnd = {.B = 2, .S = 7, .bsnd = true, .N = 4, .D = 257, .dtype = DType::bf16, .h_res = true, .grad_x_fp32 = true, .seed = 500};
  out.push_back(bsnd);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Cases, PostOracle, ::testing::ValuesIn(oracle_cases()),
                         [](const ::testing::TestParamInfo<PCase>& i) { return i.param.name(); });

// Zeros of both signs everywhere: the sign of every zero result is the SPEC order's
// (each sum from its first term), on every family.
TEST(PostSpecOrder, SignedZerosFollowTheOrderOnEveryFamily) {
  for (mhc::Isa isa : available_families())
    for (bool h_res : {true, false}) {
      PCase c = {.B = 1, .S = 3, .N = 4, .D = 20, .dtype = DType::bf16, .h_res = h_res, .grad_x_fp32 = true, .seed = 3};
      Bag b = make_bag(c);
      for (const char* name : {"x", "h_out", "grad_out"})
        for (int64_t i = 0; i < b[name].numel(); ++i) b[name].set(i, i % 3 == 0 ? 0.0 : -0.0);
      if (h_res)
        for (int64_t i = 0; i < b["h_res"].numel(); ++i) b["h_res"].set(i, i % 2 ? -0.0 : 0.25);
      ASSERT_TRUE(forward(b, options_for(isa)).ok());
      ASSERT_TRUE(backward(b, options_for(isa)).ok());
      check_spec_order(b, c, family_name(isa) + (h_res ? " h_res" : " identity"));
    }
}

// ------------------------------------------------------------------ H transposed

// N = 3, D = 2, exact small values: out_j = Σ_i H[i, j] x_i (H TRANSPOSED, SPEC §11).
// With the paper's H·x instead, out_0 would be 1·x0 + 2·x1 + 0·x2 = (9, 18), not (129, 258):
// every expectation below differs between the two.
TEST(PostTranspose, HEntersTransposedForwardAndBackward) {
  const float Hm[3][3] = {{1, 2, 0}, {0, 1, 4}, {8, 0, 1}};  // not symmetric
  const float xm[3][2] = {{1, 2}, {4, 8}, {16, 32}};  // sums: integers below 256, exact in bf16
  const float gm[3][2] = {{1, -1}, {3, 0.5f}, {-4, 1}};
  for (mhc::Isa isa : available_families())
    for (DType dtype : {DType::fp32, DType::bf16}) {
      SCOPED_TRACE(family_name(isa) + " " + dtype_name(dtype));
      PCase c;
      c.S = 1, c.N = 3, c.D = 2, c.dtype = dtype;
      Bag b = make_bag(c);
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) b["h_res"].set(i * 3 + j, Hm[i][j]);
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t d = 0; d < 2; ++d) b["x"].set(i * 2 + d, xm[i][d]), b["grad_out"].set(i * 2 + d, gm[i][d]);
      for (int64_t j = 0; j < 3; ++j) b["h_post"].set(j, 0.5 * double(j));
      b["h_out"].set(0, 2), b["h_out"].set(1, -2);
      ASSERT_TRUE(forward(b, options_for(isa)).ok());
      ASSERT_TRUE(backward(b, options_for(isa)).ok());
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t d = 0; d < 2; ++d) {
          double transposed = 0.5 * double(j) * (d == 0 ? 2 : -2), untransposed = transposed;
          for (int64_t i = 0; i < 3; ++i) transposed += Hm[i][j] * xm[i][d], untransposed += Hm[j][i] * xm[i][d];
          ASSERT_NE(transposed, untransposed);
          EXPECT_EQ(b["out"].get(j * 2 + d), transposed) << "out (" << j << "," << d << ")";
        }
      // Backward of out_j = Σ_i H[i,j] x_i: grad_x_i = Σ_j H[i,j] g_j, grad_H[i,j] = <x_i, g_j>.
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t d = 0; d < 2; ++d) {
          double want = 0, other = 0;
          for (int64_t j = 0; j < 3; ++j) want += Hm[i][j] * gm[j][d], other += Hm[j][i] * gm[j][d];
          ASSERT_NE(want, other);
          EXPECT_EQ(b["grad_x"].get(i * 2 + d), want) << "grad_x (" << i << "," << d << ")";
        }
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          const double want = xm[i][0] * gm[j][0] + xm[i][1] * gm[j][1];
          EXPECT_EQ(b["grad_h_res"].get(i * 3 + j), want) << "grad_h_res (" << i << "," << j << ")";
        }
    }
}

// ------------------------------------------------------------------ variants of the backward

TEST(PostBackward, Fp32GradXIsTheUnroundedSumAndGradHResIsOptional) {
  for (mhc::Isa isa : available_families())
    for (DType dtype : {DType::bf16, DType::fp16})
      for (bool h_res : {true, false}) {
        SCOPED_TRACE(family_name(isa) + " " + dtype_name(dtype) + (h_res ? " h_res" : " identity"));
        PCase c = {.B = 1, .S = 9, .N = 4, .D = 100, .dtype = dtype, .h_res = h_res, .grad_x_fp32 = false, .seed = 77};
        PCase c32 = c;
        c32.grad_x_fp32 = true;
        Bag a = run_both(c, options_for(isa)), b32 = run_both(c32, options_for(isa));
        for (int64_t i = 0; i < a["grad_x"].numel(); ++i)
          ASSERT_EQ(a["grad_x"].get(i), rne_to(dtype, float(b32["grad_x"].get(i)))) << "element " << i;
        for (const char* name : {"out", "grad_h_res", "grad_h_out", "grad_h_post"}) EXPECT_EQ(a[name].raw(), b32[name].raw()) << name;
        // Without grad_h_res: the other outputs' bits, grad_h_res untouched.
        Bag n = make_bag(c);
        const std::vector<uint8_t> untouched = n["grad_h_res"].buffer.snapshot();
        ASSERT_TRUE(backward(n, options_for(isa), false).ok());
        EXPECT_TRUE(n["grad_h_res"].buffer.snapshot() == untouched);
        for (const char* name : {"grad_x", "grad_h_out", "grad_h_post"}) EXPECT_EQ(n[name].raw(), a[name].raw()) << name;
      }
}

}  // namespace
}  // namespace mhc_test::layer
