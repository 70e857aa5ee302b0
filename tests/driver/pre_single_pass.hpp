// The test drivers of MhcPreSinglePass with its backward, and of MhcCollapse with
// its backward (SPEC §14): a case's forward then backward through the C++ and C
// faces (CANN has no V4.1 operator), held to the float64 references
// (kernels/reference: MhcPre with the carried pre-mix, the Sinkhorn of its
// residual logits, MhcPreBackward in the single-pass form).
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "driver/driver.hpp"
#include "kernels/reference/reference.hpp"
#include "kernels/reference/sinkhorn.hpp"

namespace mhc_test::single_pass {

struct SCase {
  int64_t B = 1, S = 5;
  bool bsnd = false;
  int64_t N = 4, D = 64;
  DType dtype = DType::bf16;
  int64_t I = 20;
  bool gamma = false;
  bool first_site = false;   // no pre_mix: stream 0 selected
  bool grad_h_pre = true;    // given (else 0)
  bool grad_x_post = false;  // given, fp32
  bool flat = false;         // h_res, grad_h_res as [.., N*N]
  double hc_eps = 1e-6, norm_eps = 1e-6, sinkhorn_eps = 1e-6;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  int64_t K() const { return N * D; }
  int64_t F() const { return 2 * N + N * N; }
  std::string name() const {
    return "N" + std::to_string(N) + "_D" + std::to_string(D) + (bsnd ? "_B" + std::to_string(B) + "S" : "_T") +
           std::to_string(bsnd ? S : T()) + "_" + dtype_name(dtype) + "_I" + std::to_string(I) +
           (gamma ? "_gamma" : "") + (first_site ? "_first" : "") + (grad_h_pre ? "" : "_nogradhpre") +
           (grad_x_post ? "_gradxpost" : "") + (flat ? "_flat" : "") + (sinkhorn_eps != hc_eps ? "_skeps" : "");
  }
};
inline void PrintTo(const SCase& c, std::ostream* os) { *os << c.name(); }

inline Shape tok(const SCase& c, std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); }
inline Shape residual(const SCase& c) { return c.flat ? tok(c, {c.N * c.N}) : tok(c, {c.N, c.N}); }

inline Bag make_bag(const SCase& c) {
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
  if (c.gamma) {
    b["gamma"] = make_tensor(DType::fp32, {N, D});
    fill_uniform(b["gamma"], rng, 0.5, 1.5);
  }
  if (!c.first_site) {  // the previous site's h_pre: sigma + hc_eps
    b["pre_mix"] = make_tensor(DType::fp32, tok(c, {N}));
    fill_uniform(b["pre_mix"], rng, 0.05, 1.0);
  }
  b["grad_h_in"] = make_tensor(c.dtype, tok(c, {D}));
  fill_normal(b["grad_h_in"], rng, 1.0);
  if (c.grad_h_pre) {
    b["grad_h_pre"] = make_tensor(DType::fp32, tok(c, {N}));
    fill_normal(b["grad_h_pre"], rng, 4.0);
  }
  b["grad_h_post"] = make_tensor(DType::fp32, tok(c, {N}));
  fill_normal(b["grad_h_post"], rng, 1.0);
  b["grad_h_res"] = make_tensor(DType::fp32, residual(c));
  fill_normal(b["grad_h_res"], rng, 1.0);
  if (c.grad_x_post) {
    b["grad_x_post"] = make_tensor(DType::fp32, tok(c, {N, D}));
    fill_normal(b["grad_x_post"], rng, 1.0);
  }
  b["h_in"] = make_tensor(c.dtype, tok(c, {D}), kOutputFill);
  b["h_pre"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
  b["h_post"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
  b["h_res"] = make_tensor(DType::fp32, residual(c), kOutputFill);
  b["inv_rms"] = make_tensor(DType::fp32, tok(c, {}), kOutputFill);
  b["h_mix"] = make_tensor(DType::fp32, tok(c, {F}), kOutputFill);
  b["grad_x"] = make_tensor(c.dtype, tok(c, {N, D}), kOutputFill);
  if (!c.first_site) b["grad_pre_mix"] = make_tensor(DType::fp32, tok(c, {N}), kOutputFill);
  b["grad_phi"] = make_tensor(DType::fp32, {F, K}, kOutputFill);
  b["grad_alpha"] = make_tensor(DType::fp32, {3}, kOutputFill);
  b["grad_bias"] = make_tensor(DType::fp32, {F}, kOutputFill);
  if (c.gamma) b["grad_gamma"] = make_tensor(DType::fp32, {N, D}, kOutputFill);
  return b;
}

inline std::optional<TensorView> maybe(Bag& b, const std::string& name) {
  if (!b.t.count(name) || !b[name].present()) return std::nullopt;
  return b[name].view();
}

inline mhc::Status forward(Bag& b, const SCase& c, const mhc::Options& o) {
  const mhc::PreSinglePassForwardInputs in{b["x"].view(), b["phi"].view(),  b["alpha"].view(),
                                           b["bias"].view(), maybe(b, "gamma"), maybe(b, "pre_mix"),
                                           c.sinkhorn_eps, c.I};
  return mhc::pre_single_pass_forward(in, {b["h_in"].view(), b["h_pre"].view(), b["h_post"].view(),
                                           b["h_res"].view(), b["inv_rms"].view(), b["h_mix"].view()},
                                      o);
}
inline mhc::Status backward(Bag& b, const SCase& c, const mhc::Options& o) {
  const mhc::PreSinglePassBackwardInputs in{
      b["x"].view(),         b["phi"].view(),        b["alpha"].view(),       b["bias"].view(),
      maybe(b, "gamma"),     maybe(b, "pre_mix"),    b["grad_h_in"].view(),   maybe(b, "grad_h_pre"),
      b["grad_h_post"].view(), b["grad_h_res"].view(), b["inv_rms"].view(),    b["h_mix"].view(),
      b["h_pre"].view(),     b["h_post"].view(),     maybe(b, "grad_x_post"), c.sinkhorn_eps,
      c.I};
  return mhc::pre_single_pass_backward(in, {b["grad_x"].view(), maybe(b, "grad_pre_mix"), b["grad_phi"].view(),
                                            b["grad_alpha"].view(), b["grad_bias"].view(), maybe(b, "grad_gamma")},
                                       o);
}
inline const std::vector<std::string> kForwardOutputs = {"h_in", "h_pre", "h_post", "h_res", "inv_rms", "h_mix"};
inline std::vector<std::string> backward_outputs(const SCase& c) {
  std::vector<std::string> names = {"grad_x", "grad_phi", "grad_alpha", "grad_bias"};
  if (!c.first_site) names.push_back("grad_pre_mix");
  if (c.gamma) names.push_back("grad_gamma");
  return names;
}

}  // namespace mhc_test::single_pass

namespace mhc_test::driver {

class PreSinglePassDriver {
 public:
  using Problem = single_pass::SCase;
  // MhcPre's products run in each family's order: bits agree across faces only.
  static constexpr bool kSameBitsOnEveryFamily = false;

  Bag make(const Problem& c) const { return single_pass::make_bag(c); }
  std::vector<Face> faces(const Problem&) const { return {Face::cpp, Face::c}; }  // no CANN operator
  std::vector<std::string> outputs(const Problem& c, Face) const {
    std::vector<std::string> names = single_pass::kForwardOutputs;
    for (const std::string& n : single_pass::backward_outputs(c)) names.push_back(n);
    return names;
  }

  // The fused pair's bounds (driver/pre_sinkhorn.hpp), the same chain of sums:
  // normwise 2e-5 for fp32 outputs; a 16-bit h_in or grad_x adds its dtype's rounding.
  static double bound_for(const std::string& name, DType dtype) {
    const bool rounded = name == "h_in" || name == "grad_x";
    if (!rounded || dtype == DType::fp32) return 2e-5;
    return dtype == DType::bf16 ? 0x1.0p-8 : 0x1.0p-11;
  }

  Expectations reference(const Problem& c, Bag& b) const {
    namespace ref = mhc::kernels::reference;
    const int64_t T = c.T(), N = c.N, NN = N * N;
    ref::ForwardInputs64 fin;
    fin.dims = {.T = T, .N = N, .D = c.D, .K = c.K(), .F = c.F(), .R = NN};
    fin.x = b["x"].values(), fin.phi = b["phi"].values(), fin.alpha = b["alpha"].values();
    fin.bias = b["bias"].values();
    if (c.gamma) fin.gamma = b["gamma"].values();
    if (!c.first_site) fin.pre_mix = b["pre_mix"].values();
    fin.select_first_stream = c.first_site;
    fin.norm_eps = c.norm_eps, fin.hc_eps = c.hc_eps;
    const ref::ForwardOutputs64 pre = ref::forward(fin);
    std::map<std::string, std::vector<double>> want = {{"h_in", pre.h_in},       {"h_post", pre.h_post},
                                                       {"inv_rms", pre.inv_rms}, {"h_mix", pre.h_mix},
                                                       {"h_pre", pre.h_pre}};
    const std::vector<double> grad_h_res = b["grad_h_res"].values();
    std::vector<double> grad_z(size_t(T * NN));
    for (int64_t t = 0; t < T; ++t) {
      const ref::Sinkhorn64 s =
          ref::sinkhorn_forward(&pre.h_res[size_t(t * NN)], N, c.I, double(float(c.sinkhorn_eps)));
      want["h_res"].insert(want["h_res"].end(), s.H().begin(), s.H().end());
      const std::vector<double> gz = ref::sinkhorn_backward(s, &grad_h_res[size_t(t * NN)]);
      std::copy(gz.begin(), gz.end(), grad_z.begin() + t * NN);
    }
    ref::BackwardInputs64 bin;
    bin.dims = fin.dims;
    bin.x = fin.x, bin.phi = fin.phi, bin.alpha = fin.alpha, bin.gamma = fin.gamma;
    bin.grad_h_in = b["grad_h_in"].values(), bin.grad_h_post = b["grad_h_post"].values(), bin.grad_h_res = grad_z;
    bin.inv_rms = pre.inv_rms, bin.h_mix = pre.h_mix, bin.h_pre = pre.h_pre, bin.h_post = pre.h_post;
    if (c.grad_x_post) bin.grad_x_post = b["grad_x_post"].values();
    bin.hc_eps = c.hc_eps;
    if (c.first_site) {  // the collapse selected stream 0: weights (1, 0, ..)
      bin.pre_mix.assign(size_t(T * N), 0.0);
      for (int64_t t = 0; t < T; ++t) bin.pre_mix[size_t(t * N)] = 1.0;
    } else {
      bin.pre_mix = fin.pre_mix;
    }
    bin.grad_h_pre = c.grad_h_pre ? b["grad_h_pre"].values() : std::vector<double>(size_t(T * N), 0.0);
    const ref::BackwardOutputs64 g = ref::backward(bin);
    want["grad_x"] = g.grad_x, want["grad_phi"] = g.grad_phi, want["grad_bias"] = g.grad_bias;
    if (!c.first_site) want["grad_pre_mix"] = g.grad_pre_mix;
    if (c.gamma) want["grad_gamma"] = g.grad_gamma;
    Expectations e;
    for (auto& [name, w] : want) e[name] = normwise(std::move(w), bound_for(name, c.dtype));
    e["grad_alpha"] = within_magnitude(g.grad_alpha, g.grad_alpha_magnitude, bound_for("grad_alpha", c.dtype));
    return e;
  }

  // The first site's h_in is stream 0 of x, bit for bit.
  void also_check(const Problem& c, Face, Bag& b, const std::string& where, Report& report) const {
    if (!c.first_site) return;
    const Tensor& x = b["x"];
    const Tensor& h_in = b["h_in"];
    for (int64_t t = 0; t < c.T(); ++t)
      for (int64_t d = 0; d < c.D; ++d)
        if (x.get(t * c.K() + d) != h_in.get(t * c.D + d) ||
            std::signbit(x.get(t * c.K() + d)) != std::signbit(h_in.get(t * c.D + d))) {
          report.fail(where + " h_in: token " + std::to_string(t) + " is not stream 0 of x");
          return;
        }
  }

  mhc::Status run(Face face, const Problem& c, Bag& b, const mhc::Options& base) const {
    mhc::Options o = base;
    o.hc_eps = c.hc_eps, o.norm_eps = c.norm_eps;
    if (face == Face::cpp) {
      if (mhc::Status s = single_pass::forward(b, c, o); !s.ok()) return s;
      return single_pass::backward(b, c, o);
    }
    const std::map<std::string, double> reals = {{"sinkhorn_eps", c.sinkhorn_eps}};
    const std::map<std::string, int64_t> ints = {{"num_iters", c.I}};
    auto same = [](std::string_view name) { return std::string(name); };
    if (mhc::Status s = call_c("pre_single_pass_forward", b, same, reals, ints, o); !s.ok()) return s;
    return call_c("pre_single_pass_backward", b, same, reals, ints, o);
  }
};

// MhcCollapse and its backward: fixed fp32 steps, the same bits on every family.
struct CollapseCase {
  int64_t B = 1, S = 7;
  bool bsnd = false;
  int64_t N = 4, D = 100;
  DType dtype = DType::bf16;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  std::string name() const {
    return "N" + std::to_string(N) + "_D" + std::to_string(D) + (bsnd ? "_B" + std::to_string(B) + "S" : "_T") +
           std::to_string(bsnd ? S : T()) + "_" + dtype_name(dtype);
  }
};
inline void PrintTo(const CollapseCase& c, std::ostream* os) { *os << c.name(); }

class CollapseDriver {
 public:
  using Problem = CollapseCase;
  static constexpr bool kSameBitsOnEveryFamily = true;

  Bag make(const Problem& c) const {
    Bag b;
    Rng rng(c.seed * 2862933555777941757ull + 3037000493ull);
    auto tok = [&](std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); };
    b["x"] = make_tensor(c.dtype, tok({c.N, c.D}));
    fill_normal(b["x"], rng, 1.0);
    b["pre_mix"] = make_tensor(DType::fp32, tok({c.N}));
    fill_uniform(b["pre_mix"], rng, 0.05, 1.0);
    b["grad_h"] = make_tensor(c.dtype, tok({c.D}));
    fill_normal(b["grad_h"], rng, 1.0);
    b["h"] = make_tensor(c.dtype, tok({c.D}), kOutputFill);
    b["grad_x"] = make_tensor(c.dtype, tok({c.N, c.D}), kOutputFill);
    b["grad_pre_mix"] = make_tensor(DType::fp32, tok({c.N}), kOutputFill);
    return b;
  }
  std::vector<Face> faces(const Problem&) const { return {Face::cpp, Face::c}; }
  std::vector<std::string> outputs(const Problem&, Face) const { return {"h", "grad_x", "grad_pre_mix"}; }

  // Elementwise: h and grad_x are sums of N products (h) or one product (grad_x)
  // rounded once to x's dtype, within N fp32 roundings of their terms' magnitudes
  // (bound N·2^-24·Σ|terms|) plus half an ulp of the dtype; grad_pre_mix sums D
  // products in 16 lanes: (D/16 + 4)·2^-24·Σ|terms|.
  Expectations reference(const Problem& c, Bag& b) const {
    const std::vector<double> x = b["x"].values(), p = b["pre_mix"].values(), g = b["grad_h"].values();
    const int64_t T = c.T(), N = c.N, D = c.D;
    const double u = 0x1.0p-24;
    std::vector<double> h(T * D), h_bound(T * D), gx(T * N * D), gx_bound(T * N * D), gp(T * N), gp_bound(T * N);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0, magnitude = 0;
        for (int64_t d = 0; d < D; ++d) {
          const double v = x[(t * N + n) * D + d];
          h[t * D + d] += p[t * N + n] * v;
          h_bound[t * D + d] += std::fabs(p[t * N + n] * v);
          gx[(t * N + n) * D + d] = p[t * N + n] * g[t * D + d];
          gx_bound[(t * N + n) * D + d] = u * std::fabs(gx[(t * N + n) * D + d]);
          sum += v * g[t * D + d];
          magnitude += std::fabs(v * g[t * D + d]);
        }
        gp[t * N + n] = sum;
        gp_bound[t * N + n] = double(D / 16 + 4) * u * magnitude;
      }
    for (double& bound : h_bound) bound *= double(N) * u;
    Expectations e;
    e["h"] = elementwise(std::move(h), std::move(h_bound), c.dtype);
    e["grad_x"] = elementwise(std::move(gx), std::move(gx_bound), c.dtype);
    e["grad_pre_mix"] = elementwise(std::move(gp), std::move(gp_bound));
    return e;
  }

  mhc::Status run(Face face, const Problem&, Bag& b, const mhc::Options& o) const {
    if (face == Face::cpp) {
      if (mhc::Status s = mhc::collapse_forward({b["x"].view(), b["pre_mix"].view()}, {b["h"].view()}, o); !s.ok())
        return s;
      return mhc::collapse_backward({b["grad_h"].view(), b["x"].view(), b["pre_mix"].view()},
                                    {b["grad_x"].view(), b["grad_pre_mix"].view()}, o);
    }
    auto same = [](std::string_view name) { return std::string(name); };
    if (mhc::Status s = call_c("collapse_forward", b, same, {}, {}, o); !s.ok()) return s;
    return call_c("collapse_backward", b, same, {}, {}, o);
  }
};

}  // namespace mhc_test::driver
