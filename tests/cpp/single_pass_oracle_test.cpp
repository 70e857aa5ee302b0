// DeepSeek-V4.1's operators (SPEC §14) against references:
//   - MhcPreSinglePass and its backward, MhcCollapse and its backward, through every
//     face on every family, within the bounds of the float64 references
//     (driver/pre_single_pass.hpp);
//   - with pre_mix = the token's own h_pre, the single pass is CANN's fused pair
//     (SPEC §12) bit for bit on every family but the reference: the forward, and the
//     backward given grad_h_pre = MhcPre's own g_pre (the sums grad_pre_mix returns).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "driver_check.hpp"
#include "single_pass_util.hpp"

namespace mhc_test::single_pass {
namespace {

std::vector<SCase> oracle_cases() {
  std::vector<SCase> cases;
  uint64_t seed = 100;
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
    for (bool first : {false, true})
      for (bool gamma : {false, true}) {
        SCase c;
        c.dtype = dtype, c.first_site = first, c.gamma = gamma, c.seed = ++seed;
        cases.push_back(c);
      }
  cases.push_back({.B = 2, .S = 3, .bsnd = true, .N = 4, .D = 37, .dtype = DType::bf16, .I = 7, .grad_x_post = true,
                   .flat = true, .seed = 121});
  cases.push_back({.B = 1, .S = 9, .N = 1, .D = 20, .dtype = DType::fp32, .seed = 122});
  cases.push_back({.B = 1, .S = 4, .N = 2, .D = 130, .dtype = DType::fp16, .I = 1, .grad_h_pre = false, .seed = 123});
  cases.push_back({.B = 1, .S = 3, .N = 6, .D = 24, .dtype = DType::bf16, .I = 20, .gamma = true,
                   .sinkhorn_eps = 1e-3, .seed = 124});
  cases.push_back({.B = 1, .S = 70, .N = 4, .D = 48, .dtype = DType::bf16, .seed = 125});  // more than a chunk
  cases.push_back({.B = 1, .S = 0, .N = 4, .D = 16, .dtype = DType::bf16, .seed = 126});   // T = 0
  return cases;
}

class SinglePassOracle : public ::testing::TestWithParam<SCase> {};
TEST_P(SinglePassOracle, EveryFaceAndFamilyWithinTheBoundsOfTheFloat64References) {
  expect_driver_passes(driver::PreSinglePassDriver(), GetParam(), GetParam().name());
}
INSTANTIATE_TEST_SUITE_P(Cases, SinglePassOracle, ::testing::ValuesIn(oracle_cases()),
                         [](const auto& info) { return info.param.name(); });

std::vector<driver::CollapseCase> collapse_cases() {
  return {{.N = 4, .D = 100, .dtype = DType::bf16},
          {.N = 4, .D = 64, .dtype = DType::fp16, .seed = 2},
          {.N = 3, .D = 17, .dtype = DType::fp32, .seed = 3},
          {.B = 2, .S = 3, .bsnd = true, .N = 1, .D = 40, .dtype = DType::bf16, .seed = 4},
          {.B = 1, .S = 0, .N = 4, .D = 8, .dtype = DType::bf16, .seed = 5}};
}
class CollapseOracle : public ::testing::TestWithParam<driver::CollapseCase> {};
TEST_P(CollapseOracle, EveryFaceAndFamilyWithinTheBoundsOfFloat64AndBitwiseAcrossFamilies) {
  expect_driver_passes(driver::CollapseDriver(), GetParam(), GetParam().name());
}
INSTANTIATE_TEST_SUITE_P(Cases, CollapseOracle, ::testing::ValuesIn(collapse_cases()),
                         [](const auto& info) { return info.param.name(); });

// ------------------------------------------------------------------ p = own h_pre: SPEC §12

TEST(SinglePassWithItsOwnHPre, IsTheFusedPairBitForBit) {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
    for (mhc::Isa isa : available_families()) {
      if (isa == mhc::Isa::reference) continue;  // it forms h_pre in float64
      SCOPED_TRACE(family_name(isa) + " " + dtype_name(dtype));
      const SCase c = {.B = 1, .S = 70, .N = 4, .D = 40, .dtype = dtype, .I = 20, .seed = 200};
      const mhc::Options o = options_for(c, isa);
      Bag b = make_bag(c);
      // CANN's fused pair, into "u_" tensors.
      for (const char* name : {"h_in", "h_pre", "h_post", "h_res", "inv_rms", "h_mix", "grad_x", "grad_phi",
                               "grad_alpha", "grad_bias"})
        b["u_" + std::string(name)] = b[name];
      b["norm_out"] = make_tensor(DType::fp32, {2 * c.I, c.T(), c.N, c.N}, kOutputFill);
      b["sum_out"] = make_tensor(DType::fp32, {2 * c.I, c.T(), c.N}, kOutputFill);
      mhc::Status s = mhc::pre_sinkhorn_forward(
          {b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), c.I},
          {b["u_h_in"].view(), b["u_h_post"].view(), b["u_h_res"].view(), b["u_inv_rms"].view(),
           b["u_h_mix"].view(), b["u_h_pre"].view(), b["norm_out"].view(), b["sum_out"].view()},
          o);
      ASSERT_TRUE(s.ok()) << s.message();
      s = mhc::pre_sinkhorn_backward({b["grad_h_in"].view(), b["grad_h_post"].view(), b["grad_h_res"].view(),
                                      b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(),
                                      b["u_h_pre"].view(), b["u_h_mix"].view(), b["u_inv_rms"].view(),
                                      b["sum_out"].view(), b["norm_out"].view()},
                                     {b["u_grad_x"].view(), b["u_grad_phi"].view(), b["u_grad_alpha"].view(),
                                      b["u_grad_bias"].view()},
                                     o);
      ASSERT_TRUE(s.ok()) << s.message();
      // The single pass carrying the fused pair's own h_pre.
      b["pre_mix"] = b["u_h_pre"];
      ASSERT_TRUE(forward(b, c, o).ok());
      for (const char* name : {"h_in", "h_pre", "h_post", "h_res", "inv_rms", "h_mix"})
        EXPECT_EQ(b[name].raw(), b["u_" + std::string(name)].raw()) << name;
      // grad_pre_mix is MhcPre's g_pre = sum_d v grad_h_in: fed back as grad_h_pre,
      // the backward is MhcPreBackward's.
      ASSERT_TRUE(backward(b, c, o).ok());
      b["grad_h_pre"] = b["grad_pre_mix"];
      ASSERT_TRUE(backward(b, c, o).ok());
      for (const char* name : {"grad_x", "grad_phi", "grad_alpha", "grad_bias"})
        EXPECT_EQ(b[name].raw(), b["u_" + std::string(name)].raw()) << name;
    }
}

// A site that collapsed with its own h_pre (V4's form) would fail here: h_in is the
// collapse with the carried pre-mix, which is far from h_pre.
TEST(SinglePassCollapse, UsesTheCarriedPreMixNotItsOwnHPre) {
  const SCase c = {.B = 1, .S = 6, .N = 4, .D = 32, .dtype = DType::fp32, .seed = 210};
  for (mhc::Isa isa : available_families()) {
    SCOPED_TRACE(family_name(isa));
    Bag b = run_case(c, options_for(c, isa));
    Bag own = b;
    own["h"] = make_tensor(DType::fp32, tok(c, {c.D}), kOutputFill);
    own["carried"] = make_tensor(DType::fp32, tok(c, {c.D}), kOutputFill);
    ASSERT_TRUE(mhc::collapse_forward({b["x"].view(), b["h_pre"].view()}, {own["h"].view()}, options_for(c, isa)).ok());
    ASSERT_TRUE(
        mhc::collapse_forward({b["x"].view(), b["pre_mix"].view()}, {own["carried"].view()}, options_for(c, isa)).ok());
    EXPECT_NE(b["h_in"].raw(), own["h"].raw());
    double worst = 0;
    for (int64_t i = 0; i < b["h_in"].numel(); ++i)
      worst = std::max(worst, std::fabs(b["h_in"].get(i) - own["carried"].get(i)) /
                                  (1e-6 + std::fabs(own["carried"].get(i))));
    EXPECT_LT(worst, 1e-5);
  }
}

}  // namespace
}  // namespace mhc_test::single_pass
