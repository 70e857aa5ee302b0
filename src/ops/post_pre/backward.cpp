// MhcPostPre's backward (SPEC §15): site s+1's pre backward (V4 or V4.1) into
// the gradient of x_next in the workspace, rounded once to x's dtype, then site
// s's MhcPostBackward from it.
#include <algorithm>

#include "ops/call_resources.hpp"
#include "ops/composition.hpp"
#include "ops/post/post.hpp"
#include "ops/post_pre/post_pre.hpp"
#include "ops/pre/operands.hpp"

namespace mhc::ops::post_pre {
namespace {

// The workspace: the gradient of x_next [T,N,D] in x's dtype, then the inner drivers'.
struct BackwardLayout {
  size_t grad_x_next_bytes, rest;
};

BackwardProblem placed(const BackwardProblem& original, void* grad_x_next) {
  BackwardProblem p = original;
  p.pre.pre.grad_x = contiguous_like(original.pre.pre.grad_x, grad_x_next);
  p.post.grad_out = contiguous_like(original.post.grad_out, grad_x_next);
  return p;
}

BackwardLayout backward_layout(const BackwardProblem& problem, int num_threads) {
  const core::Dims& d = problem.post.dims;
  const BackwardProblem sized = placed(problem, kSizingAddress);
  return {aligned64(size_t(d.T * d.K) * size_t(core::element_size(problem.post.x_dtype))),
          std::max(pre_single_pass::backward_workspace_bytes(sized.pre, num_threads),
                   post::backward_workspace_bytes(sized.post, num_threads))};
}

}  // namespace

Status validate_backward(const PostPreBackwardInputs& in, const PostPreBackwardOutputs& out, const Options& options,
                         BackwardProblem* p) {
  BackwardProblem problem;
  // x_next stands for the gradient the post's backward reads (its shape and dtype).
  MHC_RETURN_IF_ERROR(renamed(post::validate_backward({in.x_next, in.x, in.h_res, in.h_out, in.h_post},
                                                      {out.grad_x, out.grad_h_res, out.grad_h_out, out.grad_h_post},
                                                      options, &problem.post),
                              {{"grad_out", "x_next"}}));
  MHC_RETURN_IF_ERROR(check_site_variant(in.single_pass, in.pre_mix.has_value(), out.grad_pre_mix.has_value()));
  // x_next stands for the gradient the pre's backward writes into the workspace.
  const PreSinglePassBackwardInputs pre_in{
      in.x_next,  in.phi,      in.alpha,     in.bias,    in.gamma,         in.pre_mix,
      in.grad_h_in, in.grad_h_pre, in.grad_h_post_next, in.grad_h_res_next, in.inv_rms, in.h_mix,
      in.h_pre,   in.h_post_next, in.grad_x_next, in.sinkhorn_eps, in.num_iters};
  const PreSinglePassBackwardOutputs pre_out{in.x_next,     out.grad_pre_mix, out.grad_phi,
                                             out.grad_alpha, out.grad_bias,   out.grad_gamma};
  MHC_RETURN_IF_ERROR(renamed(pre_single_pass::validate_backward(pre_in, pre_out, options, &problem.pre,
                                                                 {.grad_x_in_workspace = true}),
                              {{"x", "x_next"},
                               {"grad_h_post", "grad_h_post_next"},
                               {"grad_h_res", "grad_h_res_next"},
                               {"h_post", "h_post_next"},
                               {"grad_x_post", "grad_x_next"}}));
  problem.pre.own_h_pre = in.single_pass == 0;
  NamedList inputs = {{"x", &in.x},           {"h_out", &in.h_out},   {"h_post", &in.h_post},
                      {"phi", &in.phi},       {"alpha", &in.alpha},   {"bias", &in.bias},
                      {"x_next", &in.x_next}, {"grad_h_in", &in.grad_h_in}, {"grad_h_post_next", &in.grad_h_post_next},
                      {"grad_h_res_next", &in.grad_h_res_next}, {"inv_rms", &in.inv_rms}, {"h_mix", &in.h_mix},
                      {"h_pre", &in.h_pre},   {"h_post_next", &in.h_post_next}};
  if (in.h_res) inputs.push_back({"h_res", &*in.h_res});
  if (in.gamma) inputs.push_back({"gamma", &*in.gamma});
  if (in.pre_mix) inputs.push_back({"pre_mix", &*in.pre_mix});
  if (in.grad_x_next) inputs.push_back({"grad_x_next", &*in.grad_x_next});
  if (in.grad_h_pre) inputs.push_back({"grad_h_pre", &*in.grad_h_pre});
  NamedList outputs = {{"grad_x", &out.grad_x},         {"grad_h_out", &out.grad_h_out},
                       {"grad_h_post", &out.grad_h_post}, {"grad_phi", &out.grad_phi},
                       {"grad_alpha", &out.grad_alpha},   {"grad_bias", &out.grad_bias}};
  if (out.grad_h_res) outputs.push_back({"grad_h_res", &*out.grad_h_res});
  if (out.grad_pre_mix) outputs.push_back({"grad_pre_mix", &*out.grad_pre_mix});
  if (out.grad_gamma) outputs.push_back({"grad_gamma", &*out.grad_gamma});
  MHC_RETURN_IF_ERROR(renamed(check_outputs_disjoint(inputs, outputs, &out.grad_x,
                                                     in.grad_x_next ? &*in.grad_x_next : nullptr),
                              {{"grad_x_post", "grad_x_next"}}));
  *p = problem;
  return {};
}

size_t backward_workspace_bytes(const BackwardProblem& problem, int num_threads) {
  const BackwardLayout l = backward_layout(problem, num_threads);
  return l.grad_x_next_bytes + l.rest;
}

Status run_backward(const BackwardProblem& original, void* workspace, size_t bytes, int num_threads) {
  const BackwardLayout l = backward_layout(original, num_threads);
  if (Status s = workspace_error(l.grad_x_next_bytes + l.rest, bytes, workspace); !s.ok()) return s;
  char* base = static_cast<char*>(workspace);
  const BackwardProblem p = placed(original, base);
  char* rest = base == nullptr ? nullptr : base + l.grad_x_next_bytes;
  MHC_RETURN_IF_ERROR(pre_single_pass::run_backward(p.pre, rest, l.rest, num_threads));
  return post::run_backward(p.post, rest, l.rest, num_threads);
}

Status run_backward_in_thread_workspace(const BackwardProblem& problem, int num_threads) {
  return in_thread_workspace(backward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_backward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::post_pre
