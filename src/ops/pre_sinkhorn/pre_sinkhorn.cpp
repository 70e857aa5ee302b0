// MhcPreSinkhorn and its backward (SPEC §12): the validation of the fused
// arguments into the two unfused problems, and their runs one after the other
// over buffers in the workspace: z_res (forward), grad_z and h_post (backward).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/token_math.hpp"
#include "ops/call_resources.hpp"
#include "ops/pre/backward.hpp"
#include "ops/pre/forward.hpp"
#include "ops/pre/operands.hpp"
#include "ops/composition.hpp"
#include "ops/pre_sinkhorn/pre_sinkhorn.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"

namespace mhc::ops::pre_sinkhorn {
namespace {

// CANN's [.., 1] inv_rms as the pre operators' [..] (other views as they are).
TensorView without_unit_dim(const TensorView& v, const TensorView& x) {
  if (v.rank != x.rank - 1 || v.rank < 2 || v.shape[v.rank - 1] != 1) return v;
  TensorView u = v;
  u.rank = v.rank - 1;
  return u;
}

struct BackwardLayout {
  size_t grad_z_bytes, h_post_bytes, rest;
};
BackwardLayout backward_layout(const BackwardProblem& problem, int num_threads) {
  BackwardProblem sized = problem;
  sized.sinkhorn.grad_z = contiguous_like(problem.sinkhorn.grad_z, kSizingAddress);
  sized.pre.grad_h_res = contiguous_like(problem.pre.grad_h_res, kSizingAddress);
  sized.pre.h_post = contiguous_like(problem.pre.h_post, kSizingAddress);
  const core::Dims& d = problem.pre.dims;
  return {aligned64(size_t(d.T * d.R) * sizeof(float)), aligned64(size_t(d.T * d.N) * sizeof(float)),
          std::max(sinkhorn::backward_workspace_bytes(sized.sinkhorn, num_threads),
                   pre::backward::workspace_bytes(sized.pre, num_threads))};
}

}  // namespace

Status validate_forward(const PreSinkhornForwardInputs& in, const PreSinkhornForwardOutputs& out,
                        const Options& options, ForwardProblem* p, const Rules& rules) {
  const int caches = int(bool(out.inv_rms)) + int(bool(out.h_mix)) + int(bool(out.h_pre)) + int(bool(out.norm_out)) +
                     int(bool(out.sum_out));
  if (caches != 0 && caches != 5) {
    const char* missing = !out.inv_rms ? "inv_rms" : !out.h_mix ? "h_mix" : !out.h_pre ? "h_pre"
                          : !out.norm_out ? "norm_out" : "sum_out";
    return null_error(missing,
                      "the caches inv_rms, h_mix, h_pre, norm_out, sum_out come all five or none; this one is missing");
  }
  ForwardProblem problem;
  MHC_RETURN_IF_ERROR(check_residual_rows(in.x, in.phi, "the fused pair's"));
  std::optional<TensorView> inv_rms = out.inv_rms;
  if (inv_rms) inv_rms = without_unit_dim(*inv_rms, in.x);
  const PreForwardInputs pre_in{in.x, in.phi, in.alpha, in.bias, std::nullopt};
  const PreForwardOutputs pre_out{out.h_in, out.h_post, out.h_res, inv_rms, out.h_mix, out.h_pre};
  MHC_RETURN_IF_ERROR(pre::forward::validate(pre_in, pre_out, options, &problem.pre, {.eps_values = rules.eps_values}));
  const core::Dims& d = problem.pre.dims;
  MHC_RETURN_IF_ERROR(check_three_entries(d, in.alpha, "the fused pair has the residual branch"));
  const int token_dims = d.bsnd ? 2 : 1;
  const TensorView h_res = as_matrices(out.h_res, d.N, token_dims);
  const SinkhornForwardInputs sinkhorn_in{h_res, options.hc_eps, in.num_iters};
  const SinkhornForwardOutputs sinkhorn_out{h_res, out.norm_out, out.sum_out};
  MHC_RETURN_IF_ERROR(sinkhorn::validate_forward(sinkhorn_in, sinkhorn_out, options, &problem.sinkhorn,
                                                 {.eps_values = rules.eps_values, .driver_buffer = true}));
  if (caches == 5) {  // the Sinkhorn's caches against everything else of the call
    NamedList inputs = {{"x", &in.x}, {"phi", &in.phi}, {"alpha", &in.alpha}, {"bias", &in.bias}};
    NamedList outputs = {{"h_in", &out.h_in},         {"h_post", &out.h_post}, {"h_res", &out.h_res},
                                  {"inv_rms", &*out.inv_rms}, {"h_mix", &*out.h_mix},  {"h_pre", &*out.h_pre},
                                  {"norm_out", &*out.norm_out}, {"sum_out", &*out.sum_out}};
    MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));
  }
  *p = problem;
  return {};
}

Status validate_backward(const PreSinkhornBackwardInputs& in, const PreSinkhornBackwardOutputs& out,
                         const Options& options, BackwardProblem* p, const Rules& rules) {
  BackwardProblem problem;
  MHC_RETURN_IF_ERROR(check_residual_rows(in.x, in.phi, "the fused pair's"));
  // h_post is recomputed into the workspace: grad_h_post's view stands for its shape.
  const PreBackwardInputs pre_in{in.x,      in.phi,   in.alpha,       in.grad_h_in,
                                 in.grad_h_post, in.grad_h_res, without_unit_dim(in.inv_rms, in.x),
                                 in.h_mix,  in.h_pre, in.grad_h_post, std::nullopt, std::nullopt};
  const PreBackwardOutputs pre_out{out.grad_x, out.grad_phi, out.grad_alpha, out.grad_bias, std::nullopt};
  MHC_RETURN_IF_ERROR(pre::backward::validate(pre_in, pre_out, options, &problem.pre, {.eps_values = rules.eps_values}));
  const core::Dims& d = problem.pre.dims;
  MHC_RETURN_IF_ERROR(check_three_entries(d, in.alpha, "the fused pair has the residual branch"));
  MHC_RETURN_IF_ERROR(check_fp32("bias", in.bias, {{{d.F}, {"F"}}}));
  const int token_dims = d.bsnd ? 2 : 1;
  const TensorView grad_h_res = as_matrices(in.grad_h_res, d.N, token_dims);
  const SinkhornBackwardInputs sinkhorn_in{grad_h_res, in.norm_out, in.sum_out, std::nullopt};
  const SinkhornBackwardOutputs sinkhorn_out{grad_h_res};
  MHC_RETURN_IF_ERROR(sinkhorn::validate_backward(sinkhorn_in, sinkhorn_out, options, &problem.sinkhorn,
                                                  {.eps_values = rules.eps_values, .driver_buffer = true}));
  const NamedList inputs = {{"bias", &in.bias}, {"sum_out", &in.sum_out}, {"norm_out", &in.norm_out}};
  const NamedList outputs = {{"grad_x", &out.grad_x}, {"grad_phi", &out.grad_phi},
                                      {"grad_alpha", &out.grad_alpha}, {"grad_bias", &out.grad_bias}};
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));
  problem.bias = resolve_plain_tensor(in.bias);
  *p = problem;
  return {};
}

size_t backward_workspace_bytes(const BackwardProblem& problem, int num_threads) {
  const BackwardLayout l = backward_layout(problem, num_threads);
  return l.grad_z_bytes + l.h_post_bytes + l.rest;
}

Status run_backward(const BackwardProblem& original, void* workspace, size_t bytes, int num_threads) {
  const BackwardLayout l = backward_layout(original, num_threads);
  if (Status s = workspace_error(l.grad_z_bytes + l.h_post_bytes + l.rest, bytes, workspace); !s.ok()) return s;
  const core::Dims& d = original.pre.dims;  // T = 0 still runs pre_backward: zero gradients
  char* base = static_cast<char*>(workspace);
  BackwardProblem p = original;
  p.sinkhorn.grad_z = contiguous_like(original.sinkhorn.grad_z, base);
  p.pre.grad_h_res = contiguous_like(original.pre.grad_h_res, base);
  p.pre.h_post = contiguous_like(original.pre.h_post, base + l.grad_z_bytes);
  char* rest = base == nullptr ? nullptr : base + l.grad_z_bytes + l.h_post_bytes;
  MHC_RETURN_IF_ERROR(sinkhorn::run_backward(p.sinkhorn, rest, l.rest, num_threads));
  // h_post = 2 sigma(alpha_post (r m) + bias) from the caches, as the fp32 families' forward forms it.
  const float alpha_post = p.pre.alpha.load(p.pre.alpha.at(0, 1));
  for (int64_t t = 0; t < d.T; ++t) {
    const float r = p.pre.inv_rms.load(p.pre.inv_rms.token_offset(t));
    for (int64_t n = 0; n < d.N; ++n) {
      const float m = p.pre.h_mix.load(p.pre.h_mix.at(t, 0, d.N + n));
      const float z_post = alpha_post * (r * m) + p.bias.load(p.bias.at(0, d.N + n));
      p.pre.h_post.store(p.pre.h_post.at(t, 0, n), 2.0f * kernels::common::sigmoid(z_post));
    }
  }
  return pre::backward::run(p.pre, rest, l.rest, num_threads);
}

Status run_forward_in_thread_workspace(const ForwardProblem& problem, int num_threads) {
  return in_thread_workspace(forward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_forward(problem, workspace, bytes, num_threads);
  });
}

Status run_backward_in_thread_workspace(const BackwardProblem& problem, int num_threads) {
  return in_thread_workspace(backward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_backward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::pre_sinkhorn
