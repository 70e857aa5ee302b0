// The test driver of MhcPreSinkhorn and its backward (SPEC §12), CANN's fused pair:
// an FCase (cpp/pre_sinkhorn_util.hpp) forward and, with caches, backward through
// the C++, C and aclnn faces, held to the float64 chain of the references
// (kernels/reference: MhcPre, then the Sinkhorn of its residual logits).
#pragma once

#include "aclnnop/aclnn_mhc_pre_sinkhorn.h"
#include "aclnnop/aclnn_mhc_pre_sinkhorn_backward.h"
#include "driver/driver.hpp"
#include "kernels/reference/reference.hpp"
#include "kernels/reference/sinkhorn.hpp"

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
inline const std::vector<std::string> kForwardOutputs = {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre", "norm_out", "sum_out"};
inline const std::vector<std::string> kBackwardOutputs = {"grad_x", "grad_phi", "grad_alpha", "grad_bias"};
inline std::vector<std::string> all_outputs() {
  std::vector<std::string> a = kForwardOutputs;
  a.insert(a.end(), kBackwardOutputs.begin(), kBackwardOutputs.end());
  return a;
}

}  // namespace mhc_test::layer

namespace mhc_test::driver {

class PreSinkhornDriver {
 public:
  using Problem = layer::FCase;
  // MhcPre's products run in each family's order: bits agree across faces only.
  static constexpr bool kSameBitsOnEveryFamily = false;

  Bag make(const Problem& c) const { return layer::make_bag(c); }
  std::vector<Face> faces(const Problem& c) const {
    // aclnn: bf16 / fp16 x, caches of pitch N (CANN's layout) or none; with an empty x
    // it runs nothing (as CANN), where the other faces write the sums over no tokens.
    if (c.dtype == DType::fp32 || (c.pitch != 0 && c.pitch != c.N) || c.T() == 0) return {Face::cpp, Face::c};
    return {Face::cpp, Face::c, Face::aclnn};
  }
  std::vector<std::string> outputs(const Problem& c, Face) const {
    if (c.pitch > 0) return layer::all_outputs();
    return {"h_in", "h_post", "h_res"};
  }

  // Normwise over each tensor: every fp32 output is a short chain over K = N·D
  // terms (the products phi·v, the sum of squares) and 2I Sinkhorn steps; with
  // K <= 2400 and I <= 20 the fp32 error is a few 1e-6 at worst (measured below
  // 1e-6), so 2e-5 leaves a wide margin. A 16-bit output (h_in, grad_x) adds its
  // dtype's rounding: 2^-9 (bf16) or 2^-12 (fp16) relative at most, bounded by
  // 2^-8 and 2^-11. The backward of a 16-bit x uses the rounded h_in's inputs
  // only through x, so the same bounds hold.
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
    fin.norm_eps = c.norm_eps, fin.hc_eps = c.hc_eps;
    const ref::ForwardOutputs64 pre = ref::forward(fin);
    std::map<std::string, std::vector<double>> want = {{"h_in", pre.h_in},       {"h_post", pre.h_post},
                                                       {"inv_rms", pre.inv_rms}, {"h_mix", pre.h_mix},
                                                       {"h_pre", pre.h_pre}};
    const std::vector<double> grad_h_res = b["grad_h_res"].values();
    std::vector<double> grad_z(size_t(T * NN));
    for (int64_t t = 0; t < T; ++t) {
      const ref::Sinkhorn64 s = ref::sinkhorn_forward(&pre.h_res[size_t(t * NN)], N, c.I, double(float(c.hc_eps)));
      want["h_res"].insert(want["h_res"].end(), s.H().begin(), s.H().end());
      const std::vector<double> gz = ref::sinkhorn_backward(s, &grad_h_res[size_t(t * NN)]);
      std::copy(gz.begin(), gz.end(), grad_z.begin() + t * NN);
    }
    ref::BackwardInputs64 bin;
    bin.dims = fin.dims;
    bin.x = fin.x, bin.phi = fin.phi, bin.alpha = fin.alpha;
    bin.grad_h_in = b["grad_h_in"].values(), bin.grad_h_post = b["grad_h_post"].values(), bin.grad_h_res = grad_z;
    bin.inv_rms = pre.inv_rms, bin.h_mix = pre.h_mix, bin.h_pre = pre.h_pre, bin.h_post = pre.h_post;
    bin.hc_eps = c.hc_eps;
    const ref::BackwardOutputs64 g = ref::backward(bin);
    want["grad_x"] = g.grad_x, want["grad_phi"] = g.grad_phi, want["grad_bias"] = g.grad_bias;
    Expectations e;
    for (auto& [name, w] : want) e[name] = normwise(std::move(w), bound_for(name, c.dtype));
    e["grad_alpha"] = within_magnitude(g.grad_alpha, g.grad_alpha_magnitude, bound_for("grad_alpha", c.dtype));
    return e;
  }

  mhc::Status run(Face face, const Problem& c, Bag& b, const mhc::Options& base) const {
    mhc::Options o = base;
    o.hc_eps = c.hc_eps, o.norm_eps = c.norm_eps;
    const bool caches = c.pitch > 0;
    if (face == Face::cpp) {
      if (mhc::Status s = layer::fused_forward(b, c, o); !s.ok() || !caches) return s;
      return layer::fused_backward(b, o);
    }
    if (face == Face::c) {
      const std::map<std::string, int64_t> iters = {{"num_iters", c.I}};
      auto forward_names = [&](std::string_view name) {
        const bool cache = name == "inv_rms" || name == "h_mix" || name == "h_pre" || name == "norm_out" ||
                           name == "sum_out";
        return cache && !caches ? std::string() : std::string(name);
      };
      if (mhc::Status s = call_c("pre_sinkhorn_forward", b, forward_names, {}, iters, o); !s.ok() || !caches) return s;
      auto same = [](std::string_view name) { return std::string(name); };
      return call_c("pre_sinkhorn_backward", b, same, {}, {}, o);
    }
    AclTensors acl;
    uint64_t bytes = 0;
    aclOpExecutor* executor = nullptr;
    aclnnStatus first = aclnnMhcPreSinkhornGetWorkspaceSize(
        acl(b, "x"), acl(b, "phi"), acl(b, "alpha"), acl(b, "bias"), c.N, c.I, c.hc_eps, c.norm_eps, caches,
        acl(b, "h_in"), acl(b, "h_post"), acl(b, "h_res"), caches ? acl(b, "h_pre") : nullptr,
        caches ? acl(b, "h_mix") : nullptr, caches ? acl(b, "inv_rms", true) : nullptr,
        caches ? acl(b, "sum_out") : nullptr, caches ? acl(b, "norm_out") : nullptr, &bytes, &executor);
    if (mhc::Status s = run_aclnn("aclnnMhcPreSinkhorn", first, bytes, executor, aclnnMhcPreSinkhorn);
        !s.ok() || !caches)
      return s;
    first = aclnnMhcPreSinkhornBackwardGetWorkspaceSize(
        acl(b, "grad_h_in"), acl(b, "grad_h_post"), acl(b, "grad_h_res"), acl(b, "x"), acl(b, "phi"),
        acl(b, "alpha"), acl(b, "bias"), acl(b, "h_pre"), acl(b, "h_mix"), acl(b, "inv_rms", true),
        acl(b, "sum_out"), acl(b, "norm_out"), c.hc_eps, acl(b, "grad_x"), acl(b, "grad_phi"), acl(b, "grad_alpha"),
        acl(b, "grad_bias"), &bytes, &executor);
    return run_aclnn("aclnnMhcPreSinkhornBackward", first, bytes, executor, aclnnMhcPreSinkhornBackward);
  }
};

}  // namespace mhc_test::driver
