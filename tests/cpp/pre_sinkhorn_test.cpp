// MhcPreSinkhorn and its backward (SPEC §12), CANN's fused pair, through the C++
// and the C face:
//   - bitwise equal to the unfused chain (pre_forward without gamma, then
//     sinkhorn_forward on z_res with eps = hc_eps; sinkhorn_backward from the
//     caches, then pre_backward with the forward's h_post) on every family but the
//     reference (whose MhcPre runs in float64, while the fused backward recomputes
//     h_post in fp32 as the fp32 families' forward forms it);
//   - against a float64 chain written from SPEC's formulas (layer_util.hpp);
//   - 1, 2, 3, 7 threads; a token alone or anywhere in a batch; strided views;
//     [B,S,..] as [T,..]; flat h_res [.., N*N] as [.., N, N]; an empty batch;
//   - every validation rule with its message, nothing written on an error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "layer_util.hpp"

namespace mhc_test::layer {
namespace {

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
void PrintTo(const FCase& c, std::ostream* os) { *os << c.name(); }

Shape tok(const FCase& c, std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); }
Shape residual(const FCase& c) { return c.flat ? tok(c, {c.N * c.N}) : tok(c, {c.N, c.N}); }
Shape cache_shape(const FCase& c, bool matrix) {
  Shape s{2 * c.I};
  const Shape t = c.bsnd ? Shape{c.B, c.S} : Shape{c.T()};
  s.insert(s.end(), t.begin(), t.end());
  if (matrix) s.push_back(c.N);
  s.push_back(c.pitch);
  return s;
}

// Inputs, outputs, and the unfused chain's outputs ("u_" names).
Bag make_bag(const FCase& c) {
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

mhc::Options options_for(const FCase& c, mhc::Isa isa, int threads = 0) {
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  o.hc_eps = c.hc_eps;
  o.norm_eps = c.norm_eps;
  return o;
}

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

mhc::Status fused_forward(Bag& b, const FCase& c, const mhc::Options& o) {
  mhc::PreSinkhornForwardOutputs out{b["h_in"].view(), b["h_post"].view(), b["h_res"].view(), {}, {}, {}, {}, {}};
  if (c.pitch > 0) {
    out.inv_rms = b["inv_rms"].view(), out.h_mix = b["h_mix"].view(), out.h_pre = b["h_pre"].view();
    out.norm_out = b["norm_out"].view(), out.sum_out = b["sum_out"].view();
  }
  return mhc::pre_sinkhorn_forward({b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), c.I}, out, o);
}
mhc::Status fused_backward(Bag& b, const mhc::Options& o) {
  const mhc::PreSinkhornBackwardInputs in{b["grad_h_in"].view(), b["grad_h_post"].view(), b["grad_h_res"].view(),
                                          b["x"].view(),         b["phi"].view(),         b["alpha"].view(),
                                          b["bias"].view(),      b["h_pre"].view(),       b["h_mix"].view(),
                                          b["inv_rms"].view(),   b["sum_out"].view(),     b["norm_out"].view()};
  return mhc::pre_sinkhorn_backward(in, {b["grad_x"].view(), b["grad_phi"].view(), b["grad_alpha"].view(), b["grad_bias"].view()}, o);
}
Bag run_fused(const FCase& c, const mhc::Options& o) {
  Bag b = make_bag(c);
  mhc::Status s = fused_forward(b, c, o);
  EXPECT_TRUE(s.ok()) << s.message();
  if (c.pitch > 0) {
    s = fused_backward(b, o);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return b;
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

const std::vector<std::string> kForwardOutputs = {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre", "norm_out", "sum_out"};
const std::vector<std::string> kBackwardOutputs = {"grad_x", "grad_phi", "grad_alpha", "grad_bias"};
std::vector<std::string> all_outputs() {
  std::vector<std::string> a = kForwardOutputs;
  a.insert(a.end(), kBackwardOutputs.begin(), kBackwardOutputs.end());
  return a;
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
    std::map<std::string, std::vector<double>> want;
    std::vector<double> grad_z(size_t(T * NN));
    const double eps32 = double(float(c.hc_eps));
    for (int64_t t = 0; t < T; ++t) {
      const Pre64 p = pre_forward64(&x[size_t(t * K)], phi.data(), alpha.data(), bias.data(), N, D, c.norm_eps, c.hc_eps);
      const Sinkhorn64 s = sinkhorn_forward64(p.z_res.data(), N, c.I, eps32);
      auto put = [&](const std::string& n, const std::vector<double>& v) { want[n].insert(want[n].end(), v.begin(), v.end()); };
      put("h_in", p.h_in);
      put("h_post", p.h_post);
      put("h_res", s.H());
      put("inv_rms", {p.r});
      put("h_mix", p.m);
      put("h_pre", p.h_pre);
      const std::vector<double> gz = sinkhorn_backward64(s, &ghres[size_t(t * NN)]);
      std::copy(gz.begin(), gz.end(), grad_z.begin() + t * NN);
    }
    const PreGrads64 g = pre_backward64(T, N, D, x, phi, alpha, bias, ghin, ghpost, grad_z, c.norm_eps, c.hc_eps);
    want["grad_x"] = g.grad_x, want["grad_phi"] = g.grad_phi, want["grad_alpha"] = g.grad_alpha, want["grad_bias"] = g.grad_bias;
    for (const auto& [name, w] : want) {
      const double err = normwise_relative_error(b[name].values(), w);
      worst[name] = std::max(worst[name], err);
      EXPECT_LE(err, bound_for(name, c.dtype)) << name;
    }
    (void)F;
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

// ------------------------------------------------------------------ determinism and invariance

TEST(FusedDeterminism, ThreadCountsGiveTheSameBits) {
  const FCase c = {.B = 1, .S = 150, .N = 4, .D = 64, .dtype = DType::bf16, .I = 20, .pitch = 8, .seed = 20};
  for (mhc::Isa isa : available_families()) {
    Bag one = run_fused(c, options_for(c, isa, 1));
    for (int threads : {2, 3, 7}) {
      Bag many = run_fused(c, options_for(c, isa, threads));
      for (const std::string& name : all_outputs())
        EXPECT_EQ(many[name].raw(), one[name].raw()) << name << " " << family_name(isa) << " threads " << threads;
    }
  }
}

TEST(FusedDeterminism, ATokensOutputsAreTheSameAloneAndAnywhereInABatch) {
  const FCase batch = {.B = 1, .S = 130, .N = 4, .D = 64, .dtype = DType::bf16, .I = 20, .pitch = 4, .seed = 21};
  FCase alone = batch;
  alone.S = 1;
  for (mhc::Isa isa : available_families()) {
    Bag big = run_fused(batch, options_for(batch, isa, 2));
    for (int64_t pos : {0, 15, 64, 129}) {
      SCOPED_TRACE(family_name(isa) + " token " + std::to_string(pos));
      Bag one = make_bag(alone);
      for (const char* name : {"x", "grad_h_in", "grad_h_post", "grad_h_res"}) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) one[name].set(e, big[name].get(pos * per + e));
      }
      for (const char* name : {"phi", "alpha", "bias"}) one[name] = big[name];
      ASSERT_TRUE(fused_forward(one, alone, options_for(alone, isa, 2)).ok());
      ASSERT_TRUE(fused_backward(one, options_for(alone, isa, 2)).ok());
      for (const char* name : {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre", "grad_x"}) {
        const int64_t per = one[name].numel();
        for (int64_t e = 0; e < per; ++e) ASSERT_EQ(one[name].bits(e), big[name].bits(pos * per + e)) << name;
      }
      for (const char* name : {"norm_out", "sum_out"}) {  // [2I][T][per]
        const int64_t per = one[name].numel() / 40;
        for (int64_t k = 0; k < 40; ++k)
          for (int64_t e = 0; e < per; ++e)
            ASSERT_EQ(one[name].bits(k * per + e), big[name].bits((k * 130 + pos) * per + e)) << name;
      }
    }
  }
}

TEST(FusedLayouts, BsndTndAndFlatResidualGiveTheSameBits) {
  const FCase bsnd = {.B = 3, .S = 7, .bsnd = true, .N = 4, .D = 33, .dtype = DType::fp16, .I = 5, .pitch = 8, .seed = 30};
  FCase tnd = bsnd, flat = bsnd;
  tnd.bsnd = false;
  flat.flat = true;
  for (mhc::Isa isa : available_families()) {
    Bag a = run_fused(bsnd, options_for(bsnd, isa)), b = run_fused(tnd, options_for(tnd, isa)),
        f = run_fused(flat, options_for(flat, isa));
    for (const std::string& name : all_outputs()) {
      EXPECT_EQ(a[name].raw(), b[name].raw()) << name << " BSND vs TND " << family_name(isa);
      EXPECT_EQ(a[name].raw(), f[name].raw()) << name << " [..,N,N] vs [..,N*N] " << family_name(isa);
    }
  }
}

// CANN's inv_rms [.., 1] (SPEC §12) as the pre operators' [..]: the same bits.
TEST(FusedLayouts, CannsUnitInvRmsDimGivesTheSameBits) {
  const FCase c = {.B = 2, .S = 5, .bsnd = true, .N = 4, .D = 16, .dtype = DType::bf16, .I = 3, .pitch = 4, .seed = 33};
  for (mhc::Isa isa : available_families()) {
    Bag want = run_fused(c, options_for(c, isa));
    Bag b = make_bag(c);
    b["inv_rms"].shape = {2, 5, 1};
    b["inv_rms"].strides = {5, 1, 1};
    const mhc::Status s = fused_forward(b, c, options_for(c, isa));
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(fused_backward(b, options_for(c, isa)).ok());
    for (const std::string& name : all_outputs()) EXPECT_EQ(b[name].raw(), want[name].raw()) << name << " " << family_name(isa);
  }
}

TEST(FusedLayouts, StridedViewsGiveTheContiguousBits) {
  constexpr uint8_t kGap = 0x5a;
  const FCase c = {.B = 2, .S = 11, .bsnd = true, .N = 4, .D = 24, .dtype = DType::bf16, .I = 4, .pitch = 4, .seed = 31};
  Rng rng(32);
  for (mhc::Isa isa : available_families())
    for (Layout layout : {Layout::every_other, Layout::padded_rows, Layout::permuted}) {
      SCOPED_TRACE(family_name(isa) + " layout " + std::to_string(int(layout)));
      Bag want = run_fused(c, options_for(c, isa));
      Bag b = make_bag(c);
      for (auto& [name, t] : b.t)
        if (name != "norm_out" && name != "sum_out" && name.rfind("u_", 0) != 0) t = relaid(t, layout, rng, kGap);
      ASSERT_TRUE(fused_forward(b, c, options_for(c, isa)).ok());
      ASSERT_TRUE(fused_backward(b, options_for(c, isa)).ok());
      for (const std::string& name : all_outputs()) {
        EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
        EXPECT_TRUE(gaps_untouched(b[name], kGap) || name == "norm_out" || name == "sum_out") << name;
      }
    }
}

TEST(FusedEdges, EmptyBatchSucceedsAndWritesNothing) {
  for (bool bsnd : {false, true}) {
    const FCase c = {.B = bsnd ? 2 : 1, .S = 0, .bsnd = bsnd, .N = 4, .D = 8, .dtype = DType::bf16, .I = 3, .pitch = 4, .seed = 1};
    Bag b = make_bag(c);
    const auto before = b.snapshot();
    for (mhc::Isa isa : available_families()) {
      EXPECT_TRUE(fused_forward(b, c, options_for(c, isa)).ok());
      const mhc::Status s = fused_backward(b, options_for(c, isa));
      EXPECT_TRUE(s.ok()) << s.message();
    }
    // grad_phi, grad_alpha, grad_bias are sums over no tokens: zeros, as pre_backward writes them.
    Bag u = make_bag(c);
    const mhc::PreBackwardInputs bin{u["x"].view(), u["phi"].view(), u["alpha"].view(), u["grad_h_in"].view(),
                                     u["grad_h_post"].view(), u["grad_h_res"].view(), u["inv_rms"].view(),
                                     u["h_mix"].view(), u["h_pre"].view(), u["h_post"].view(), std::nullopt, std::nullopt};
    ASSERT_TRUE(mhc::pre_backward(bin, {u["grad_x"].view(), u["grad_phi"].view(), u["grad_alpha"].view(), u["grad_bias"].view(), std::nullopt}, {}).ok());
    // A regression test: at 31e625f ops/pre_sinkhorn's run_backward returned before
    // pre_backward when T == 0, leaving these three as they were (the 0xa5 fill)
    // where the chain SPEC §12 defines writes zeros (fixed in a5c0da3).
    for (const char* name : {"grad_phi", "grad_alpha", "grad_bias"})
      EXPECT_EQ(b[name].raw(), u[name].raw())
          << "BUG: " << name << " of an empty batch is not written by pre_sinkhorn_backward; the unfused chain writes 0";
    for (const char* name : {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre", "norm_out", "sum_out", "grad_x"})
      EXPECT_TRUE(b[name].buffer.snapshot() == before[std::distance(b.t.begin(), b.t.find(name))]) << name;
  }
}

// ------------------------------------------------------------------ validation

// Base: x [B,S,N,D] = [2,3,4,8] bf16, phi [24,32], alpha [3], bias [24], I = 3,
// h_res [2,3,4,4], norm_out [6,2,3,4,4], sum_out [6,2,3,4].
const FCase kBase = {.B = 2, .S = 3, .bsnd = true, .N = 4, .D = 8, .dtype = DType::bf16, .I = 3, .pitch = 4, .seed = 7};
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct FwdCall {
  Bag bag;
  mhc::PreSinkhornForwardInputs in;
  mhc::PreSinkhornForwardOutputs out;
  mhc::Options options;
  static std::unique_ptr<FwdCall> make() {
    auto k = std::make_unique<FwdCall>();
    Bag& b = k->bag;
    b = make_bag(kBase);
    k->in = {b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), kBase.I};
    k->out = {b["h_in"].view(),  b["h_post"].view(), b["h_res"].view(),    b["inv_rms"].view(),
              b["h_mix"].view(), b["h_pre"].view(),  b["norm_out"].view(), b["sum_out"].view()};
    return k;
  }
  mhc::Status run() const { return mhc::pre_sinkhorn_forward(in, out, options); }
  int run_c() const {
    const mhc_options o = to_c(options);
    const CTensor x(in.x), phi(in.phi), alpha(in.alpha), bias(in.bias), h_in(out.h_in), h_post(out.h_post),
        h_res(out.h_res), inv_rms(out.inv_rms), h_mix(out.h_mix), h_pre(out.h_pre), norm(out.norm_out), sum(out.sum_out);
    return mhc_pre_sinkhorn_forward(x.ptr, phi.ptr, alpha.ptr, bias.ptr, in.num_iters, h_in.ptr, h_post.ptr, h_res.ptr,
                                    inv_rms.ptr, h_mix.ptr, h_pre.ptr, norm.ptr, sum.ptr, &o);
  }
};

struct BwdCall {
  Bag bag;
  mhc::PreSinkhornBackwardInputs in;
  mhc::PreSinkhornBackwardOutputs out;
  mhc::Options options;
  static std::unique_ptr<BwdCall> make() {
    auto k = std::make_unique<BwdCall>();
    Bag& b = k->bag;
    b = make_bag(kBase);
    EXPECT_TRUE(fused_forward(b, kBase, {}).ok());
    k->in = {b["grad_h_in"].view(), b["grad_h_post"].view(), b["grad_h_res"].view(), b["x"].view(),
             b["phi"].view(),       b["alpha"].view(),       b["bias"].view(),       b["h_pre"].view(),
             b["h_mix"].view(),     b["inv_rms"].view(),     b["sum_out"].view(),    b["norm_out"].view()};
    k->out = {b["grad_x"].view(), b["grad_phi"].view(), b["grad_alpha"].view(), b["grad_bias"].view()};
    return k;
  }
  mhc::Status run() const { return mhc::pre_sinkhorn_backward(in, out, options); }
  int run_c() const {
    const mhc_options o = to_c(options);
    const CTensor ghi(in.grad_h_in), ghp(in.grad_h_post), ghr(in.grad_h_res), x(in.x), phi(in.phi), alpha(in.alpha),
        bias(in.bias), h_pre(in.h_pre), h_mix(in.h_mix), inv_rms(in.inv_rms), sum(in.sum_out), norm(in.norm_out),
        gx(out.grad_x), gphi(out.grad_phi), galpha(out.grad_alpha), gbias(out.grad_bias);
    return mhc_pre_sinkhorn_backward(ghi.ptr, ghp.ptr, ghr.ptr, x.ptr, phi.ptr, alpha.ptr, bias.ptr, h_pre.ptr,
                                     h_mix.ptr, inv_rms.ptr, sum.ptr, norm.ptr, gx.ptr, gphi.ptr, galpha.ptr, gbias.ptr, &o);
  }
};

std::vector<LayerRule<FwdCall>> forward_rules() {
  using K = FwdCall;
  return {
      null_rule<K>("x_null_data", [](K& k) { k.in.x.data = nullptr; }, "x: data pointer is null"),
      shape_rule<K>("alpha_2_entries", [](K& k) {
        k.in.alpha = reshaped(k.in.alpha, {2});
        k.in.phi = reshaped(k.in.phi, {8, 32});
        k.in.bias = reshaped(k.in.bias, {8});
        k.out.h_mix = reshaped(*k.out.h_mix, {2, 3, 8});
      }, "alpha: expected [3] (the fused pair has the residual branch), got [2]"),
      null_rule<K>("caches_without_inv_rms", [](K& k) { k.out.inv_rms.reset(); }, "inv_rms: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("caches_without_h_mix", [](K& k) { k.out.h_mix.reset(); }, "h_mix: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("caches_without_h_pre", [](K& k) { k.out.h_pre.reset(); }, "h_pre: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("caches_without_norm_out", [](K& k) { k.out.norm_out.reset(); }, "norm_out: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("caches_without_sum_out", [](K& k) { k.out.sum_out.reset(); }, "sum_out: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      null_rule<K>("only_the_sinkhorn_caches", [](K& k) { k.out.inv_rms.reset(); k.out.h_mix.reset(); k.out.h_pre.reset(); }, "inv_rms: the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing"),
      value_rule<K>("num_iters_0", [](K& k) { k.in.num_iters = 0; }, "num_iters: expected >= 1, got 0"),
      value_rule<K>("hc_eps_nan", [](K& k) { k.options.hc_eps = kNaN; }, "hc_eps: expected a finite value >= 0, got nan"),
      value_rule<K>("hc_eps_negative", [](K& k) { k.options.hc_eps = -1e-3; }, "hc_eps: expected a finite value >= 0, got -0.001000"),
      value_rule<K>("norm_eps_inf", [](K& k) { k.options.norm_eps = INFINITY; }, "norm_eps: expected a finite value >= 0, got inf"),
      shape_rule<K>("h_res_N_3", [](K& k) { k.out.h_res = k.bag.add(DType::fp32, {2, 3, 3, 3}); }, "h_res: expected [B,S,N,N]=[2,3,4,4] or [B,S,R]=[2,3,16], got [2,3,3,3]"),
      shape_rule<K>("norm_out_N_mismatch", [](K& k) { k.out.norm_out = k.bag.add(DType::fp32, {6, 2, 3, 5, 5}); }, "norm_out: expected [2I,B,S,N,P] with N=4, P>=N, 2I=6, token dims [2,3], got [6,2,3,5,5]"),
      shape_rule<K>("norm_out_2I_not_num_iters", [](K& k) { k.out.norm_out = k.bag.add(DType::fp32, {8, 2, 3, 4, 4}); }, "norm_out: expected [2I,B,S,N,P] with N=4, P>=N, 2I=6, token dims [2,3], got [8,2,3,4,4]"),
      shape_rule<K>("sum_out_pitch_differs", [](K& k) { k.out.sum_out = k.bag.add(DType::fp32, {6, 2, 3, 8}); }, "sum_out: expected [2I,B,S,P] with N=4, P=4, 2I=6, token dims [2,3], got [6,2,3,8]"),
      layout_rule<K>("sum_out_not_contiguous", [](K& k) { k.out.sum_out = restrided(*k.out.sum_out, {48, 24, 8, 2}); }, "sum_out: expected a contiguous tensor (the caches' layout is the library's), got strides [48,24,8,2]"),
      layout_rule<K>("norm_out_overlaps_h_mix", [](K& k) {
        TensorView pool = k.bag.add(DType::fp32, {6 * 2 * 3 * 4 * 4});
        k.out.norm_out = reshaped(pool, {6, 2, 3, 4, 4});
        k.out.h_mix = reshaped(pool, {2, 3, 24});
      }, "norm_out: output memory overlaps output h_mix"),
      layout_rule<K>("sum_out_overlaps_x", [](K& k) { k.out.sum_out = reshaped(retyped(k.in.x, DType::fp32), {6, 2, 3, 4}); }, "sum_out: output memory overlaps input x"),
      layout_rule<K>("h_res_overlaps_h_post", [](K& k) {
        TensorView pool = k.bag.add(DType::fp32, {96});
        k.out.h_res = reshaped(pool, {2, 3, 4, 4});
        k.out.h_post = reshaped(pool, {2, 3, 4});
      }, "h_res: output memory overlaps output h_post"),
  };
}

std::vector<LayerRule<BwdCall>> backward_rules() {
  using K = BwdCall;
  return {
      null_rule<K>("grad_h_in_null_data", [](K& k) { k.in.grad_h_in.data = nullptr; }, "grad_h_in: data pointer is null"),
      shape_rule<K>("bwd_alpha_2_entries", [](K& k) {
        k.in.alpha = reshaped(k.in.alpha, {2});
        k.in.phi = reshaped(k.in.phi, {8, 32});
        k.in.bias = reshaped(k.in.bias, {8});
        k.in.h_mix = reshaped(k.in.h_mix, {2, 3, 8});
        k.out.grad_phi = reshaped(k.out.grad_phi, {8, 32});
        k.out.grad_alpha = reshaped(k.out.grad_alpha, {2});
        k.out.grad_bias = reshaped(k.out.grad_bias, {8});
      }, "alpha: expected [3] (the fused pair has the residual branch), got [2]"),
      shape_rule<K>("bias_F_plus_1", [](K& k) { k.in.bias = k.bag.add(DType::fp32, {25}); }, "bias: expected [F]=[24], got [25]"),
      dtype_rule<K>("bias_bf16", [](K& k) { k.in.bias.dtype = DType::bf16; }, "bias: expected dtype fp32, got bf16"),
      shape_rule<K>("grad_h_res_N_5", [](K& k) { k.in.grad_h_res = k.bag.add(DType::fp32, {2, 3, 5, 5}); }, "grad_h_res: expected [B,S,N,N]=[2,3,4,4] or [B,S,R]=[2,3,16], got [2,3,5,5]"),
      shape_rule<K>("grad_h_post_N_5", [](K& k) { k.in.grad_h_post = k.bag.add(DType::fp32, {2, 3, 5}); }, "grad_h_post: expected [B,S,N]=[2,3,4], got [2,3,5]"),
      shape_rule<K>("bwd_norm_out_N_mismatch", [](K& k) { k.in.norm_out = k.bag.add(DType::fp32, {6, 2, 3, 5, 5}); }, "norm_out: expected [2I,B,S,N,P] with N=4, P>=N, token dims [2,3], got [6,2,3,5,5]"),
      shape_rule<K>("sum_out_2I_differs", [](K& k) { k.in.sum_out = k.bag.add(DType::fp32, {4, 2, 3, 4}); }, "sum_out: expected [2I,B,S,P] with N=4, P=4, 2I=6, token dims [2,3], got [4,2,3,4]"),
      shape_rule<K>("bwd_sum_out_pitch_differs", [](K& k) { k.in.sum_out = k.bag.add(DType::fp32, {6, 2, 3, 8}); }, "sum_out: expected [2I,B,S,P] with N=4, P=4, 2I=6, token dims [2,3], got [6,2,3,8]"),
      layout_rule<K>("bwd_norm_out_not_contiguous", [](K& k) { k.in.norm_out = restrided(k.in.norm_out, {96, 48, 16, 4, 2}); }, "norm_out: expected a contiguous tensor (the caches' layout is the library's), got strides [96,48,16,4,2]"),
      value_rule<K>("bwd_hc_eps_nan", [](K& k) { k.options.hc_eps = kNaN; }, "hc_eps: expected a finite value >= 0, got nan"),
      layout_rule<K>("grad_x_overlaps_norm_out", [](K& k) { k.out.grad_x = reshaped(retyped(k.in.norm_out, DType::bf16), {2, 3, 4, 8}); }, "grad_x: output memory overlaps input norm_out"),
      layout_rule<K>("grad_bias_overlaps_bias", [](K& k) { k.out.grad_bias = k.in.bias; }, "grad_bias: output memory overlaps input bias"),
      layout_rule<K>("grad_phi_overlaps_sum_out", [](K& k) {
        TensorView pool = k.bag.add(DType::fp32, {24 * 32});
        k.out.grad_phi = reshaped(pool, {24, 32});
        k.in.sum_out = reshaped(pool, {6, 2, 3, 4});
      }, "grad_phi: output memory overlaps input sum_out"),
  };
}

class FusedForwardRule : public ::testing::TestWithParam<LayerRule<FwdCall>> {};
TEST_P(FusedForwardRule, RejectedWithItsMessageAndNothingWritten) { expect_layer_rejected(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Rules, FusedForwardRule, ::testing::ValuesIn(forward_rules()), layer_rule_name<FwdCall>);

class FusedBackwardRule : public ::testing::TestWithParam<LayerRule<BwdCall>> {};
TEST_P(FusedBackwardRule, RejectedWithItsMessageAndNothingWritten) { expect_layer_rejected(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Rules, FusedBackwardRule, ::testing::ValuesIn(backward_rules()), layer_rule_name<BwdCall>);

// A regression test. At 31e625f, phi with F = 2N + N! rows (the permutation variant,
// R = N! = 24 at N = 4) passed MhcPre's validation and the fused pair only checked
// alpha's entries: the call was accepted, MhcPre wrote 24 logits a token into the
// driver's buffer and the Sinkhorn read it as [T, 4, 4] contiguous (16 a token), so
// every token after the first was normalised from the wrong logits and h_res
// [.., 24] got 16 of its 24 entries (fixed in a5c0da3). There is no N x N matrix
// to normalise: the call must be rejected (161002) naming phi (or h_res).
TEST(FusedValidation, PermutationRowsAreRejected) {
  auto k = FwdCall::make();
  k->in.phi = k->bag.add(DType::fp32, {32, 32});
  k->in.bias = k->bag.add(DType::fp32, {32});
  k->out.h_mix = k->bag.add(DType::fp32, {2, 3, 32});
  k->out.h_res = k->bag.add(DType::fp32, {2, 3, 24});
  {
    Rng rng(5);
    for (Tensor& t : k->bag.extra)
      if (t.shape == Shape{32, 32} || t.shape == Shape{32})
        for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(-0.2, 0.2));
  }
  const auto before = k->bag.snapshot();
  const mhc::Status s = k->run();
  EXPECT_EQ(s.code(), mhc::StatusCode::invalid_argument)
      << "BUG: pre_sinkhorn_forward accepted phi [2N+N!, K] = [32,32] with h_res [2,3,24]; got \"" << s.message() << "\"";
  EXPECT_TRUE(s.message().rfind("phi: ", 0) == 0 || s.message().rfind("h_res: ", 0) == 0) << s.message();
  EXPECT_TRUE(k->bag.snapshot() == before) << "BUG: the accepted call wrote the outputs";
  if (s.ok()) {  // show what it computed: token 1's H is not the Sinkhorn of any 4x4 block of its logits
    const TensorView h_res = k->out.h_res;
    const float* H = static_cast<const float*>(h_res.data);
    std::vector<float> z(6 * 24);
    const mhc::PreForwardOutputs pout{k->bag["u_h_in"].view(), k->bag["u_h_post"].view(),
                                      TensorView(z.data(), DType::fp32, {2, 3, 24}), {}, {}, {}};
    ASSERT_TRUE(mhc::pre_forward({k->in.x, k->in.phi, k->in.alpha, k->in.bias, std::nullopt}, pout, {}).ok());
    std::vector<float> H1(16);
    ASSERT_TRUE(mhc::sinkhorn_forward({TensorView(z.data() + 24, DType::fp32, {1, 4, 4}), 1e-6, 3},
                                      {TensorView(H1.data(), DType::fp32, {1, 4, 4}), {}, {}}, {}).ok());
    int same = 0;
    for (int e = 0; e < 16; ++e) same += H[24 + e] == H1[size_t(e)];
    ADD_FAILURE() << "token 1: h_res[1][0..15] equals the Sinkhorn of its first 16 logits in " << same
                  << " of 16 entries; h_res[1][16..23] (never written) = " << H[24 + 16] << " ...";
  }
}

// ------------------------------------------------------------------ the C face

TEST(FusedCApi, NullRequiredPointersAreNamed) {
  {
    auto k = FwdCall::make();
    const auto before = k->bag.snapshot();
    const char* names[] = {"x", "phi", "alpha", "bias", "h_in", "h_post", "h_res"};
    for (int which = 0; which < 7; ++which) {
      mhc_tensor t[7] = {to_c(k->in.x), to_c(k->in.phi), to_c(k->in.alpha), to_c(k->in.bias),
                         to_c(k->out.h_in), to_c(k->out.h_post), to_c(k->out.h_res)};
      const mhc_tensor* p[7];
      for (int i = 0; i < 7; ++i) p[i] = i == which ? nullptr : &t[i];
      EXPECT_EQ(mhc_pre_sinkhorn_forward(p[0], p[1], p[2], p[3], 3, p[4], p[5], p[6], nullptr, nullptr, nullptr,
                                         nullptr, nullptr, nullptr), MHC_ERR_NULLPTR);
      EXPECT_EQ(std::string(mhc_last_error()), std::string(names[which]) + ": required, got NULL");
      EXPECT_EQ(mhc_last_error_kind(), MHC_ERROR_NULL);
    }
    EXPECT_TRUE(k->bag.snapshot() == before);
  }
  auto k = BwdCall::make();
  const auto before = k->bag.snapshot();
  const char* names[] = {"grad_h_in", "grad_h_post", "grad_h_res", "x", "phi", "alpha", "bias", "h_pre",
                         "h_mix", "inv_rms", "sum_out", "norm_out", "grad_x", "grad_phi", "grad_alpha", "grad_bias"};
  for (int which = 0; which < 16; ++which) {
    mhc_tensor t[16] = {to_c(k->in.grad_h_in), to_c(k->in.grad_h_post), to_c(k->in.grad_h_res), to_c(k->in.x),
                        to_c(k->in.phi), to_c(k->in.alpha), to_c(k->in.bias), to_c(k->in.h_pre), to_c(k->in.h_mix),
                        to_c(k->in.inv_rms), to_c(k->in.sum_out), to_c(k->in.norm_out), to_c(k->out.grad_x),
                        to_c(k->out.grad_phi), to_c(k->out.grad_alpha), to_c(k->out.grad_bias)};
    const mhc_tensor* p[16];
    for (int i = 0; i < 16; ++i) p[i] = i == which ? nullptr : &t[i];
    EXPECT_EQ(mhc_pre_sinkhorn_backward(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11],
                                        p[12], p[13], p[14], p[15], nullptr), MHC_ERR_NULLPTR);
    EXPECT_EQ(std::string(mhc_last_error()), std::string(names[which]) + ": required, got NULL");
  }
  EXPECT_TRUE(k->bag.snapshot() == before);
}

TEST(FusedCApi, ResultsEqualTheCppFace) {
  auto cpp = FwdCall::make(), c = FwdCall::make();
  ASSERT_TRUE(cpp->run().ok());
  ASSERT_EQ(c->run_c(), MHC_OK) << mhc_last_error();
  for (const std::string& name : kForwardOutputs) EXPECT_EQ(c->bag[name].raw(), cpp->bag[name].raw()) << name;
  auto bcpp = BwdCall::make(), bc = BwdCall::make();
  ASSERT_TRUE(bcpp->run().ok());
  ASSERT_EQ(bc->run_c(), MHC_OK) << mhc_last_error();
  for (const std::string& name : kBackwardOutputs) EXPECT_EQ(bc->bag[name].raw(), bcpp->bag[name].raw()) << name;
}

}  // namespace
}  // namespace mhc_test::layer
