// The site backward's prepare (SPEC §15): MhcPostBackward's validation and driver
// with no grad_x, so the site's gradient of x is written once, by finish.
#include "ops/composition.hpp"
#include "ops/post/post.hpp"
#include "ops/pre/operands.hpp"
#include "ops/site_backward/site_backward.hpp"

namespace mhc::ops::site_backward {

Status validate_prepare(const SiteBackwardPrepareInputs& in, const SiteBackwardPrepareOutputs& out,
                        const Options& options, core::PostProblem* problem) {
  return renamed(post::validate_backward({in.grad_x_next, in.x, in.h_res, in.h_out, in.h_post},
                                         {TensorView{}, out.grad_h_res, out.grad_h_out, out.grad_h_post}, options,
                                         problem, {.grad_x = false}),
                 {{"grad_out", "grad_x_next"}});
}

Status run_prepare_in_thread_workspace(const core::PostProblem& problem, int num_threads) {
  return post::run_backward_in_thread_workspace(problem, num_threads);
}

}  // namespace mhc::ops::site_backward
