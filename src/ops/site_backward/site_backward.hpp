// The site backward (SPEC §15): one site's MhcPostBackward, MhcSinkhornBackward and
// MhcPreBackward in two steps around the sub-layer's backward. prepare is the
// post's driver without grad_x; finish is the site's pre backward (ops/pre_single_pass,
// V4 or V4.1) whose rows form the post's fp32 grad_x from H and grad_x_next in
// place of reading a grad_x_post tensor (kernels/pre_backward.hpp).
#pragma once

#include "core/post_problem.hpp"
#include "mhc/mhc.hpp"
#include "ops/described.hpp"
#include "ops/pre_single_pass/pre_single_pass.hpp"

namespace mhc::ops::site_backward {

Status validate_prepare(const SiteBackwardPrepareInputs& in, const SiteBackwardPrepareOutputs& out,
                        const Options& options, core::PostProblem* problem);
Status run_prepare_in_thread_workspace(const core::PostProblem& problem, int num_threads);

Status validate_finish(const SiteBackwardFinishInputs& in, const SiteBackwardFinishOutputs& out,
                       const Options& options, pre_single_pass::BackwardProblem* problem);
Status run_finish_in_thread_workspace(const pre_single_pass::BackwardProblem& problem, int num_threads);

}  // namespace mhc::ops::site_backward

// The operators' hooks for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(site_backward_prepare, core::PostProblem, SiteBackwardPrepare,
                       site_backward::validate_prepare, site_backward::run_prepare_in_thread_workspace)
MHC_DESCRIBED_OPERATOR(site_backward_finish, pre_single_pass::BackwardProblem, SiteBackwardFinish,
                       site_backward::validate_finish, site_backward::run_finish_in_thread_workspace)
