// MhcPreSinkhorn and its backward (SPEC §12), CANN's fused pair, against references:
//   - bitwise equal to the unfused chain (pre_forward without gamma, then
//     sinkhorn_forward on z_res with eps = hc_eps; sinkhorn_backward from the
//     caches, then pre_backward with the forward's h_post) on every family but the
//     reference (whose MhcPre runs in float64, while the fused backward recomputes
//     h_post in fp32 as the fp32 families' forward forms it);
//   - through every face, against the float64 references' chain (driver/pre_sinkhorn.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "driver_check.hpp"
#include "pre_sinkhorn_util.hpp"

namespace mhc_test::layer {
namespace {

// [.., N*N] as [.., N, N] (the Sinkhorn's form), or as it is.
TensorView as_matrices(TensorView v, const FCase& c) {
  if (!c.flat) return v;
  v.rank += 1;
  v.shape[v.rank - 2] = c.N;
  v.shape[v.rank - 1] = c.N;
  v.strides[v.rank - 2] = c.N;
  v.strides[v.rank - 1] = 1;
  return v;
}

// SPEC §12's definition, run as separate operators into the "u_" tensors.
void run_unfused(Bag& b, const FCase& c, const mhc::Options& o) {
  const mhc::PreForwardInputs pin{b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), std::nullopt};
  const mhc::PreForwardOutputs pout{b["u_h_in"].view(), b["u_h_post"].view(), b["u_z_res"].view(),
                                    b["u_inv_rms"].view(), b["u_h_mix"].view(), b["u_h_pre"].view()};
  mhc::Status s = mhc::pre_forward(pin, pout, o);
  ASSERT_TRUE(s.ok()) << s.message();
  s = mhc::sinkhorn_forward({as_matrices(b["u_z_res"].view(), c), o.hc_eps, c.I},
                            {as_matrices(b["u_h_res"].view(), c), b["u_norm_out"].view(), b["u_sum_out"].view()}, o);
  ASSERT_TRUE(s.ok()) << s.message();
  mhc::SinkhornBackwardInputs sin;
  sin.grad_h_res = as_matrices(b["grad_h_res"].view(), c);
  sin.norm_out = b["u_norm_out"].view();
  sin.sum_out = b["u_sum_out"].view();
  s = mhc::sinkhorn_backward(sin, {as_matrices(b["u_grad_z"].view(), c)}, o);
  ASSERT_TRUE(s.ok()) << s.message();
  const mhc::PreBackwardInputs bin{b["x"].view(),         b["phi"].view(),     b["alpha"].view(),
                                   b["grad_h_in"].view(), b["grad_h_post"].view(), b["u_grad_z"].view(),
                                   b["u_inv_rms"].view(), b["u_h_mix"].view(), b["u_h_pre"].view(),
                                   b["u_h_post"].view(),  std::nullopt,        std::nullopt};
  s = mhc::pre_backward(bin, {b["u_grad_x"].view(), b["u_grad_phi"].view(), b["u_grad_alpha"].view(), b["u_grad_bias"].view(), std::nullopt}, o);
  ASSERT_TRUE(s.ok()) << s.message();
}

// ------------------------------------------------------------------ fused == unfused

class FusedPair : public ::testing::TestWithParam<FCase> {};

TEST_P(FusedPair, BitwiseEqualsTheUnfusedChainOnEveryFamilyButTheReference) {
  const FCase c = GetParam();
  for (mhc::Isa isa : available_families()) {
    if (isa == mhc::Isa::reference) continue;
    SCOPED_TRACE(family_name(isa));
    const mhc::Options o = options_for(c, isa);
    Bag b = run_fused(c, o);
    run_unfused(b, c, o);
    for (const std::string& name : all_outputs())
      EXPECT_EQ(b[name].raw(), b["u_" + name].raw()) << name << ": fused != unfused";
  }
}

// ------------------------------------------------------------------ against float64

class FusedOracle : public ::testing::TestWithParam<FCase> {};

TEST_P(FusedOracle, EveryFaceAndFamilyWithinTheBoundsOfTheFloat64Chain) {
  expect_driver_passes(driver::PreSinkhornDriver(), GetParam(), GetParam().name());
}

std::vector<FCase> pair_cases() {
  std::vector<FCase> out;
  uint64_t seed = 1;
  for (int64_t N : {1, 2, 4, 6, 8})
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      FCase c;
      c.N = N, c.D = N == 4 ? 300 : 17, c.dtype = dtype, c.S = 37, c.seed = seed++;
      c.I = seed % 2 ? 20 : 3;
      c.pitch = seed % 3 ? N : 8 * ((N + 7) / 8);
      c.flat = seed % 4 == 0;
      out.push_back(c);
    }
  out.push_back({.B = 2, .S = 9, .bsnd = true, .N = 4, .D = 64, .dtype = DType::bf16, .I = 20, .pitch = 8, .flat = true,
                 .hc_eps = 1e-3, .norm_eps = 1e-5, .seed = 90});
  out.push_back({.B = 1, .S = 70, .N = 4, .D = 1, .dtype = DType::fp32, .I = 1, .pitch = 4, .seed = 91});
  return out;
}
INSTANTIATE_TEST_SUITE_P(Cases, FusedPair, ::testing::ValuesIn(pair_cases()),
                         [](const ::testing::TestParamInfo<FCase>& i) { return i.param.name(); });
INSTANTIATE_TEST_SUITE_P(Cases, FusedOracle, ::testing::ValuesIn(pair_cases()),
                         [](const ::testing::TestParamInfo<FCase>& i) { return i.param.name(); });

}  // namespace
}  // namespace mhc_test::layer
