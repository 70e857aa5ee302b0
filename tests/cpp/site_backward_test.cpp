// The site backward (SPEC §15), prepare and finish, both variants, on every kernel
// family this build and CPU run: bitwise equal to the same site run unfused
// (MhcPostBackward with an fp32 grad_x, itself checked against SPEC §11's fp32 order,
// then the site's pre backward with that grad_x as grad_x_post: pre_single_pass_backward
// for V4.1, sinkhorn_backward from z_res and pre_backward for V4), the caches from a
// real forward of the site and finish fed prepare's gradients; the same bits at 1, 2,
// 3 threads and in strided views; validation named in this operator's words, a
// rejected call writing nothing; the C functions' results equal to the C++ ones.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "layer_util.hpp"
#include "test_util.hpp"

namespace mhc_test::site_backward {
namespace {

using layer::family_name;

struct Case {
  int64_t B = 1, S = 9;
  bool bsnd = false;
  int64_t N = 4, D = 40;
  DType dtype = DType::bf16;
  bool single_pass = true;
  bool gamma = false, h_res = true, pre_mix = true, grad_x_next = true, grad_h_pre = true;
  int64_t I = 20;
  double sinkhorn_eps = 1e-6;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  int64_t F() const { return 2 * N + N * N; }
  bool has_pre_mix() const { return single_pass && pre_mix; }
  std::string name() const {
    return std::string(single_pass ? "V41" : "V4") + "_N" + std::to_string(N) + "_D" + std::to_string(D) + "_T" +
           std::to_string(T()) + (bsnd ? "_bsnd" : "") + "_" + dtype_name(dtype) + (gamma ? "_gamma" : "") +
           (h_res ? "" : "_identity") + (!single_pass || pre_mix ? "" : "_nopremix") + (grad_x_next ? "" : "_nogradxnext") +
           (grad_h_pre ? "" : "_nogradhpre");
  }
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

Shape tok(const Case& c, std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); }

std::optional<TensorView> maybe(Bag& b, const std::string& name) {
  if (!b.t.count(name) || !b[name].present()) return std::nullopt;
  return b[name].view();
}

mhc::Options options_for(mhc::Isa isa, int threads = 0) {
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  return o;
}

// The site's inputs, its forward's outputs (filled by run_forward) and the
// gradients' tensors: the fused ones plain, the unfused chain's with "u_".
Bag make_bag(const Case& c) {
  Bag b;
  Rng rng(c.seed * 7919 + 5);
  const int64_t N = c.N, D = c.D, K = N * D, F = c.F();
  b["x"] = make_tensor(c.dtype, tok(c, {N, D}));
  fill_normal(b["x"], rng, 1.0);
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
  if (c.has_pre_mix()) {
    b["pre_mix"] = make_tensor(DType::fp32, tok(c, {N}));
    fill_uniform(b["pre_mix"], rng, 0.05, 1.0);
  }
  b["h_out"] = make_tensor(c.dtype, tok(c, {D}));  // the sub-layer's output y
  fill_normal(b["h_out"], rng, 1.0);
  if (c.grad_x_next) {
    b["grad_x_next"] = make_tensor(c.dtype, tok(c, {N, D}));
    fill_normal(b["grad_x_next"], rng, 1.0);
  }
  b["grad_h_in"] = make_tensor(c.dtype, tok(c, {D}));
  fill_normal(b["grad_h_in"], rng, 1.0);
  if (c.grad_h_pre) {
    b["grad_h_pre"] = make_tensor(DType::fp32, tok(c, {N}));
    fill_normal(b["grad_h_pre"], rng, 1.0);
  }
  // Without grad_x_next there is no post backward: the pre side's dL/dh_post, dL/dH are given.
  b["given_grad_h_post"] = make_tensor(DType::fp32, tok(c, {N}));
  fill_normal(b["given_grad_h_post"], rng, 1.0);
  b["given_grad_h_res"] = make_tensor(DType::fp32, tok(c, {N, N}));
  fill_normal(b["given_grad_h_res"], rng, 1.0);
  b["h_in"] = make_tensor(c.dtype, tok(c, {D}), kOutputFill);
  b["h_pre"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
  b["h_post"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
  b["H"] = make_tensor(DType::fp32, tok(c, {N, N}), kOutputFill);
  b["z"] = make_tensor(DType::fp32, tok(c, {N, N}), kOutputFill);
  b["inv_rms"] = make_tensor(DType::fp32, tok(c, {}), kOutputFill);
  b["h_mix"] = make_tensor(DType::fp32, tok(c, {F}), kOutputFill);
  for (const std::string p : {"", "u_"}) {
    b[p + "grad_h_res"] = make_tensor(DType::fp32, tok(c, {N, N}), kOutputFill);
    b[p + "grad_h_out"] = make_tensor(c.dtype, tok(c, {D}), kOutputFill);
    b[p + "grad_h_post"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
    b[p + "grad_x"] = make_tensor(c.dtype, tok(c, {N, D}), kOutputFill);
    if (c.has_pre_mix()) b[p + "grad_pre_mix"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
    b[p + "grad_phi"] = make_tensor(DType::fp32, {F, K}, kOutputFill);
    b[p + "grad_alpha"] = make_tensor(DType::fp32, {3}, kOutputFill);
    b[p + "grad_bias"] = make_tensor(DType::fp32, {F}, kOutputFill);
    if (c.gamma) b[p + "grad_gamma"] = make_tensor(DType::fp32, {N, D}, kOutputFill);
  }
  b["u_post_grad_x"] = make_tensor(DType::fp32, tok(c, {N, D}), kOutputFill);  // the hand-off tensor
  b["u_grad_z"] = make_tensor(DType::fp32, tok(c, {N, N}), kOutputFill);
  return b;
}

// The site's forward on x (its caches, h_pre, h_post and H); the post's h_res is that H.
void run_forward(Bag& b, const Case& c, const mhc::Options& o) {
  mhc::Status s;
  if (c.single_pass) {
    s = mhc::pre_single_pass_forward({b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(),
                                      maybe(b, "gamma"), maybe(b, "pre_mix"), c.sinkhorn_eps, c.I},
                                     {b["h_in"].view(), b["h_pre"].view(), b["h_post"].view(), b["H"].view(),
                                      b["inv_rms"].view(), b["h_mix"].view()},
                                     o);
  } else {
    s = mhc::pre_forward({b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), maybe(b, "gamma")},
                         {b["h_in"].view(), b["h_post"].view(), b["z"].view(), b["inv_rms"].view(),
                          b["h_mix"].view(), b["h_pre"].view()},
                         o);
    ASSERT_TRUE(s.ok()) << s.message();
    s = mhc::sinkhorn_forward({b["z"].view(), c.sinkhorn_eps, c.I}, {b["H"].view(), {}, {}}, o);
  }
  ASSERT_TRUE(s.ok()) << s.message();
  if (c.h_res) b["h_res"] = b["H"];
}

// The pre side's dL/dh_post and dL/dH: the post backward's (prefix "" or "u_"), or the given ones.
std::string pre_grad(const Case& c, const std::string& prefix, const std::string& name) {
  return c.grad_x_next ? prefix + name : "given_" + name;
}

mhc::Status prepare(Bag& b, const mhc::Options& o) {
  return mhc::site_backward_prepare(
      {b["grad_x_next"].view(), b["x"].view(), maybe(b, "h_res"), b["h_out"].view(), b["h_post"].view()},
      {b["grad_h_res"].view(), b["grad_h_out"].view(), b["grad_h_post"].view()}, o);
}

mhc::SiteBackwardFinishInputs finish_inputs(Bag& b, const Case& c) {
  return {b["x"].view(),  b["phi"].view(),   b["alpha"].view(), b["bias"].view(), maybe(b, "gamma"),
          maybe(b, "pre_mix"), maybe(b, "h_res"), maybe(b, "grad_x_next"), b["grad_h_in"].view(),
          maybe(b, "grad_h_pre"), b[pre_grad(c, "", "grad_h_post")].view(), b[pre_grad(c, "", "grad_h_res")].view(),
          b["inv_rms"].view(), b["h_mix"].view(), b["h_pre"].view(), b["h_post"].view(), c.single_pass ? 1 : 0,
          c.sinkhorn_eps, c.I};
}
mhc::SiteBackwardFinishOutputs finish_outputs(Bag& b) {
  return {b["grad_x"].view(),    maybe(b, "grad_pre_mix"), b["grad_phi"].view(),
          b["grad_alpha"].view(), b["grad_bias"].view(),    maybe(b, "grad_gamma")};
}

// The fused site backward: prepare (when there is a grad_x_next), then finish.
mhc::Status fused(Bag& b, const Case& c, const mhc::Options& o) {
  if (c.grad_x_next) {
    const mhc::Status s = prepare(b, o);
    if (!s.ok()) return s;
  }
  return mhc::site_backward_finish(finish_inputs(b, c), finish_outputs(b), o);
}

// z_res formed again from the caches in fp32, as the fused backward forms it.
void reform_z(Bag& b, const Case& c) {
  const int64_t R = c.N * c.N;
  const float alpha_res = float(b["alpha"].get(2));
  for (int64_t t = 0; t < c.T(); ++t)
    for (int64_t i = 0; i < R; ++i) {
      const float r = float(b["inv_rms"].get(t)), m = float(b["h_mix"].get(t * c.F() + 2 * c.N + i));
      b["z_reformed"].set(t * R + i, alpha_res * (r * m) + float(b["bias"].get(2 * c.N + i)));
    }
}

// SPEC §15's definition, operator by operator, into the "u_" tensors.
void unfused(Bag& b, const Case& c, mhc::Isa isa) {
  const mhc::Options o = options_for(isa);
  mhc::Status s;
  if (c.grad_x_next) {
    s = mhc::post_backward({b["grad_x_next"].view(), b["x"].view(), maybe(b, "h_res"), b["h_out"].view(),
                            b["h_post"].view()},
                           {b["u_post_grad_x"].view(), b["u_grad_h_res"].view(), b["u_grad_h_out"].view(),
                            b["u_grad_h_post"].view()},
                           o);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  const std::optional<TensorView> grad_x_post = maybe(b, c.grad_x_next ? "u_post_grad_x" : "absent");
  const TensorView grad_h_post = b[pre_grad(c, "u_", "grad_h_post")].view();
  const TensorView grad_h_res = b[pre_grad(c, "u_", "grad_h_res")].view();
  if (c.single_pass) {
    s = mhc::pre_single_pass_backward(
        {b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), maybe(b, "gamma"), maybe(b, "pre_mix"),
         b["grad_h_in"].view(), maybe(b, "grad_h_pre"), grad_h_post, grad_h_res, b["inv_rms"].view(),
         b["h_mix"].view(), b["h_pre"].view(), b["h_post"].view(), grad_x_post, c.sinkhorn_eps, c.I},
        {b["u_grad_x"].view(), maybe(b, "u_grad_pre_mix"), b["u_grad_phi"].view(), b["u_grad_alpha"].view(),
         b["u_grad_bias"].view(), maybe(b, "u_grad_gamma")},
        o);
    ASSERT_TRUE(s.ok()) << s.message();
    return;
  }
  // The Sinkhorn's backward from the forward's z_res. The fp32 families' forward
  // forms it as the fused backward forms it again; the reference family's forward
  // is float64, so there the chain takes z_res re-formed from the caches in fp32.
  b["z_reformed"] = make_tensor(DType::fp32, tok(c, {c.N, c.N}), kOutputFill);
  reform_z(b, c);
  if (isa != mhc::Isa::reference) {
    EXPECT_EQ(b["z"].raw(), b["z_reformed"].raw()) << "the forward's z_res";
  }
  mhc::SinkhornBackwardInputs sin;
  sin.grad_h_res = grad_h_res;
  sin.z = b[isa == mhc::Isa::reference ? "z_reformed" : "z"].view();
  sin.eps = c.sinkhorn_eps;
  sin.num_iters = c.I;
  s = mhc::sinkhorn_backward(sin, {b["u_grad_z"].view()}, o);
  ASSERT_TRUE(s.ok()) << s.message();
  s = mhc::pre_backward({b["x"].view(), b["phi"].view(), b["alpha"].view(), b["grad_h_in"].view(), grad_h_post,
                         b["u_grad_z"].view(), b["inv_rms"].view(), b["h_mix"].view(), b["h_pre"].view(),
                         b["h_post"].view(), maybe(b, "gamma"), grad_x_post},
                        {b["u_grad_x"].view(), b["u_grad_phi"].view(), b["u_grad_alpha"].view(),
                         b["u_grad_bias"].view(), maybe(b, "u_grad_gamma")},
                        o);
  ASSERT_TRUE(s.ok()) << s.message();
}

// The hand-off the chain pins down is SPEC §11's fp32 grad_x: sum_j H[i, j] g[j]
// from the first term, j ascending, each product and sum rounded (H absent: g[i]).
void expect_post_grad_x_in_spec_order(Bag& b, const Case& c) {
  if (!c.grad_x_next) return;
  std::vector<float> want(size_t(c.T() * c.N * c.D));
  for (int64_t t = 0; t < c.T(); ++t)
    for (int64_t i = 0; i < c.N; ++i)
      for (int64_t d = 0; d < c.D; ++d) {
        auto g = [&](int64_t j) { return float(b["grad_x_next"].get((t * c.N + j) * c.D + d)); };
        auto H = [&](int64_t j) { return float(b["h_res"].get((t * c.N + i) * c.N + j)); };
        float acc = c.h_res ? H(0) * g(0) : g(i);
        for (int64_t j = 1; j < c.N && c.h_res; ++j) acc = acc + H(j) * g(j);
        want[size_t((t * c.N + i) * c.D + d)] = acc;
      }
  std::vector<uint32_t> bits(want.size());
  if (!want.empty()) std::memcpy(bits.data(), want.data(), want.size() * sizeof(float));  // T = 0: no pointers
  EXPECT_EQ(b["u_post_grad_x"].raw(), bits) << "post_backward's fp32 grad_x";
}

std::vector<std::string> outputs(const Case& c) {
  std::vector<std::string> names = {"grad_x", "grad_phi", "grad_alpha", "grad_bias"};
  if (c.grad_x_next)
    for (const char* n : {"grad_h_res", "grad_h_out", "grad_h_post"}) names.push_back(n);  // prepare's
  if (c.has_pre_mix()) names.push_back("grad_pre_mix");
  if (c.gamma) names.push_back("grad_gamma");
  return names;
}

std::vector<Case> chain_cases() {
  std::vector<Case> cases;
  uint64_t seed = 10;
  for (bool single_pass : {true, false})
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      Case c;
      c.single_pass = single_pass, c.dtype = dtype, c.seed = ++seed;
      c.grad_h_pre = single_pass;  // V4's unfused chain has no grad_h_pre
      cases.push_back(c);
    }
  cases.push_back({.B = 2, .S = 5, .bsnd = true, .N = 4, .D = 33, .dtype = DType::bf16, .gamma = true,
                   .h_res = false, .I = 7, .sinkhorn_eps = 1e-3, .seed = 21});
  cases.push_back({.S = 70, .D = 40, .pre_mix = false, .seed = 22});
  cases.push_back({.S = 70, .N = 2, .D = 33, .dtype = DType::fp16, .single_pass = false, .gamma = true,
                   .grad_h_pre = false, .seed = 23});
  cases.push_back({.S = 70, .N = 3, .D = 33, .dtype = DType::fp32, .grad_h_pre = false, .seed = 24});
  cases.push_back({.S = 70, .N = 4, .D = 40, .single_pass = false, .gamma = true, .grad_h_pre = false, .seed = 25});
  cases.push_back({.B = 2, .S = 4, .bsnd = true, .N = 3, .D = 40, .dtype = DType::fp32, .single_pass = false,
                   .h_res = false, .grad_h_pre = false, .seed = 26});
  cases.push_back({.S = 70, .N = 4, .D = 40, .grad_x_next = false, .seed = 27});
  cases.push_back({.S = 9, .N = 2, .D = 48, .dtype = DType::fp16, .single_pass = false, .grad_x_next = false,
                   .grad_h_pre = false, .seed = 28});
  cases.push_back({.S = 1, .N = 4, .D = 40, .dtype = DType::fp16, .seed = 29});
  cases.push_back({.S = 1, .N = 4, .D = 33, .single_pass = false, .grad_h_pre = false, .seed = 30});
  cases.push_back({.S = 0, .N = 4, .D = 40, .seed = 31});
  cases.push_back({.S = 0, .N = 4, .D = 40, .single_pass = false, .grad_h_pre = false, .seed = 32});
  return cases;
}

class SiteBackwardChain : public ::testing::TestWithParam<Case> {};
TEST_P(SiteBackwardChain, BitwiseEqualsPostBackwardThenPreBackward) {
  const Case c = GetParam();
  for (mhc::Isa isa : available_families()) {
    SCOPED_TRACE(family_name(isa));
    Bag b = make_bag(c);
    run_forward(b, c, options_for(isa));
    const mhc::Status s = fused(b, c, options_for(isa));
    ASSERT_TRUE(s.ok()) << s.message();
    unfused(b, c, isa);
    expect_post_grad_x_in_spec_order(b, c);
    for (const std::string& name : outputs(c)) EXPECT_EQ(b[name].raw(), b["u_" + name].raw()) << name;
  }
}
INSTANTIATE_TEST_SUITE_P(Cases, SiteBackwardChain, ::testing::ValuesIn(chain_cases()),
                         [](const auto& info) { return info.param.name(); });

TEST(SiteBackwardDeterminism, ThreadCountsAndStridedViewsGiveTheSameBits) {
  for (bool single_pass : {true, false}) {
    const Case c = {.B = 2, .S = 40, .bsnd = true, .N = 4, .D = 40, .single_pass = single_pass, .gamma = true,
                    .grad_h_pre = single_pass, .seed = 40};
    Rng rng(41);
    for (mhc::Isa isa : available_families()) {
      Bag base = make_bag(c);
      run_forward(base, c, options_for(isa, 1));
      Bag want = base;
      ASSERT_TRUE(fused(want, c, options_for(isa, 1)).ok());
      for (int threads : {2, 3}) {
        SCOPED_TRACE(family_name(isa) + (single_pass ? " V4.1" : " V4") + " threads " + std::to_string(threads));
        Bag b = base;
        if (threads == 3) {
          for (auto& [name, t] : b.t) t = relaid(t, Layout::padded_rows, rng);
        }
        const mhc::Status s = fused(b, c, options_for(isa, threads));
        ASSERT_TRUE(s.ok()) << s.message();
        for (const std::string& name : outputs(c)) EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
      }
    }
  }
}

// Each message names this operator's tensors, and a rejected call writes nothing.
TEST(SiteBackwardValidation, MessagesNameThisOperatorsTensors) {
  using Call = std::function<mhc::Status(Bag&, const Case&)>;
  const Call finish = [](Bag& b, const Case& c) {
    return mhc::site_backward_finish(finish_inputs(b, c), finish_outputs(b), {});
  };
  const Call prep = [](Bag& b, const Case&) { return prepare(b, {}); };
  struct Rule {
    const char* what;
    Case c;
    std::function<void(Bag&)> mutate;
    Call call;
    std::string message;  // its start; exact when `exact`
    bool exact = false;
  };
  const Case base = {.S = 3, .D = 16};
  Case v4 = base;
  v4.single_pass = false, v4.grad_h_pre = false;
  const auto none = [](Bag&) {};
  const std::vector<Rule> rules = {
      {"single_pass 2", base, none,
       [](Bag& b, const Case& c) {
         mhc::SiteBackwardFinishInputs in = finish_inputs(b, c);
         in.single_pass = 2;
         return mhc::site_backward_finish(in, finish_outputs(b), {});
       },
       "single_pass: expected 0 (V4) or 1 (V4.1), got 2", true},
      {"V4 with pre_mix", v4, [](Bag& b) { b["pre_mix"] = make_tensor(DType::fp32, {3, 4}); }, finish,
       "pre_mix: expected absent"},
      {"finish: grad_x_next fp32", base, [](Bag& b) { b["grad_x_next"] = make_tensor(DType::fp32, {3, 4, 16}); },
       finish, "grad_x_next: expected"},
      {"prepare: grad_x_next fp32", base, [](Bag& b) { b["grad_x_next"] = make_tensor(DType::fp32, {3, 4, 16}); },
       prep, "grad_x_next: expected"},
      {"finish: h_res shape", base, [](Bag& b) { b["h_res"] = make_tensor(DType::fp32, {3, 4, 3}); }, finish,
       "h_res: expected"},
      {"prepare: h_res shape", base, [](Bag& b) { b["h_res"] = make_tensor(DType::fp32, {3, 4, 3}); }, prep,
       "h_res: expected"},
      {"prepare: grad_x_next shape", base,
       [](Bag& b) { b["grad_x_next"] = make_tensor(DType::bf16, {3, 4, 15}); }, prep, "grad_x_next:"},
      {"grad_x is grad_x_next", base, none,
       [](Bag& b, const Case& c) {
         mhc::SiteBackwardFinishOutputs out = finish_outputs(b);
         out.grad_x = b["grad_x_next"].view();
         return mhc::site_backward_finish(finish_inputs(b, c), out, {});
       },
       "grad_x: output memory overlaps input grad_x_next", true},
      {"grad_x over grad_x_next's memory, another view", base, none,
       [](Bag& b, const Case& c) {
         mhc::SiteBackwardFinishOutputs out = finish_outputs(b);
         out.grad_x = TensorView(b["grad_x_next"].view().data, DType::bf16, {3, 4, 16}, {64, 1, 4});
         return mhc::site_backward_finish(finish_inputs(b, c), out, {});
       },
       "grad_x: output memory overlaps input grad_x_next", true},
      {"finish: grad_x_next fp16", base, [](Bag& b) { b["grad_x_next"] = make_tensor(DType::fp16, {3, 4, 16}); },
       finish, "grad_x_next: expected dtype bf16 (x's dtype), got fp16", true},
  };
  for (const Rule& r : rules) {
    SCOPED_TRACE(r.what);
    Bag b = make_bag(r.c);
    run_forward(b, r.c, {});
    // The pre side's gradients come from a valid prepare, as in the chain.
    ASSERT_TRUE(prepare(b, {}).ok());
    r.mutate(b);
    const auto before = b.snapshot();
    const mhc::Status s = r.call(b, r.c);
    ASSERT_FALSE(s.ok());
    if (r.exact) {
      EXPECT_EQ(s.message(), r.message);
    } else {
      EXPECT_EQ(s.message().rfind(r.message, 0), 0u) << s.message();
    }
    EXPECT_TRUE(b.snapshot() == before) << "a rejected call wrote memory";
  }
}

// One call of each C function gives the C++ face's bits.
TEST(SiteBackwardCApi, EqualsTheCppFace) {
  for (bool single_pass : {true, false}) {
    const Case c = {.S = 9, .N = 4, .D = 40, .single_pass = single_pass, .gamma = true, .grad_h_pre = single_pass,
                    .seed = 50};
    SCOPED_TRACE(single_pass ? "V4.1" : "V4");
    Bag want = make_bag(c);
    run_forward(want, c, {});
    Bag b = want;
    ASSERT_TRUE(fused(want, c, {}).ok());
    const mhc_options opt = to_c(mhc::Options{});
    const CTensor x(b["x"].view()), h_res(maybe(b, "h_res")), h_post(b["h_post"].view()),
        grad_x_next(b["grad_x_next"].view()), grad_h_res(b["grad_h_res"].view()), grad_h_post(b["grad_h_post"].view());
    {
      const CTensor h_out(b["h_out"].view()), grad_h_out(b["grad_h_out"].view());
      ASSERT_EQ(mhc_site_backward_prepare(grad_x_next.ptr, x.ptr, h_res.ptr, h_out.ptr, h_post.ptr, grad_h_res.ptr,
                                          grad_h_out.ptr, grad_h_post.ptr, &opt),
                MHC_OK)
          << mhc_last_error();
    }
    const CTensor phi(b["phi"].view()), alpha(b["alpha"].view()), bias(b["bias"].view()), gamma(maybe(b, "gamma")),
        pre_mix(maybe(b, "pre_mix")), grad_h_in(b["grad_h_in"].view()), grad_h_pre(maybe(b, "grad_h_pre")),
        inv_rms(b["inv_rms"].view()), h_mix(b["h_mix"].view()), h_pre(b["h_pre"].view()),
        grad_x(b["grad_x"].view()), grad_pre_mix(maybe(b, "grad_pre_mix")), grad_phi(b["grad_phi"].view()),
        grad_alpha(b["grad_alpha"].view()), grad_bias(b["grad_bias"].view()), grad_gamma(maybe(b, "grad_gamma"));
    ASSERT_EQ(mhc_site_backward_finish(x.ptr, phi.ptr, alpha.ptr, bias.ptr, gamma.ptr, pre_mix.ptr, h_res.ptr,
                                       grad_x_next.ptr, grad_h_in.ptr, grad_h_pre.ptr, grad_h_post.ptr,
                                       grad_h_res.ptr, inv_rms.ptr, h_mix.ptr, h_pre.ptr, h_post.ptr,
                                       single_pass ? 1 : 0, c.sinkhorn_eps, c.I, grad_x.ptr, grad_pre_mix.ptr,
                                       grad_phi.ptr, grad_alpha.ptr, grad_bias.ptr, grad_gamma.ptr, &opt),
              MHC_OK)
        << mhc_last_error();
    for (const std::string& name : outputs(c)) EXPECT_EQ(b[name].raw(), want[name].raw()) << name;
  }
}

}  // namespace
}  // namespace mhc_test::site_backward
