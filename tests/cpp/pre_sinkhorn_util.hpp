// Shared by the tests of MhcPreSinkhorn and its backward (SPEC §12;
// pre_sinkhorn_*_test.cpp): a case's shapes, its tensors (and the unfused chain's,
// "u_" names), and the fused calls that run it.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "layer_util.hpp"

namespace mhc_test::layer {

struct FCase {
  int64_t B = 1, S = 5;
  bool bsnd = false;
  int64_t N = 4, D = 64;
  DType dtype = DType::bf16;
  int64_t I = 20;
  int64_t pitch = 4;  // of the Sinkhorn's caches; 0: no caches
  bool flat = false;  // h_res, grad_h_res as [.., N*N]
  double hc_eps = 1e-6, norm_eps = 1e-6;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  int64_t K() const { return N * D; }
  int64_t F() const { return 2 * N + N * N; }
  std::string name() const {
    return "N" + std::to_string(N) + "_D" + std::to_string(D) + (bsnd ? "_B" + std::to_string(B) + "S" : "_T") +
           std::to_string(bsnd ? S : T()) + "_" + dtype_name(dtype) + "_I" + std::to_string(I) + "_P" +
           std::to_string(pitch) + (flat ? "_flat" : "") + (hc_eps != 1e-6 ? "_hceps" : "");
  }
};
inline void PrintTo(const FCase& c, std::ostream* os) { *os << c.name(); }

inline Shape tok(const FCase& c, std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); }
inline Shape residual(const FCase& c) { return c.flat ? tok(c, {c.N * c.N}) : tok(c, {c.N, c.N}); }
inline Shape cache_shape(const FCase& c, bool matrix) {
  Shape s{2 * c.I};
  const Shape t = c.bsnd ? Shape{c.B, c.S} : Shape{c.T()};
  s.insert(s.end(), t.begin(), t.end());
  if (matrix) s.push_back(c.N);
  s.push_back(c.pitch);
  return s;
}

// Inputs, outputs, and the unfused chain's outputs ("u_" names).
inline Bag make_bag(const FCase& c) {
  Bag b;
  Rng rng(c.seed * 6364136223846793005ull + 1442695040888963407ull);
  const int64_t N = c.N, D = c.D, K = c.K(), F = c.F();
  b["x"] = make_tensor(c.dtype, tok(c, {N, D}));
  for (int64_t i = 0; i < b["x"].numel(); ++i) b["x"].set(i, rng.normal() * (0.5 + rng.uniform()));
  b["phi"] = make_tensor(DType::fp32, {F, K});
  fill_uniform(b["phi"], rng, -2.0 / std::sqrt(double(K)), 2.0 / std::sqrt(double(K)));
  b["alpha"] = make_tensor(DType::fp32, {3});
  fill_uniform(b["alpha"], rng, 0.25, 1.5);
  b["bias"] = make_tensor(DType::fp32, {F});
  fill_uniform(b["bias"], rng, -1, 1);
  b["grad_h_in"] = make_tensor(c.dtype, tok(c, {D}));
  fill_normal(b["grad_h_in"], rng, 1.0);
  b["grad_h_post"] = make_tensor(DType::fp32, tok(c, {N}));
  fill_normal(b["grad_h_post"], rng, 1.0);
  b["grad_h_res"] = make_tensor(DType::fp32, residual(c));
  fill_normal(b["grad_h_res"], rng, 1.0);
  for (const std::string p : {"", "u_"}) {
    b[p + "h_in"] = make_tensor(c.dtype, tok(c, {D}), kOutputFill);
    b[p + "h_post"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
    b[p + "h_res"] = make_tensor(DType::fp32, residual(c), kOutputFill);
    b[p + "inv_rms"] = make_tensor(DType::fp32, tok(c, {}), kOutputFill);
    b[p + "h_mix"] = make_tensor(DType::fp32, tok(c, {F}), kOutputFill);
    b[p + "h_pre"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
    if (c.pitch > 0) {
      b[p + "norm_out"] = make_tensor(DType::fp32, cache_shape(c, true), kOutputFill);
      b[p + "sum_out"] = make_tensor(DType::fp32, cache_shape(c, false), kOutputFill);
    }
    b[p + "grad_x"] = make_tensor(c.dtype, tok(c, {N, D}), kOutputFill);
    b[p + "grad_phi"] = make_tensor(DType::fp32, {F, K}, kOutputFill);
    b[p + "grad_alpha"] = make_tensor(DType::fp32, {3}, kOutputFill);
    b[p + "grad_bias"] = make_tensor(DType::fp32, {F}, kOutputFill);
  }
  b["u_z_res"] = make_tensor(DType::fp32, residual(c), kOutputFill);
  b["u_grad_z"] = make_tensor(DType::fp32, residual(c), kOutputFill);
  return b;
}

inline mhc::Options options_for(const FCase& c, mhc::Isa isa, int threads = 0) {
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  o.hc_eps = c.hc_eps;
  o.norm_eps = c.norm_eps;
  return o;
}

inline mhc::Status fused_forward(Bag& b, const FCase& c, const mhc::Options& o) {
  mhc::PreSinkhornForwardOutputs out{b["h_in"].view(), b["h_post"].view(), b["h_res"].view(), {}, {}, {}, {}, {}};
  if (c.pitch > 0) {
    out.inv_rms = b["inv_rms"].view(), out.h_mix = b["h_mix"].view(), out.h_pre = b["h_pre"].view();
    out.norm_out = b["norm_out"].view(), out.sum_out = b["sum_out"].view();
  }
  return mhc::pre_sinkhorn_forward({b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), c.I}, out, o);
}
inline mhc::Status fused_backward(Bag& b, const mhc::Options& o) {
  const mhc::PreSinkhornBackwardInputs in{b["grad_h_in"].view(), b["grad_h_post"].view(), b["grad_h_res"].view(),
                                          b["x"].view(),         b["phi"].view(),         b["alpha"].view(),
                                          b["bias"].view(),      b["h_pre"].view(),       b["h_mix"].view(),
                                          b["inv_rms"].view(),   b["sum_out"].view(),     b["norm_out"].view()};
  return mhc::pre_sinkhorn_backward(in, {b["grad_x"].view(), b["grad_phi"].view(), b["grad_alpha"].view(), b["grad_bias"].view()}, o);
}
inline Bag run_fused(const FCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  mhc::Status s = fused_forward(b, c, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (c.pitch > 0) {
    s = fused_backward(b, o);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return b;
}

inline const std::vector<std::string> kForwardOutputs = {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre", "norm_out", "sum_out"};
inline const std::vector<std::string> kBackwardOutputs = {"grad_x", "grad_phi", "grad_alpha", "grad_bias"};
inline std::vector<std::string> all_outputs() {
  std::vector<std::string> a = kForwardOutputs;
  a.insert(a.end(), kBackwardOutputs.begin(), kBackwardOutputs.end());
  return a;
}

}  // namespace mhc_test::layer
