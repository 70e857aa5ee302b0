// MhcPreSinkhorn and its backward (SPEC §12), CANN's fused pair, against references:
//   - bitwise equal to the unfused chain (pre_forward without gamma, then
//     sinkhorn_forward on z_res with eps = hc_eps; sinkhorn_backward from the
//     caches, then pre_backward with the forward's h_post) on every family but the
//     reference (whose MhcPre runs in float64, while the fused backward recomputes
//     h_post in fp32 as the fp32 families' forward forms it);
//   - against the float64 references' chain (kernels/reference: MhcPre, then the Sinkhorn).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/reference/reference.hpp"
#include "kernels/reference/sinkhorn.hpp"
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
//
// Bounds, normwise over the whole tensor (||got − f64|| / ||f64||): every fp32
// output is a short chain over K = N·D terms (the products phi·v, the sum of
// squares) and 2I Sinkhorn steps; with K <= 2400 and I <= 20 the fp32 error is a
// few 1e-6 at worst (measured below 1e-6), so 2e-5 leaves a wide margin. A
// 16-bit output (h_in, grad_x) adds its dtype's rounding: 2^-9 (bf16) or 2^-12
// (fp16) relative at most, bounded by 2^-8 and 2^-11. The backward of a 16-bit x
// uses the rounded h_in's inputs only through x, so the same bounds hold.
double bound_for(const std::string& name, DType dtype) {
  const bool rounded = name == "h_in" || name == "grad_x";
  if (!rounded || dtype == DType::fp32) return 2e-5;
  return dtype == DType::bf16 ? 0x1.0p-8 : 0x1.0p-11;
}

class FusedOracle : public ::testing::TestWithParam<FCase> {};

TEST_P(FusedOracle, WithinTheBoundsOfAFloat64ChainOnEveryFamily) {
  const FCase c = GetParam();
  const int64_t T = c.T(), N = c.N, D = c.D, K = c.K(), F = c.F(), NN = N * N;
  std::map<std::string, double> worst;
  for (mhc::Isa isa : available_families()) {
    SCOPED_TRACE(family_name(isa));
    Bag b = run_fused(c, options_for(c, isa));
    const std::vector<double> x = b["x"].values(), phi = b["phi"].values(), alpha = b["alpha"].values(),
                              bias = b["bias"].values(), ghin = b["grad_h_in"].values(),
                              ghpost = b["grad_h_post"].values(), ghres = b["grad_h_res"].values();
    namespace ref = mhc::kernels::reference;
    ref::ForwardInputs64 fin;
    fin.dims = {.T = T, .N = N, .D = D, .K = K, .F = F, .R = NN};
    fin.x = x, fin.phi = phi, fin.alpha = alpha, fin.bias = bias;
    fin.norm_eps = c.norm_eps, fin.hc_eps = c.hc_eps;
    const ref::ForwardOutputs64 pre = ref::forward(fin);
    std::map<std::string, std::vector<double>> want = {{"h_in", pre.h_in},   {"h_post", pre.h_post},
                                                       {"inv_rms", pre.inv_rms}, {"h_mix", pre.h_mix},
                                                       {"h_pre", pre.h_pre}};
    std::vector<double> grad_z(size_t(T * NN));
    const double eps32 = double(float(c.hc_eps));
    for (int64_t t = 0; t < T; ++t) {
      const ref::Sinkhorn64 s = ref::sinkhorn_forward(&pre.h_res[size_t(t * NN)], N, c.I, eps32);
      want["h_res"].insert(want["h_res"].end(), s.H().begin(), s.H().end());
      const std::vector<double> gz = ref::sinkhorn_backward(s, &ghres[size_t(t * NN)]);
      std::copy(gz.begin(), gz.end(), grad_z.begin() + t * NN);
    }
    ref::BackwardInputs64 bin;
    bin.dims = fin.dims;
    bin.x = x, bin.phi = phi, bin.alpha = alpha;
    bin.grad_h_in = ghin, bin.grad_h_post = ghpost, bin.grad_h_res = grad_z;
    bin.inv_rms = pre.inv_rms, bin.h_mix = pre.h_mix, bin.h_pre = pre.h_pre, bin.h_post = pre.h_post;
    bin.hc_eps = c.hc_eps;
    const ref::BackwardOutputs64 g = ref::backward(bin);
    want["grad_x"] = g.grad_x, want["grad_phi"] = g.grad_phi, want["grad_alpha"] = g.grad_alpha, want["grad_bias"] = g.grad_bias;
    for (const auto& [name, w] : want) {
      const double err = normwise_relative_error(b[name].values(), w);
      worst[name] = std::max(worst[name], err);
      EXPECT_LE(err, bound_for(name, c.dtype)) << name;
    }
  }
  std::string line;
  char buf[64];
  for (const auto& [name, e] : worst) std::snprintf(buf, sizeof buf, " %s %.3g", name.c_str(), e), line += buf;
  std::printf("[ measured ] %s normwise:%s\n", c.name().c_str(), line.c_str());
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
