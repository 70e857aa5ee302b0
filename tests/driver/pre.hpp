// The test drivers of MhcPre (SPEC §2) and MhcPreBackward (SPEC §3), the two kinds
// of one operator: a Config (cpp/test_util.hpp) through the C++, C and aclnn faces,
// held to the float64 reference family's code (kernels/reference/reference.hpp).
// The backward's caches are the float64 forward's, rounded to fp32: every family
// and face reads the same inputs, so its reference is computed once too.
#pragma once

#include "aclnnop/aclnn_mhc_pre.h"
#include "aclnnop/aclnn_mhc_pre_backward.h"
#include "driver/pre_problem.hpp"
#include "driver/driver.hpp"
#include "kernels/reference/reference.hpp"

namespace mhc_test::driver {

// fp32 outputs: normwise relative error <= 1e-5. h_in, grad_x: elementwise within
// max(1 ulp of the dtype at |truth|, 1e-6 · Σ|terms|), the terms' magnitudes in float64.
inline constexpr double kPreNormwise = 1e-5;
inline constexpr double kPreTerms = 1e-6;

// Every tensor of make_operands() under its own name (absent ones left out).
inline Bag bag_of(Operands&& o) {
  Bag b;
  const std::pair<const char*, Tensor*> all[] = {
      {"x", &o.x},           {"phi", &o.phi},         {"alpha", &o.alpha},         {"bias", &o.bias},
      {"gamma", &o.gamma},   {"h_in", &o.h_in},       {"h_post", &o.h_post},       {"h_res", &o.h_res},
      {"inv_rms", &o.inv_rms}, {"h_mix", &o.h_mix},   {"h_pre", &o.h_pre},         {"grad_h_in", &o.grad_h_in},
      {"grad_h_post", &o.grad_h_post}, {"grad_h_res", &o.grad_h_res}, {"grad_x_post", &o.grad_x_post},
      {"grad_x", &o.grad_x}, {"grad_phi", &o.grad_phi}, {"grad_alpha", &o.grad_alpha}, {"grad_bias", &o.grad_bias},
      {"grad_gamma", &o.grad_gamma}};
  for (const auto& [name, t] : all)
    if (t->present()) b[name] = std::move(*t);
  return b;
}
inline std::vector<double> values_of(Bag& b, const char* name) {
  return b.t.count(name) ? b[name].values() : std::vector<double>{};
}
inline mhc::Options pre_options(const Config& c, const mhc::Options& base) {
  mhc::Options o = base;
  o.norm_eps = c.norm_eps, o.hc_eps = c.hc_eps;
  return o;
}
inline mhc::kernels::reference::ForwardInputs64 forward64(const Config& c, Bag& b) {
  mhc::kernels::reference::ForwardInputs64 in;
  in.dims = c.dims();
  in.x = b["x"].values(), in.phi = b["phi"].values(), in.alpha = b["alpha"].values(), in.bias = b["bias"].values();
  in.gamma = values_of(b, "gamma");
  in.norm_eps = c.norm_eps, in.hc_eps = c.hc_eps;
  return in;
}
// |got − truth| <= max(ulp(dtype, truth), kPreTerms · magnitude), elementwise.
inline Expectation within_terms(std::vector<double> truth, std::vector<double> magnitude, DType dtype) {
  for (size_t i = 0; i < truth.size(); ++i) magnitude[i] = std::max(ulp_of(dtype, truth[i]), kPreTerms * magnitude[i]);
  return elementwise(std::move(truth), std::move(magnitude));
}

class PreForwardDriver {
 public:
  using Problem = Config;
  static constexpr bool kSameBitsOnEveryFamily = false;  // each family's product order

  Bag make(const Problem& c) const { return bag_of(make_operands(c)); }
  std::vector<Face> faces(const Problem& c) const {
    // aclnn: bf16 / fp16 x, alpha of 3 or 2 entries, not empty (SPEC §7, as CANN).
    if (c.dtype == DType::fp32 || c.form == FForm::head || c.T() == 0) return {Face::cpp, Face::c};
    return {Face::cpp, Face::c, Face::aclnn};
  }
  std::vector<std::string> outputs(const Problem& c, Face) const {
    std::vector<std::string> o = {"h_in"};
    if (c.form != FForm::head) o.push_back("h_post");
    if (alpha_entries(c.form) == 3) o.push_back("h_res");
    if (c.caches) o.insert(o.end(), {"inv_rms", "h_mix", "h_pre"});
    return o;
  }
  Expectations reference(const Problem& c, Bag& b) const {
    const auto f = mhc::kernels::reference::forward(forward64(c, b));
    Expectations e = {{"h_in", within_terms(f.h_in, f.h_in_magnitude, c.dtype)},
                      {"h_post", normwise(f.h_post, kPreNormwise)},
                      {"h_res", normwise(f.h_res, kPreNormwise)},
                      {"inv_rms", normwise(f.inv_rms, kPreNormwise)},
                      {"h_mix", normwise(f.h_mix, kPreNormwise)},
                      {"h_pre", normwise(f.h_pre, kPreNormwise)}};
    return e;
  }
  // Caches not asked for are not written.
  void also_check(const Problem& c, Face, Bag& b, const std::string& where, Report& report) const {
    if (c.caches) return;
    for (const char* name : {"inv_rms", "h_mix", "h_pre"}) {
      const auto bytes = b[name].buffer.snapshot();
      if (!std::all_of(bytes.begin(), bytes.end(), [](uint8_t v) { return v == kOutputFill; }))
        report.fail(where + ": " + name + " written without being asked for");
    }
  }

  mhc::Status run(Face face, const Problem& c, Bag& b, const mhc::Options& base) const {
    const mhc::Options o = pre_options(c, base);
    auto named = [&](std::string_view name) {
      const bool cache = name == "inv_rms" || name == "h_mix" || name == "h_pre";
      return cache && !c.caches ? std::string() : std::string(name);
    };
    if (face == Face::cpp) {
      auto view = [&](std::string_view name) {
        const std::string entry = named(name);
        return !entry.empty() && b.t.count(entry) ? b[entry].optional_view() : std::nullopt;
      };
      return mhc::pre_forward({b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), view("gamma")},
                              {b["h_in"].view(), view("h_post"), view("h_res"), view("inv_rms"), view("h_mix"),
                               view("h_pre")},
                              o);
    }
    if (face == Face::c) return call_c("pre_forward", b, named, {}, {}, o);
    AclTensors acl;
    uint64_t bytes = 0;
    aclOpExecutor* executor = nullptr;
    auto cache = [&](const char* name) { return c.caches ? acl(b, name) : nullptr; };
    const aclnnStatus first = aclnnMhcPreGetWorkspaceSize(
        acl(b, "x"), acl(b, "phi"), acl(b, "alpha"), acl(b, "bias"), acl(b, "gamma"), c.norm_eps, c.hc_eps,
        acl(b, "h_in"), acl(b, "h_post"), acl(b, "h_res"), cache("inv_rms"), cache("h_mix"), cache("h_pre"), &bytes,
        &executor);
    return run_aclnn("aclnnMhcPre", first, bytes, executor, aclnnMhcPre);
  }
};

// Magnitudes of grad_x's terms, in float64 (SPEC §3 written out again, once on
// values and once on absolute values), each inner sum replaced by the sum of its
// terms' magnitudes: gu = Σ_f phi·G -> Σ_f |phi·G|, g_pre = Σ_d v·grad_h_in ->
// Σ_d |v·grad_h_in| inside G, and g_r = Σ_f gw·m -> Σ_f |gw·m| inside c. fp32
// evaluation of a sum errs by a few ulps of the sum of its terms' magnitudes, not
// of its value (a cancelling gu, |gu| << Σ_f |phi·G|, otherwise fails any fp32
// implementation).
inline std::vector<double> grad_x_magnitudes(const mhc::kernels::reference::BackwardInputs64& in) {
  const auto& d = in.dims;
  std::vector<double> out(size_t(d.T * d.K));
  std::vector<double> G_abs(size_t(d.F));
  const size_t entries = in.alpha.size();
  const double alpha[3] = {in.alpha[0], entries > 1 ? in.alpha[1] : 0.0, entries > 2 ? in.alpha[2] : 0.0};
  for (int64_t t = 0; t < d.T; ++t) {
    const double r = in.inv_rms[t];
    double g_r_abs = 0;
    for (int64_t f = 0; f < d.F; ++f) {
      double gz_abs;
      int branch;
      if (f < d.N) {
        double g_pre_abs = 0;
        for (int64_t j = 0; j < d.D; ++j) g_pre_abs += std::fabs(in.x[t * d.K + f * d.D + j] * in.grad_h_in[t * d.D + j]);
        const double s = in.h_pre[t * d.N + f] - in.hc_eps;
        gz_abs = g_pre_abs * std::fabs(s * (1 - s));
        branch = 0;
      } else if (f < 2 * d.N) {
        const double sg = in.h_post[t * d.N + f - d.N] / 2;
        gz_abs = std::fabs(in.grad_h_post[t * d.N + f - d.N] * 2 * sg * (1 - sg));
        branch = 1;
      } else {
        gz_abs = std::fabs(in.grad_h_res[t * d.R + f - 2 * d.N]);
        branch = 2;
      }
      G_abs[f] = std::fabs(r * alpha[branch]) * gz_abs;
      g_r_abs += std::fabs(alpha[branch] * in.h_mix[t * d.F + f]) * gz_abs;
    }
    const double c_abs = std::fabs(r * r * r / double(d.K)) * g_r_abs;
    for (int64_t k = 0; k < d.K; ++k) {
      double gu_abs = 0;
      for (int64_t f = 0; f < d.F; ++f) gu_abs += std::fabs(in.phi[f * d.K + k]) * G_abs[f];
      const double gamma = in.gamma.empty() ? 1.0 : in.gamma[k];
      const int64_t n = k / d.D, j = k % d.D;
      out[t * d.K + k] = std::fabs(in.h_pre[t * d.N + n] * in.grad_h_in[t * d.D + j]) +
                         (in.grad_x_post.empty() ? 0.0 : std::fabs(in.grad_x_post[t * d.K + k])) +
                         std::fabs(gamma) * gu_abs + c_abs * std::fabs(in.x[t * d.K + k]);
    }
  }
  return out;
}

class PreBackwardDriver {
 public:
  using Problem = Config;
  static constexpr bool kSameBitsOnEveryFamily = false;

  // The forward's caches from the float64 reference, rounded to fp32.
  Bag make(const Problem& c) const {
    Bag b = bag_of(make_operands(c));
    const auto f = mhc::kernels::reference::forward(forward64(c, b));
    const std::pair<const char*, const std::vector<double>*> caches[] = {
        {"inv_rms", &f.inv_rms}, {"h_mix", &f.h_mix}, {"h_pre", &f.h_pre}, {"h_post", &f.h_post}};
    for (const auto& [name, values] : caches)
      if (b.t.count(name))
        for (int64_t i = 0; i < b[name].numel(); ++i) b[name].set(i, (*values)[size_t(i)]);
    return b;
  }
  std::vector<Face> faces(const Problem& c) const {
    // aclnn: bf16 / fp16 x, alpha of 3 or 2 entries, gradXPost in x's dtype, not empty.
    if (c.dtype == DType::fp32 || c.form == FForm::head || (c.grad_x_post && c.grad_x_post_fp32) || c.T() == 0)
      return {Face::cpp, Face::c};
    return {Face::cpp, Face::c, Face::aclnn};
  }
  std::vector<std::string> outputs(const Problem& c, Face) const {
    std::vector<std::string> o = {"grad_x", "grad_phi", "grad_alpha", "grad_bias"};
    if (c.gamma) o.push_back("grad_gamma");
    return o;
  }
  Expectations reference(const Problem& c, Bag& b) const {
    mhc::kernels::reference::BackwardInputs64 in;
    in.dims = c.dims();
    in.x = b["x"].values(), in.phi = b["phi"].values(), in.alpha = b["alpha"].values();
    in.gamma = values_of(b, "gamma");
    in.grad_h_in = b["grad_h_in"].values(), in.grad_h_post = values_of(b, "grad_h_post");
    in.grad_h_res = values_of(b, "grad_h_res"), in.grad_x_post = values_of(b, "grad_x_post");
    in.inv_rms = b["inv_rms"].values(), in.h_mix = b["h_mix"].values(), in.h_pre = b["h_pre"].values();
    in.h_post = values_of(b, "h_post");
    in.hc_eps = c.hc_eps;
    const auto g = mhc::kernels::reference::backward(in);
    return {{"grad_x", within_terms(g.grad_x, grad_x_magnitudes(in), c.dtype)},
            {"grad_phi", normwise(g.grad_phi, kPreNormwise)},
            {"grad_alpha", within_magnitude(g.grad_alpha, g.grad_alpha_magnitude, kPreNormwise)},
            {"grad_bias", normwise(g.grad_bias, kPreNormwise)},
            {"grad_gamma", normwise(g.grad_gamma, kPreNormwise)}};
  }

  mhc::Status run(Face face, const Problem& c, Bag& b, const mhc::Options& base) const {
    const mhc::Options o = pre_options(c, base);
    auto view = [&](const char* name) { return b.t.count(name) ? b[name].optional_view() : std::nullopt; };
    if (face == Face::cpp)
      return mhc::pre_backward({b["x"].view(), b["phi"].view(), b["alpha"].view(), b["grad_h_in"].view(),
                                view("grad_h_post"), view("grad_h_res"), b["inv_rms"].view(), b["h_mix"].view(),
                                b["h_pre"].view(), view("h_post"), view("gamma"), view("grad_x_post")},
                               {b["grad_x"].view(), b["grad_phi"].view(), b["grad_alpha"].view(),
                                b["grad_bias"].view(), view("grad_gamma")},
                               o);
    if (face == Face::c) return call_c("pre_backward", b, [](std::string_view n) { return std::string(n); }, {}, {}, o);
    AclTensors acl;
    uint64_t bytes = 0;
    aclOpExecutor* executor = nullptr;
    const aclnnStatus first = aclnnMhcPreBackwardGetWorkspaceSize(
        acl(b, "x"), acl(b, "phi"), acl(b, "alpha"), acl(b, "grad_h_in"), acl(b, "grad_h_post"),
        acl(b, "grad_h_res"), acl(b, "inv_rms"), acl(b, "h_mix"), acl(b, "h_pre"), acl(b, "h_post"),
        acl(b, "gamma"), acl(b, "grad_x_post"), float(c.hc_eps), acl(b, "grad_x"), acl(b, "grad_phi"),
        acl(b, "grad_alpha"), acl(b, "grad_bias"), acl(b, "grad_gamma"), &bytes, &executor);
    return run_aclnn("aclnnMhcPreBackward", first, bytes, executor, aclnnMhcPreBackward);
  }
};

}  // namespace mhc_test::driver
