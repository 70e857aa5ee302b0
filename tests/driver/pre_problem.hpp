// The problem of MhcPre and MhcPreBackward's test driver (driver/pre.hpp) and of
// the C++ suites: a Config (shape, dtype, residual form, options), the operands of
// one forward and one backward call (random, reproducible from its seed), their
// views for the C++ API, and their float64 upcasts for the reference.
#pragma once

#include <ostream>

#include "common/host_tensor.hpp"
#include "kernels/reference/reference.hpp"

namespace mhc_test {

// ---------------------------------------------------------------- operands of one call

// Residual branch: R = N*N, R = N!, or none (two-entry alpha, F = 2N); the head
// (one-entry alpha, F = N) has neither a residual nor a post branch.
enum class FForm { square, permutation, two_entry, head };
inline const char* fform_name(FForm f) {
  return f == FForm::square ? "square" : f == FForm::permutation ? "perm" : f == FForm::two_entry ? "two_entry" : "head";
}
inline int64_t alpha_entries(FForm form) { return form == FForm::head ? 1 : form == FForm::two_entry ? 2 : 3; }
inline int64_t residual_count(FForm form, int64_t N) {
  if (form == FForm::two_entry || form == FForm::head) return 0;
  if (form == FForm::square) return N * N;
  int64_t f = 1;
  for (int64_t i = 2; i <= N; ++i) f *= i;
  return f;
}

struct Config {
  int64_t N = 4, D = 8;
  int64_t B = 1, S = 4;  // T = B*S
  bool bsnd = false;     // x as [B,S,N,D]; else [T,N,D]
  DType dtype = DType::bf16;
  FForm form = FForm::square;
  bool gamma = true;
  bool grad_x_post = false;
  bool grad_x_post_fp32 = false;  // grad_x_post in fp32 whatever x's dtype (MhcPostBackward's fp32 grad_x)
  bool caches = true;          // forward produces inv_rms, h_mix, h_pre
  bool flat_residual = false;  // h_res / grad_h_res as [.., R] even when R = N*N
  double norm_eps = 1e-6, hc_eps = 1e-6;
  uint64_t seed = 1;

  int64_t T() const { return B * S; }
  int64_t K() const { return N * D; }
  int64_t R() const { return residual_count(form, N); }
  int64_t F() const { return form == FForm::head ? N : 2 * N + R(); }
  mhc::kernels::PreShape dims() const {
    mhc::kernels::PreShape d;
    d.T = T(); d.N = N; d.D = D; d.K = K(); d.R = R(); d.F = F();
    d.two_entry_alpha = form == FForm::two_entry;
    d.head = form == FForm::head;
    return d;
  }
  // A per-token shape in x's layout: [B,S,inner...] or [T,inner...].
  Shape token_shape(std::initializer_list<int64_t> inner) const {
    Shape s = bsnd ? Shape{B, S} : Shape{T()};
    s.insert(s.end(), inner.begin(), inner.end());
    return s;
  }
  Shape residual_shape() const {
    return R() == N * N && !flat_residual ? token_shape({N, N}) : token_shape({R()});
  }
  std::string name() const;
};
// gtest prints parameters with this (not as raw bytes).
inline void PrintTo(const Config& c, std::ostream* os);

inline std::string Config::name() const {
  std::string s = "N" + std::to_string(N) + "_D" + std::to_string(D) + "_" +
                  (bsnd ? "B" + std::to_string(B) + "S" + std::to_string(S) : "T" + std::to_string(T())) +
                  "_" + dtype_name(dtype) + "_" + fform_name(form);
  if (gamma) s += "_gamma";
  if (grad_x_post) s += grad_x_post_fp32 ? "_gxpost32" : "_gxpost";
  if (!caches) s += "_nocache";
  if (flat_residual) s += "_flat";
  return s;
}

inline void PrintTo(const Config& c, std::ostream* os) { *os << c.name() << " seed " << c.seed; }

// Every tensor of one forward call and one backward call, contiguous.
struct Operands {
  Config cfg;
  // forward inputs
  Tensor x, phi, alpha, bias, gamma;
  // forward outputs (inv_rms, h_mix, h_pre, h_post are also backward inputs)
  Tensor h_in, h_post, h_res, inv_rms, h_mix, h_pre;
  // backward inputs
  Tensor grad_h_in, grad_h_post, grad_h_res, grad_x_post;
  // backward outputs
  Tensor grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma;
  mhc::Options options;
};

// Random, dtype-rounded inputs; outputs filled with kOutputFill. The forward
// outputs are allocated even without caches (the backward reads them).
inline Operands make_operands(const Config& c) {
  Operands o;
  o.cfg = c;
  o.options.norm_eps = c.norm_eps;
  o.options.hc_eps = c.hc_eps;
  Rng rng(c.seed * 0x2545f4914f6cdd1dull + 17);
  const int64_t N = c.N, D = c.D, K = c.K(), F = c.F();
  auto fill = [&](Tensor& t, auto draw) { for (int64_t i = 0; i < t.numel(); ++i) t.set(i, draw()); };
  o.x = make_tensor(c.dtype, c.token_shape({N, D}));
  fill(o.x, [&] { return rng.normal() * (0.5 + rng.uniform()); });
  o.phi = make_tensor(DType::fp32, {F, K});
  const double phi_scale = 1.0 / std::sqrt(double(K));
  fill(o.phi, [&] { return rng.uniform(-2, 2) * phi_scale; });
  o.alpha = make_tensor(DType::fp32, {alpha_entries(c.form)});
  fill(o.alpha, [&] { return rng.uniform(0.25, 1.5); });
  o.bias = make_tensor(DType::fp32, {F});
  fill(o.bias, [&] { return rng.uniform(-1, 1); });
  if (c.gamma) {
    o.gamma = make_tensor(DType::fp32, {N, D});
    fill(o.gamma, [&] { return rng.uniform(0.5, 1.5); });
  }
  o.h_in = make_tensor(c.dtype, c.token_shape({D}), kOutputFill);
  if (c.form != FForm::head) o.h_post = make_tensor(DType::fp32, c.token_shape({N}), kOutputFill);
  if (alpha_entries(c.form) == 3) o.h_res = make_tensor(DType::fp32, c.residual_shape(), kOutputFill);
  o.inv_rms = make_tensor(DType::fp32, c.token_shape({}), kOutputFill);
  o.h_mix = make_tensor(DType::fp32, c.token_shape({F}), kOutputFill);
  o.h_pre = make_tensor(DType::fp32, c.token_shape({N}), kOutputFill);

  o.grad_h_in = make_tensor(c.dtype, c.token_shape({D}));
  fill(o.grad_h_in, [&] { return rng.normal(); });
  if (c.form != FForm::head) {
    o.grad_h_post = make_tensor(DType::fp32, c.token_shape({N}));
    fill(o.grad_h_post, [&] { return rng.normal(); });
  }
  if (alpha_entries(c.form) == 3) {
    o.grad_h_res = make_tensor(DType::fp32, c.residual_shape());
    fill(o.grad_h_res, [&] { return rng.normal(); });
  }
  if (c.grad_x_post) {
    o.grad_x_post = make_tensor(c.grad_x_post_fp32 ? DType::fp32 : c.dtype, c.token_shape({N, D}));
    fill(o.grad_x_post, [&] { return rng.normal(); });
  }
  o.grad_x = make_tensor(c.dtype, c.token_shape({N, D}), kOutputFill);
  o.grad_phi = make_tensor(DType::fp32, {F, K}, kOutputFill);
  o.grad_alpha = make_tensor(DType::fp32, {alpha_entries(c.form)}, kOutputFill);
  o.grad_bias = make_tensor(DType::fp32, {F}, kOutputFill);
  if (c.gamma) o.grad_gamma = make_tensor(DType::fp32, {N, D}, kOutputFill);
  return o;
}

inline mhc::PreForwardInputs forward_inputs(Operands& o) {
  return {o.x.view(), o.phi.view(), o.alpha.view(), o.bias.view(), o.gamma.optional_view()};
}
inline mhc::PreForwardOutputs forward_outputs(Operands& o) {
  mhc::PreForwardOutputs out{o.h_in.view(), o.h_post.optional_view(), o.h_res.optional_view(), {}, {}, {}};
  if (o.cfg.caches) {
    out.inv_rms = o.inv_rms.view();
    out.h_mix = o.h_mix.view();
    out.h_pre = o.h_pre.view();
  }
  return out;
}
inline mhc::PreBackwardInputs backward_inputs(Operands& o) {
  return {o.x.view(), o.phi.view(), o.alpha.view(), o.grad_h_in.view(), o.grad_h_post.optional_view(),
          o.grad_h_res.optional_view(), o.inv_rms.view(), o.h_mix.view(), o.h_pre.view(),
          o.h_post.optional_view(), o.gamma.optional_view(), o.grad_x_post.optional_view()};
}
inline mhc::PreBackwardOutputs backward_outputs(Operands& o) {
  return {o.grad_x.view(), o.grad_phi.view(), o.grad_alpha.view(), o.grad_bias.view(),
          o.grad_gamma.optional_view()};
}

// Forward with all three caches (whatever cfg.caches says), so the backward has them.
inline mhc::Status run_forward_with_caches(Operands& o) {
  mhc::PreForwardOutputs out = forward_outputs(o);
  out.inv_rms = o.inv_rms.view();
  out.h_mix = o.h_mix.view();
  out.h_pre = o.h_pre.view();
  return mhc::pre_forward(forward_inputs(o), out, o.options);
}

// ---------------------------------------------------------------- float64 upcasts

inline std::vector<double> values_or_empty(const Tensor& t) {
  return t.present() ? t.values() : std::vector<double>{};
}

inline mhc::kernels::reference::ForwardInputs64 forward64(const Operands& o) {
  mhc::kernels::reference::ForwardInputs64 in;
  in.dims = o.cfg.dims();
  in.x = o.x.values();
  in.phi = o.phi.values();
  in.alpha = o.alpha.values();
  in.bias = o.bias.values();
  in.gamma = values_or_empty(o.gamma);
  in.norm_eps = o.cfg.norm_eps;
  in.hc_eps = o.cfg.hc_eps;
  return in;
}

// The backward's inputs as the library read them, caches included (so the
// forward must have run).
inline mhc::kernels::reference::BackwardInputs64 backward64(const Operands& o) {
  mhc::kernels::reference::BackwardInputs64 in;
  in.dims = o.cfg.dims();
  in.x = o.x.values();
  in.phi = o.phi.values();
  in.alpha = o.alpha.values();
  in.gamma = values_or_empty(o.gamma);
  in.grad_h_in = o.grad_h_in.values();
  in.grad_h_post = values_or_empty(o.grad_h_post);
  in.grad_h_res = values_or_empty(o.grad_h_res);
  in.inv_rms = o.inv_rms.values();
  in.h_mix = o.h_mix.values();
  in.h_pre = o.h_pre.values();
  in.h_post = values_or_empty(o.h_post);
  in.grad_x_post = values_or_empty(o.grad_x_post);
  in.hc_eps = o.cfg.hc_eps;
  return in;
}

// Every tensor of Operands, with its name.
struct TensorMember {
  const char* name;
  Tensor Operands::*member;
};
inline const std::vector<TensorMember>& tensor_members() {
  static const std::vector<TensorMember> members = {
      {"x", &Operands::x}, {"phi", &Operands::phi}, {"alpha", &Operands::alpha},
      {"bias", &Operands::bias}, {"gamma", &Operands::gamma}, {"h_in", &Operands::h_in},
      {"h_post", &Operands::h_post}, {"h_res", &Operands::h_res}, {"inv_rms", &Operands::inv_rms},
      {"h_mix", &Operands::h_mix}, {"h_pre", &Operands::h_pre}, {"grad_h_in", &Operands::grad_h_in},
      {"grad_h_post", &Operands::grad_h_post}, {"grad_h_res", &Operands::grad_h_res},
      {"grad_x_post", &Operands::grad_x_post}, {"grad_x", &Operands::grad_x},
      {"grad_phi", &Operands::grad_phi}, {"grad_alpha", &Operands::grad_alpha},
      {"grad_bias", &Operands::grad_bias}, {"grad_gamma", &Operands::grad_gamma}};
  return members;
}

inline std::vector<const Tensor*> all_tensors(const Operands& o) {
  std::vector<const Tensor*> out;
  for (const TensorMember& m : tensor_members()) out.push_back(&(o.*m.member));
  return out;
}

}  // namespace mhc_test
