// The site backward's finish (SPEC §15): the site's pre backward as MhcPostPre's
// backward runs it (V4: own h_pre; V4.1: the single pass), its grad_x_post the
// post's fp32 grad_x formed in its rows from h_res and grad_x_next.
#include "ops/composition.hpp"
#include "ops/pre/operands.hpp"
#include "ops/site_backward/site_backward.hpp"

namespace mhc::ops::site_backward {

Status validate_finish(const SiteBackwardFinishInputs& in, const SiteBackwardFinishOutputs& out,
                       const Options& options, pre_single_pass::BackwardProblem* p) {
  MHC_RETURN_IF_ERROR(check_site_variant(in.single_pass, in.pre_mix.has_value(), out.grad_pre_mix.has_value()));
  pre_single_pass::BackwardProblem problem;
  // The pre backward's checks without grad_x_post; grad_x_next and h_res are this operator's own.
  const PreSinglePassBackwardInputs pre_in{in.x,        in.phi,      in.alpha,       in.bias,     in.gamma,
                                           in.pre_mix,  in.grad_h_in, in.grad_h_pre, in.grad_h_post, in.grad_h_res,
                                           in.inv_rms,  in.h_mix,    in.h_pre,       in.h_post,   std::nullopt,
                                           in.sinkhorn_eps, in.num_iters};
  const PreSinglePassBackwardOutputs pre_out{out.grad_x,     out.grad_pre_mix, out.grad_phi,
                                             out.grad_alpha, out.grad_bias,    out.grad_gamma};
  MHC_RETURN_IF_ERROR(pre_single_pass::validate_backward(pre_in, pre_out, options, &problem));
  TokenSpace s;
  MHC_RETURN_IF_ERROR(check_x("x", in.x, &s));
  const core::Dims& d = s.dims;
  if (in.h_res) MHC_RETURN_IF_ERROR(check_fp32("h_res", *in.h_res, {s.shape({"N", "N"}, {d.N, d.N})}));
  if (in.grad_x_next)  // the post's grad_out: x's dtype only
    MHC_RETURN_IF_ERROR(check_like_x("grad_x_next", *in.grad_x_next, s, s.shape({"N", "D"}, {d.N, d.D})));
  // The rows read all of a token's grad_x_next while they write its grad_x: no alias, not even an exact one.
  NamedList inputs;
  if (in.h_res) inputs.push_back({"h_res", &*in.h_res});
  if (in.grad_x_next) inputs.push_back({"grad_x_next", &*in.grad_x_next});
  NamedList outputs = {{"grad_x", &out.grad_x},         {"grad_phi", &out.grad_phi},
                       {"grad_alpha", &out.grad_alpha}, {"grad_bias", &out.grad_bias}};
  if (out.grad_pre_mix) outputs.push_back({"grad_pre_mix", &*out.grad_pre_mix});
  if (out.grad_gamma) outputs.push_back({"grad_gamma", &*out.grad_gamma});
  MHC_RETURN_IF_ERROR(check_outputs_disjoint(inputs, outputs, nullptr, nullptr));
  problem.own_h_pre = in.single_pass == 0;
  if (in.grad_x_next && in.h_res) {
    problem.pre.post_grad_out = s.resolve(*in.grad_x_next);
    problem.pre.post_h_res = s.resolve(*in.h_res);
  } else if (in.grad_x_next) {  // without H the post's grad_x is grad_x_next itself: read as grad_x_post
    problem.pre.grad_x_post = s.resolve(*in.grad_x_next);
  }
  *p = problem;
  return {};
}

Status run_finish_in_thread_workspace(const pre_single_pass::BackwardProblem& problem, int num_threads) {
  return pre_single_pass::run_backward_in_thread_workspace(problem, num_threads);
}

}  // namespace mhc::ops::site_backward
