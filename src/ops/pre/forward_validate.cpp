// MhcPre's validation: every tensor of SPEC §4 checked, in argument order, into
// a problem descriptor. Nothing here writes memory that belongs to the caller.
#include <optional>
#include <vector>

#include "ops/pre/forward.hpp"
#include "ops/pre/operands.hpp"
#include "ops/pre/prepared.hpp"

namespace mhc::ops::pre::forward {

Status validate(const PreForwardInputs& in, const PreForwardOutputs& out, const Options& options,
                core::ForwardProblem* p, const Rules& rules) {
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_x("x", in.x, &s));
  core::Dims& d = s.dims;
  MHC_RETURN_IF_ERROR(check_phi_alpha("phi", in.phi, "alpha", in.alpha, &d));
  MHC_RETURN_IF_ERROR(check_fp32("bias", in.bias, {{{d.F}, {"F"}}}));
  if (in.gamma) MHC_RETURN_IF_ERROR(check_gamma("gamma", *in.gamma, d));
  if (options.prepared != nullptr)
    MHC_RETURN_IF_ERROR(check_prepared_views(*options.prepared, in.phi, in.alpha, in.bias, in.gamma));
  if (rules.eps_values) {
    MHC_RETURN_IF_ERROR(check_eps("norm_eps", options.norm_eps));
    MHC_RETURN_IF_ERROR(check_eps("hc_eps", options.hc_eps));
  }
  MHC_RETURN_IF_ERROR(check_threads(options.num_threads));
  bool hf32 = false;
  MHC_RETURN_IF_ERROR(check_matmul_precision(options.matmul_precision, &hf32));

  MHC_RETURN_IF_ERROR(check_like_x("h_in", out.h_in, s, s.shape({"D"}, {d.D})));
  // The head has no post branch, a two-entry alpha no residual one: an h_post or
  // h_res given there is left untouched and not checked (SPEC §6, as CANN's forward).
  const std::optional<TensorView> h_post = d.head ? std::nullopt : out.h_post;
  if (!d.head && !h_post) return null_error("h_post", "required (alpha has 2 or 3 entries), got none");
  if (h_post) MHC_RETURN_IF_ERROR(check_fp32("h_post", *h_post, {s.shape({"N"}, {d.N})}));
  const std::optional<TensorView> h_res = d.alpha_entries() == 3 ? out.h_res : std::nullopt;
  if (d.alpha_entries() == 3 && !h_res) return null_error("h_res", "required (alpha has 3 entries), got none");
  if (h_res) MHC_RETURN_IF_ERROR(check_fp32("h_res", *h_res, residual_shapes(s)));
  const int caches = int(bool(out.inv_rms)) + int(bool(out.h_mix)) + int(bool(out.h_pre));
  if (caches != 0 && caches != 3) {
    const char* missing = !out.inv_rms ? "inv_rms" : !out.h_mix ? "h_mix" : "h_pre";
    return null_error(missing, "the caches inv_rms, h_mix, h_pre come all three or none; this one is missing");
  }
  if (caches == 3) {
    MHC_RETURN_IF_ERROR(check_fp32("inv_rms", *out.inv_rms, {s.shape({}, {})}));
    MHC_RETURN_IF_ERROR(check_fp32("h_mix", *out.h_mix, {s.shape({"F"}, {d.F})}));
    MHC_RETURN_IF_ERROR(check_fp32("h_pre", *out.h_pre, {s.shape({"N"}, {d.N})}));
  }

  NamedList inputs = {{"x", &in.x}, {"phi", &in.phi}, {"alpha", &in.alpha}, {"bias", &in.bias}};
  if (in.gamma) inputs.push_back({"gamma", &*in.gamma});
  NamedList outputs = {{"h_in", &out.h_in}};
  if (h_post) outputs.push_back({"h_post", &*h_post});
  if (h_res) outputs.push_back({"h_res", &*h_res});
  if (caches == 3) {
    outputs.push_back({"inv_rms", &*out.inv_rms});
    outputs.push_back({"h_mix", &*out.h_mix});
    outputs.push_back({"h_pre", &*out.h_pre});
  }
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));

  Isa isa;
  MHC_RETURN_IF_ERROR(check_isa(options.isa, &isa));

  core::ForwardProblem problem;
  problem.dims = d;
  problem.isa = isa;
  problem.hf32 = hf32;
  problem.norm_eps = options.norm_eps;
  problem.hc_eps = options.hc_eps;
  problem.prepared = options.prepared;
  problem.prepared_id = options.prepared != nullptr ? options.prepared->id() : 0;
  problem.x = s.resolve(in.x);
  problem.phi = resolve_plain_tensor(in.phi);
  problem.alpha = resolve_plain_tensor(in.alpha);
  problem.bias = resolve_plain_tensor(in.bias);
  if (in.gamma) problem.gamma = resolve_plain_tensor(*in.gamma);
  problem.h_in = s.resolve(out.h_in);
  if (h_post) problem.h_post = s.resolve(*h_post);
  if (h_res) problem.h_res = s.resolve(*h_res);
  if (caches == 3) {
    problem.inv_rms = s.resolve(*out.inv_rms);
    problem.h_mix = s.resolve(*out.h_mix);
    problem.h_pre = s.resolve(*out.h_pre);
  }
  *p = problem;
  return {};
}

}  // namespace mhc::ops::pre::forward
