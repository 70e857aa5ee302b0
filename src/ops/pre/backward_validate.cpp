// MhcPreBackward's validation: every tensor of SPEC §4 checked, in argument
// order, into a problem descriptor. Nothing here writes memory that belongs to the caller.
#include <optional>
#include <vector>

#include "ops/pre/backward.hpp"
#include "ops/pre/operands.hpp"

namespace mhc::ops::pre::backward {

// grad_x_post: x's shape, in x's dtype or fp32 (our extension: MhcPostBackward's
// fp32 grad_x feeds it without a rounding; the aclnn face keeps CANN's x's dtype).
static Status check_grad_x_post(const TensorView& v, const TokenSpace& space, const ShapeOption& shape) {
  if (v.dtype != DType::fp32) return check_like_x_or("grad_x_post", v, space, shape, " or fp32");
  MHC_RETURN_IF_ERROR(check_view("grad_x_post", v));
  return check_shape("grad_x_post", v, {shape}, nullptr);
}

Status validate(const PreBackwardInputs& in, const PreBackwardOutputs& out, const Options& options,
                core::BackwardProblem* p, const Rules& rules) {
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_x("x", in.x, &s));
  core::Dims& d = s.dims;
  MHC_RETURN_IF_ERROR(check_phi_alpha("phi", in.phi, "alpha", in.alpha, &d));
  MHC_RETURN_IF_ERROR(check_like_x("grad_h_in", in.grad_h_in, s, s.shape({"D"}, {d.D})));
  // The head has no post branch, a two-entry alpha no residual one: the tensors
  // of a missing branch given are not read and not checked (SPEC §6).
  const std::optional<TensorView> grad_h_post = d.head ? std::nullopt : in.grad_h_post;
  const std::optional<TensorView> h_post = d.head ? std::nullopt : in.h_post;
  if (!d.head && !grad_h_post)
    return null_error("grad_h_post", "required (alpha has 2 or 3 entries), got none");
  if (grad_h_post) MHC_RETURN_IF_ERROR(check_fp32("grad_h_post", *grad_h_post, {s.shape({"N"}, {d.N})}));
  const std::optional<TensorView> grad_h_res = d.alpha_entries() == 3 ? in.grad_h_res : std::nullopt;
  if (d.alpha_entries() == 3 && !grad_h_res)
    return null_error("grad_h_res", "required (alpha has 3 entries), got none");
  if (grad_h_res) MHC_RETURN_IF_ERROR(check_fp32("grad_h_res", *grad_h_res, residual_shapes(s)));
  MHC_RETURN_IF_ERROR(check_fp32("inv_rms", in.inv_rms, {s.shape({}, {})}));
  MHC_RETURN_IF_ERROR(check_fp32("h_mix", in.h_mix, {s.shape({"F"}, {d.F})}));
  MHC_RETURN_IF_ERROR(check_fp32("h_pre", in.h_pre, {s.shape({"N"}, {d.N})}));
  if (!d.head && !h_post) return null_error("h_post", "required (alpha has 2 or 3 entries), got none");
  if (h_post) MHC_RETURN_IF_ERROR(check_fp32("h_post", *h_post, {s.shape({"N"}, {d.N})}));
  if (in.gamma) MHC_RETURN_IF_ERROR(check_gamma("gamma", *in.gamma, d));
  const ShapeOption x_shape = s.shape({"N", "D"}, {d.N, d.D});
  if (in.grad_x_post) MHC_RETURN_IF_ERROR(check_grad_x_post(*in.grad_x_post, s, x_shape));
  if (rules.eps_values) MHC_RETURN_IF_ERROR(check_eps("hc_eps", options.hc_eps));
  MHC_RETURN_IF_ERROR(check_threads(options.num_threads));
  bool hf32 = false;
  MHC_RETURN_IF_ERROR(check_matmul_precision(options.matmul_precision, &hf32));

  MHC_RETURN_IF_ERROR(check_like_x("grad_x", out.grad_x, s, x_shape));
  MHC_RETURN_IF_ERROR(check_fp32("grad_phi", out.grad_phi, {{{d.F, d.K}, {"F", "K"}}}));
  const int64_t entries = d.alpha_entries();
  MHC_RETURN_IF_ERROR(check_fp32("grad_alpha", out.grad_alpha, {{{entries}, {}, "[" + std::to_string(entries) + "] (alpha's shape)"}}));
  MHC_RETURN_IF_ERROR(check_fp32("grad_bias", out.grad_bias, {{{d.F}, {"F"}}}));
  if (in.gamma && !out.grad_gamma)
    return null_error("grad_gamma", "required when gamma is given, got none");
  if (!in.gamma && out.grad_gamma)
    return shape_error("grad_gamma", "no tensor (gamma is not given)", *out.grad_gamma);
  if (out.grad_gamma) MHC_RETURN_IF_ERROR(check_gamma("grad_gamma", *out.grad_gamma, d));

  NamedList inputs = {{"x", &in.x}, {"phi", &in.phi}, {"alpha", &in.alpha},
                               {"grad_h_in", &in.grad_h_in}, {"inv_rms", &in.inv_rms},
                               {"h_mix", &in.h_mix}, {"h_pre", &in.h_pre}};
  if (grad_h_post) inputs.push_back({"grad_h_post", &*grad_h_post});
  if (h_post) inputs.push_back({"h_post", &*h_post});
  if (grad_h_res) inputs.push_back({"grad_h_res", &*grad_h_res});
  if (in.gamma) inputs.push_back({"gamma", &*in.gamma});
  if (in.grad_x_post) inputs.push_back({"grad_x_post", &*in.grad_x_post});
  NamedList outputs;
  if (!rules.grad_x_in_workspace) outputs.push_back({"grad_x", &out.grad_x});
  for (const Named& n : {Named{"grad_phi", &out.grad_phi}, Named{"grad_alpha", &out.grad_alpha},
                         Named{"grad_bias", &out.grad_bias}})
    outputs.push_back(n);
  if (out.grad_gamma) outputs.push_back({"grad_gamma", &*out.grad_gamma});
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, &out.grad_x,
                                             in.grad_x_post ? &*in.grad_x_post : nullptr));

  Isa isa;
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &isa));

  core::BackwardProblem problem;
  problem.dims = d;
  problem.isa = isa;
  problem.hf32 = hf32;
  problem.hc_eps = options.hc_eps;
  problem.x = s.resolve(in.x);
  problem.phi = resolve_plain_tensor(in.phi);
  problem.alpha = resolve_plain_tensor(in.alpha);
  problem.grad_h_in = s.resolve(in.grad_h_in);
  if (grad_h_post) problem.grad_h_post = s.resolve(*grad_h_post);
  if (grad_h_res) problem.grad_h_res = s.resolve(*grad_h_res);
  problem.inv_rms = s.resolve(in.inv_rms);
  problem.h_mix = s.resolve(in.h_mix);
  problem.h_pre = s.resolve(in.h_pre);
  if (h_post) problem.h_post = s.resolve(*h_post);
  if (in.gamma) problem.gamma = resolve_plain_tensor(*in.gamma);
  if (in.grad_x_post) problem.grad_x_post = s.resolve(*in.grad_x_post);
  problem.grad_x = s.resolve(out.grad_x);
  problem.grad_phi = resolve_plain_tensor(out.grad_phi);
  problem.grad_alpha = resolve_plain_tensor(out.grad_alpha);
  problem.grad_bias = resolve_plain_tensor(out.grad_bias);
  if (out.grad_gamma) problem.grad_gamma = resolve_plain_tensor(*out.grad_gamma);
  *p = problem;
  return {};
}

}  // namespace mhc::ops::pre::backward
