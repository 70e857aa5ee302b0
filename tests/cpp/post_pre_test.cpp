// MhcPostPre and its backward (SPEC §15), both variants, on every kernel family
// this build and CPU run: bitwise equal to the unfused chain (MhcPost, then
// MhcPre + MhcSinkhorn for V4 or MhcPreSinglePass for V4.1; backward: the pre's
// backward with grad_x_next as its grad_x_post, then MhcPostBackward); the same
// bits at 1, 2, 3 threads and in strided views; validation named in this
// operator's words. Agreement with float64 autograd is tests/python/test_post_pre.py's.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "layer_util.hpp"
#include "test_util.hpp"

namespace mhc_test::post_pre {
namespace {

using layer::family_name;

struct Case {
  int64_t B = 1, S = 9;
  bool bsnd = false;
  int64_t N = 4, D = 40;
  DType dtype = DType::bf16;
  bool single_pass = true;
  bool gamma = false, h_res = true, pre_mix = true, grad_x_next = true, grad_h_pre = true;
  DType grad_x_dtype = DType::fp32;  // of grad_x and grad_x_next
  int64_t I = 20;
  double sinkhorn_eps = 1e-6;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  int64_t F() const { return 2 * N + N * N; }
  std::string name() const {
    return std::string(single_pass ? "V41" : "V4") + "_N" + std::to_string(N) + "_D" + std::to_string(D) + "_T" +
           std::to_string(T()) + (bsnd ? "_bsnd" : "") + "_" + dtype_name(dtype) + (gamma ? "_gamma" : "") +
           (h_res ? "" : "_identity") + (pre_mix ? "" : "_nopremix") + (grad_x_next ? "" : "_nogradxnext") +
           (grad_h_pre ? "" : "_nogradhpre") + "_gx" + dtype_name(grad_x_dtype);
  }
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

Shape tok(const Case& c, std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); }

Bag make_bag(const Case& c) {
  Bag b;
  Rng rng(c.seed * 7919 + 3);
  const int64_t N = c.N, D = c.D, K = N * D, F = c.F();
  b["x"] = make_tensor(c.dtype, tok(c, {N, D}));
  fill_normal(b["x"], rng, 1.0);
  if (c.h_res) {
    b["h_res"] = make_tensor(DType::fp32, tok(c, {N, N}));
    fill_uniform(b["h_res"], rng, 0.0, 0.5);
  }
  b["h_out"] = make_tensor(c.dtype, tok(c, {D}));
  fill_normal(b["h_out"], rng, 1.0);
  b["h_post"] = make_tensor(DType::fp32, tok(c, {N}));
  fill_uniform(b["h_post"], rng, 0.0, 2.0);
  b["phi"] = make_tensor(DType::fp32, {F, K});
  fill_uniform(b["phi"], rng, -2.0 / std::sqrt(double(K)), 2.0 / std::sqrt(double(K)));
  b["alpha"] = make_tensor(DType::fp32, {3});
  fill_uniform(b["alpha"], rng, 0.25, 1.5);
  b["bias"] = make_tensor(DType::fp32, {F});
  fill_uniform(b["bias"], rng, -1, 1);
  if (c.gamma) {
    b["gamma"] = make_tensor(DType::fp32, {N, D});
    fill_uniform(b["gamma"], rng, 0.5, 1.5);
  }
  if (c.single_pass && c.pre_mix) {
    b["pre_mix"] = make_tensor(DType::fp32, tok(c, {N}));
    fill_uniform(b["pre_mix"], rng, 0.05, 1.0);
  }
  if (c.grad_x_next) {
    b["grad_x_next"] = make_tensor(c.grad_x_dtype, tok(c, {N, D}));
    fill_normal(b["grad_x_next"], rng, 1.0);
  }
  b["grad_h_in"] = make_tensor(c.dtype, tok(c, {D}));
  fill_normal(b["grad_h_in"], rng, 1.0);
  if (c.grad_h_pre) {
    b["grad_h_pre"] = make_tensor(DType::fp32, tok(c, {N}));
    fill_normal(b["grad_h_pre"], rng, 1.0);
  }
  b["grad_h_post_next"] = make_tensor(DType::fp32, tok(c, {N}));
  fill_normal(b["grad_h_post_next"], rng, 1.0);
  b["grad_h_res_next"] = make_tensor(DType::fp32, tok(c, {N, N}));
  fill_normal(b["grad_h_res_next"], rng, 1.0);
  for (const std::string p : {"", "u_"}) {
    b[p + "x_next"] = make_tensor(c.dtype, tok(c, {N, D}), kOutputFill);
    b[p + "h_in"] = make_tensor(c.dtype, tok(c, {D}), kOutputFill);
    b[p + "h_pre"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
    b[p + "h_post_next"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
    b[p + "h_res_next"] = make_tensor(DType::fp32, tok(c, {N, N}), kOutputFill);
    b[p + "inv_rms"] = make_tensor(DType::fp32, tok(c, {}), kOutputFill);
    b[p + "h_mix"] = make_tensor(DType::fp32, tok(c, {F}), kOutputFill);
    b[p + "grad_x"] = make_tensor(c.grad_x_dtype, tok(c, {N, D}), kOutputFill);
    if (c.h_res) b[p + "grad_h_res"] = make_tensor(DType::fp32, tok(c, {N, N}), kOutputFill);
    b[p + "grad_h_out"] = make_tensor(c.dtype, tok(c, {D}), kOutputFill);
    b[p + "grad_h_post"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
    if (c.single_pass && c.pre_mix) b[p + "grad_pre_mix"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
    b[p + "grad_phi"] = make_tensor(DType::fp32, {F, K}, kOutputFill);
    b[p + "grad_alpha"] = make_tensor(DType::fp32, {3}, kOutputFill);
    b[p + "grad_bias"] = make_tensor(DType::fp32, {F}, kOutputFill);
    if (c.gamma) b[p + "grad_gamma"] = make_tensor(DType::fp32, {N, D}, kOutputFill);
  }
  b["u_z"] = make_tensor(DType::fp32, tok(c, {N, N}), kOutputFill);
  b["u_grad_z"] = make_tensor(DType::fp32, tok(c, {N, N}), kOutputFill);
  b["u_grad_x_next"] = make_tensor(c.dtype, tok(c, {N, D}), kOutputFill);
  return b;
}

std::optional<TensorView> maybe(Bag& b, const std::string& name) {
  if (!b.t.count(name) || !b[name].present()) return std::nullopt;
  return b[name].view();
}

const std::vector<std::string> kForwardOutputs = {"x_next", "h_in", "h_pre", "h_post_next", "h_res_next", "inv_rms",
                                                  "h_mix"};
std::vector<std::string> backward_outputs(const Case& c) {
  std::vector<std::string> names = {"grad_x", "grad_h_out", "grad_h_post", "grad_phi", "grad_alpha", "grad_bias"};
  if (c.h_res) names.push_back("grad_h_res");
  if (c.single_pass && c.pre_mix) names.push_back("grad_pre_mix");
  if (c.gamma) names.push_back("grad_gamma");
  return names;
}

mhc::Options options_for(mhc::Isa isa, int threads = 0) {
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  return o;
}

mhc::Status fused(Bag& b, const Case& c, const mhc::Options& o) {
  mhc::Status s = mhc::post_pre_forward(
      {b["x"].view(), maybe(b, "h_res"), b["h_out"].view(), b["h_post"].view(), b["phi"].view(), b["alpha"].view(),
       b["bias"].view(), maybe(b, "gamma"), maybe(b, "pre_mix"), c.single_pass ? 1 : 0, c.sinkhorn_eps, c.I},
      {b["x_next"].view(), b["h_in"].view(), b["h_pre"].view(), b["h_post_next"].view(), b["h_res_next"].view(),
       b["inv_rms"].view(), b["h_mix"].view()},
      o);
  if (!s.ok()) return s;
  return mhc::post_pre_backward(
      {b["x"].view(), maybe(b, "h_res"), b["h_out"].view(), b["h_post"].view(), b["phi"].view(), b["alpha"].view(),
       b["bias"].view(), maybe(b, "gamma"), maybe(b, "pre_mix"), b["x_next"].view(), maybe(b, "grad_x_next"),
       b["grad_h_in"].view(), maybe(b, "grad_h_pre"), b["grad_h_post_next"].view(), b["grad_h_res_next"].view(),
       b["inv_rms"].view(), b["h_mix"].view(), b["h_pre"].view(), b["h_post_next"].view(), c.single_pass ? 1 : 0,
       c.sinkhorn_eps, c.I},
      {b["grad_x"].view(), maybe(b, "grad_h_res"), b["grad_h_out"].view(), b["grad_h_post"].view(),
       maybe(b, "grad_pre_mix"), b["grad_phi"].view(), b["grad_alpha"].view(), b["grad_bias"].view(),
       maybe(b, "grad_gamma")},
      o);
}

// SPEC §15's definition, operator by operator, into the "u_" tensors.
void unfused(Bag& b, const Case& c, const mhc::Options& o) {
  mhc::Status s = mhc::post_forward({b["x"].view(), maybe(b, "h_res"), b["h_out"].view(), b["h_post"].view()},
                                    {b["u_x_next"].view()}, o);
  ASSERT_TRUE(s.ok()) << s.message();
  if (c.single_pass) {
    s = mhc::pre_single_pass_forward({b["u_x_next"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(),
                                      maybe(b, "gamma"), maybe(b, "pre_mix"), c.sinkhorn_eps, c.I},
                                     {b["u_h_in"].view(), b["u_h_pre"].view(), b["u_h_post_next"].view(),
                                      b["u_h_res_next"].view(), b["u_inv_rms"].view(), b["u_h_mix"].view()},
                                     o);
    ASSERT_TRUE(s.ok()) << s.message();
    s = mhc::pre_single_pass_backward(
        {b["u_x_next"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), maybe(b, "gamma"),
         maybe(b, "pre_mix"), b["grad_h_in"].view(), maybe(b, "grad_h_pre"), b["grad_h_post_next"].view(),
         b["grad_h_res_next"].view(), b["u_inv_rms"].view(), b["u_h_mix"].view(), b["u_h_pre"].view(),
         b["u_h_post_next"].view(), maybe(b, "grad_x_next"), c.sinkhorn_eps, c.I},
        {b["u_grad_x_next"].view(), maybe(b, "u_grad_pre_mix"), b["u_grad_phi"].view(), b["u_grad_alpha"].view(),
         b["u_grad_bias"].view(), maybe(b, "u_grad_gamma")},
        o);
    ASSERT_TRUE(s.ok()) << s.message();
  } else {
    s = mhc::pre_forward({b["u_x_next"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), maybe(b, "gamma")},
                         {b["u_h_in"].view(), b["u_h_post_next"].view(), b["u_z"].view(), b["u_inv_rms"].view(),
                          b["u_h_mix"].view(), b["u_h_pre"].view()},
                         o);
    ASSERT_TRUE(s.ok()) << s.message();
    s = mhc::sinkhorn_forward({b["u_z"].view(), c.sinkhorn_eps, c.I}, {b["u_h_res_next"].view(), {}, {}}, o);
    ASSERT_TRUE(s.ok()) << s.message();
    mhc::SinkhornBackwardInputs sin;
    sin.grad_h_res = b["grad_h_res_next"].view();
    sin.z = b["u_z"].view();
    sin.eps = c.sinkhorn_eps;
    sin.num_iters = c.I;
    s = mhc::sinkhorn_backward(sin, {b["u_grad_z"].view()}, o);
    ASSERT_TRUE(s.ok()) << s.message();
    s = mhc::pre_backward({b["u_x_next"].view(), b["phi"].view(), b["alpha"].view(), b["grad_h_in"].view(),
                           b["grad_h_post_next"].view(), b["u_grad_z"].view(), b["u_inv_rms"].view(),
                           b["u_h_mix"].view(), b["u_h_pre"].view(), b["u_h_post_next"].view(), maybe(b, "gamma"),
                           maybe(b, "grad_x_next")},
                          {b["u_grad_x_next"].view(), b["u_grad_phi"].view(), b["u_grad_alpha"].view(),
                           b["u_grad_bias"].view(), maybe(b, "u_grad_gamma")},
                          o);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  s = mhc::post_backward({b["u_grad_x_next"].view(), b["x"].view(), maybe(b, "h_res"), b["h_out"].view(),
                          b["h_post"].view()},
                         {b["u_grad_x"].view(), maybe(b, "u_grad_h_res"), b["u_grad_h_out"].view(),
                          b["u_grad_h_post"].view()},
                         o);
  ASSERT_TRUE(s.ok()) << s.message();
}

std::vector<Case> chain_cases() {
  std::vector<Case> cases;
  uint64_t seed = 10;
  for (bool single_pass : {true, false})
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      Case c;
      c.single_pass = single_pass, c.dtype = dtype, c.seed = ++seed;
      c.grad_h_pre = single_pass;  // V4's chain has no grad_h_pre (MhcPreBackward sums its own)
      cases.push_back(c);
    }
  cases.push_back({.B = 2, .S = 5, .bsnd = true, .N = 4, .D = 33, .dtype = DType::bf16, .single_pass = true,
                   .gamma = true, .h_res = false, .grad_x_dtype = DType::bf16, .I = 7, .sinkhorn_eps = 1e-3,
                   .seed = 21});
  cases.push_back({.B = 1, .S = 70, .N = 4, .D = 24, .dtype = DType::bf16, .single_pass = true, .pre_mix = false,
                   .grad_x_next = false, .seed = 22});
  cases.push_back({.B = 1, .S = 70, .N = 2, .D = 48, .dtype = DType::fp16, .single_pass = false, .gamma = true,
                   .grad_x_next = false, .grad_h_pre = false, .seed = 23});
  cases.push_back({.B = 1, .S = 0, .N = 4, .D = 8, .dtype = DType::bf16, .seed = 24});
  return cases;
}

class PostPreChain : public ::testing::TestWithParam<Case> {};
TEST_P(PostPreChain, BitwiseEqualsTheUnfusedChain) {
  const Case c = GetParam();
  for (mhc::Isa isa : available_families()) {
    // V4's chain runs the Sinkhorn's backward from the forward's z_res; the fused
    // backward forms z_res again from the caches in fp32, which is the reference
    // family's float64 z_res only up to its rounding.
    const bool backward_bitwise = c.single_pass || isa != mhc::Isa::reference;
    SCOPED_TRACE(family_name(isa));
    Bag b = make_bag(c);
    const mhc::Status s = fused(b, c, options_for(isa));
    ASSERT_TRUE(s.ok()) << s.message();
    unfused(b, c, options_for(isa));
    for (const std::string& name : kForwardOutputs) EXPECT_EQ(b[name].raw(), b["u_" + name].raw()) << name;
    if (backward_bitwise) {
      for (const std::string& name : backward_outputs(c)) EXPECT_EQ(b[name].raw(), b["u_" + name].raw()) << name;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Cases, PostPreChain, ::testing::ValuesIn(chain_cases()),
                         [](const auto& info) { return info.param.name(); });

TEST(PostPreDeterminism, ThreadCountsAndStridedViewsGiveTheSameBits) {
  for (bool single_pass : {true, false}) {
    const Case c = {.B = 2, .S = 40, .bsnd = true, .N = 4, .D = 24, .dtype = DType::bf16, .single_pass = single_pass,
                    .gamma = true, .grad_h_pre = true, .seed = 30};
    Rng rng(31);
    for (mhc::Isa isa : available_families()) {
      Bag want = make_bag(c);
      ASSERT_TRUE(fused(want, c, options_for(isa, 1)).ok());
      for (int threads : {2, 3}) {
        SCOPED_TRACE(family_name(isa) + " threads " + std::to_string(threads));
        Bag b = make_bag(c);
        if (threads == 3)
          for (auto& [name, t] : b.t)
            if (name.rfind("u_", 0) != 0) t = relaid(t, Layout::padded_rows, rng);
        const mhc::Status s = fused(b, c, options_for(isa, threads));
        ASSERT_TRUE(s.ok()) << s.message();
        for (const std::string& name : kForwardOutputs) EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
        for (const std::string& name : backward_outputs(c)) EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
      }
    }
  }
}

// Each message names this operator's tensors, and a rejected call writes nothing.
TEST(PostPreValidation, MessagesNameThisOperatorsTensors) {
  struct Rule {
    const char* what;
    Case c;
    std::function<void(Bag&)> mutate;
    const char* message;
  };
  const Case base = {.S = 3, .D = 16};
  Case v4 = base;
  v4.single_pass = false;
  const std::vector<Rule> rules = {
      {"x_next shape", base, [](Bag& b) { b["x_next"] = make_tensor(DType::bf16, {3, 4, 15}, kOutputFill); },
       "x_next: expected"},
      {"h_post_next shape", base, [](Bag& b) { b["h_post_next"] = make_tensor(DType::fp32, {3, 5}, kOutputFill); },
       "h_post_next: expected"},
      {"h_res_next shape", base, [](Bag& b) { b["h_res_next"] = make_tensor(DType::fp32, {3, 4, 5}, kOutputFill); },
       "h_res_next: expected"},
      {"h_post shape", base, [](Bag& b) { b["h_post"] = make_tensor(DType::fp32, {3, 5}); }, "h_post: expected"},
      {"V4 with pre_mix", v4, [](Bag& b) { b["pre_mix"] = make_tensor(DType::fp32, {3, 4}); }, "pre_mix: expected absent"},
      {"grad_x_next dtype", base, [](Bag& b) { b["grad_x_next"] = make_tensor(DType::fp16, {3, 4, 16}); },
       "grad_x_next: expected"},
      {"grad_h_res_next shape", base,
       [](Bag& b) { b["grad_h_res_next"] = make_tensor(DType::fp32, {3, 4, 3}); }, "grad_h_res_next: expected"},
      {"V4 with grad_pre_mix", v4,
       [](Bag& b) { b["grad_pre_mix"] = make_tensor(DType::fp32, {3, 4}, kOutputFill); },
       "grad_pre_mix: expected absent"},
  };
  for (const Rule& r : rules) {
    SCOPED_TRACE(r.what);
    Bag b = make_bag(r.c);
    r.mutate(b);
    const auto before = b.snapshot();
    const mhc::Status s = fused(b, r.c, {});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message().rfind(r.message, 0), 0u) << s.message();
    if (std::string(r.message).rfind("grad", 0) != 0) {  // backward rules: the forward ran first
      EXPECT_TRUE(b.snapshot() == before) << "a rejected call wrote memory";
    }
  }
  // single_pass names its two values.
  Bag b = make_bag(base);
  const mhc::Status s = mhc::post_pre_forward(
      {b["x"].view(), maybe(b, "h_res"), b["h_out"].view(), b["h_post"].view(), b["phi"].view(), b["alpha"].view(),
       b["bias"].view(), std::nullopt, maybe(b, "pre_mix"), 2, 1e-6, 20},
      {b["x_next"].view(), b["h_in"].view(), b["h_pre"].view(), b["h_post_next"].view(), b["h_res_next"].view(),
       b["inv_rms"].view(), b["h_mix"].view()},
      {});
  EXPECT_EQ(s.message(), "single_pass: expected 0 (V4) or 1 (V4.1), got 2");
}

}  // namespace
}  // namespace mhc_test::post_pre
