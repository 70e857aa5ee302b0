// The test driver of MhcPost and MhcPostBackward (SPEC §11): both directions of a
// PCase (cpp/post_util.hpp) through the C++, C and aclnn faces, held to the float64
// reference (kernels/reference/post.hpp) within the rounding of SPEC's fp32 order.
#pragma once

#include "aclnnop/aclnn_mhc_post.h"
#include "aclnnop/aclnn_mhc_post_backward.h"
#include "driver/driver.hpp"
#include "kernels/reference/post.hpp"

namespace mhc_test::layer {

struct PCase {
  int64_t B = 1, S = 5;
  bool bsnd = false;
  int64_t N = 4, D = 64;
  DType dtype = DType::bf16;
  bool h_res = true;
  bool grad_x_fp32 = false;
  uint64_t seed = 1;
  int64_t T() const { return B * S; }
  std::string name() const {
    return "N" + std::to_string(N) + "_D" + std::to_string(D) + (bsnd ? "_B" + std::to_string(B) + "S" : "_T") +
           std::to_string(bsnd ? S : T()) + "_" + dtype_name(dtype) + (h_res ? "_hres" : "_identity") +
           (grad_x_fp32 ? "_gx32" : "");
  }
};
inline void PrintTo(const PCase& c, std::ostream* os) { *os << c.name(); }

inline Shape tok(const PCase& c, std::initializer_list<int64_t> inner) { return token_shape(c.bsnd, c.B, c.S, inner); }

inline Bag make_bag(const PCase& c) {
  Bag b;
  Rng rng(c.seed * 104729 + 11);
  b["x"] = make_tensor(c.dtype, tok(c, {c.N, c.D}));
  fill_normal(b["x"], rng, 2.0);
  if (c.h_res) {
    b["h_res"] = make_tensor(DType::fp32, tok(c, {c.N, c.N}));
    fill_uniform(b["h_res"], rng, -0.3, 1.1);
  }
  b["h_out"] = make_tensor(c.dtype, tok(c, {c.D}));
  fill_normal(b["h_out"], rng, 3.0);
  b["h_post"] = make_tensor(DType::fp32, tok(c, {c.N}));
  fill_uniform(b["h_post"], rng, 0.0, 2.0);
  b["grad_out"] = make_tensor(c.dtype, tok(c, {c.N, c.D}));
  fill_normal(b["grad_out"], rng, 1.0);
  b["out"] = make_tensor(c.dtype, tok(c, {c.N, c.D}), kOutputFill);
  b["grad_x"] = make_tensor(c.grad_x_fp32 ? DType::fp32 : c.dtype, tok(c, {c.N, c.D}), kOutputFill);
  b["grad_h_res"] = make_tensor(DType::fp32, tok(c, {c.N, c.N}), kOutputFill);
  b["grad_h_out"] = make_tensor(c.dtype, tok(c, {c.D}), kOutputFill);
  b["grad_h_post"] = make_tensor(DType::fp32, tok(c, {c.N}), kOutputFill);
  return b;
}

inline std::optional<TensorView> h_res_of(Bag& b) {
  return b.t.count("h_res") ? std::optional<TensorView>(b["h_res"].view()) : std::nullopt;
}

inline mhc::Status forward(Bag& b, const mhc::Options& o) {
  return mhc::post_forward({b["x"].view(), h_res_of(b), b["h_out"].view(), b["h_post"].view()}, {b["out"].view()}, o);
}
inline mhc::Status backward(Bag& b, const mhc::Options& o, bool with_grad_h_res = true) {
  return mhc::post_backward(
      {b["grad_out"].view(), b["x"].view(), h_res_of(b), b["h_out"].view(), b["h_post"].view()},
      {b["grad_x"].view(), with_grad_h_res ? std::optional<TensorView>(b["grad_h_res"].view()) : std::nullopt,
       b["grad_h_out"].view(), b["grad_h_post"].view()},
      o);
}
inline const std::vector<std::string> kOutputs = {"out", "grad_x", "grad_h_res", "grad_h_out", "grad_h_post"};
}  // namespace mhc_test::layer

namespace mhc_test::driver {

class PostDriver {
 public:
  using Problem = layer::PCase;
  static constexpr bool kSameBitsOnEveryFamily = true;  // SPEC §11 fixes the order

  Bag make(const Problem& c) const { return layer::make_bag(c); }
  std::vector<std::string> outputs(const Problem&, Face) const { return layer::kOutputs; }
  std::vector<Face> faces(const Problem& c) const {
    // aclnn takes bf16 / fp16 x, gradX in x's dtype, and (its backward) no empty tensor.
    if (c.dtype == DType::fp32 || c.grad_x_fp32 || c.T() == 0) return {Face::cpp, Face::c};
    return {Face::cpp, Face::c, Face::aclnn};
  }

  // A chain of n fp32 roundings (a product and n − 1 sums) is within
  // γ_n = n u / (1 − n u) of the exact value relative to Σ|terms|; the cast to a
  // 16-bit dtype adds half an ulp of that dtype at the result. out: n = N + 1 (or 2
  // for the identity); grad_x and grad_h_out: N; grad_h_res and grad_h_post: D.
  Expectations reference(const Problem& c, Bag& b) const {
    const int64_t N = c.N, D = c.D, T = c.T();
    const std::vector<double> x = b["x"].values(), h_out = b["h_out"].values(), h_post = b["h_post"].values(),
                              g = b["grad_out"].values();
    const std::vector<double> H = c.h_res ? b["h_res"].values() : std::vector<double>();
    struct Out {
      std::vector<double> want, magnitude;
    };
    std::map<std::string, Out> all;
    auto put = [&](const char* name, const std::vector<double>& v, const std::vector<double>& m) {
      all[name].want.insert(all[name].want.end(), v.begin(), v.end());
      all[name].magnitude.insert(all[name].magnitude.end(), m.begin(), m.end());
    };
    for (int64_t t = 0; t < T; ++t) {
      const mhc::kernels::reference::PostToken64 token{N, D, &x[size_t(t * N * D)],
                                                       c.h_res ? &H[size_t(t * N * N)] : nullptr,
                                                       &h_out[size_t(t * D)], &h_post[size_t(t * N)]};
      const auto f = mhc::kernels::reference::post_forward(token);
      const auto r = mhc::kernels::reference::post_backward(token, &g[size_t(t * N * D)]);
      put("out", f.out, f.out_magnitude);
      put("grad_x", r.grad_x, r.grad_x_magnitude);
      put("grad_h_res", r.grad_h_res, r.grad_h_res_magnitude);
      put("grad_h_out", r.grad_h_out, r.grad_h_out_magnitude);
      put("grad_h_post", r.grad_h_post, r.grad_h_post_magnitude);
    }
    const std::map<std::string, std::pair<int64_t, DType>> rounding = {
        {"out", {c.h_res ? N + 1 : 2, c.dtype}},
        {"grad_x", {N, b["grad_x"].dtype()}},
        {"grad_h_out", {N, c.dtype}},
        {"grad_h_res", {D, DType::fp32}},
        {"grad_h_post", {D, DType::fp32}}};
    Expectations e;
    for (auto& [name, out] : all) {
      const auto& [n, dtype] = rounding.at(name);
      const double gamma_n = double(n) * kU / (1.0 - double(n) * kU);
      for (double& m : out.magnitude) m *= gamma_n;  // the fp32 error bound
      e[name] = elementwise(std::move(out.want), std::move(out.magnitude), dtype);
    }
    return e;
  }

  mhc::Status run(Face face, const Problem&, Bag& b, const mhc::Options& o) const {
    if (face == Face::cpp) {
      if (mhc::Status s = layer::forward(b, o); !s.ok()) return s;
      return layer::backward(b, o);
    }
    if (face == Face::c) {
      auto same = [](std::string_view name) { return std::string(name); };
      if (mhc::Status s = call_c("post_forward", b, same, {}, {}, o); !s.ok()) return s;
      return call_c("post_backward", b, same, {}, {}, o);
    }
    AclTensors acl;
    uint64_t bytes = 0;
    aclOpExecutor* executor = nullptr;
    aclnnStatus first = aclnnMhcPostGetWorkspaceSize(acl(b, "x"), acl(b, "h_res"), acl(b, "h_out"),
                                                     acl(b, "h_post"), acl(b, "out"), &bytes, &executor);
    if (mhc::Status s = run_aclnn("aclnnMhcPost", first, bytes, executor, aclnnMhcPost); !s.ok()) return s;
    first = aclnnMhcPostBackwardGetWorkspaceSize(acl(b, "grad_out"), acl(b, "x"), acl(b, "h_res"), acl(b, "h_out"),
                                                 acl(b, "h_post"), acl(b, "grad_x"), acl(b, "grad_h_res"),
                                                 acl(b, "grad_h_out"), acl(b, "grad_h_post"), &bytes, &executor);
    return run_aclnn("aclnnMhcPostBackward", first, bytes, executor, aclnnMhcPostBackward);
  }
};

}  // namespace mhc_test::driver
