// MhcPostPre and its backward (SPEC §15): MhcPost of site s and site s+1's pre
// (V4: MhcPre + Sinkhorn; V4.1: MhcPreSinglePass), as the composition of those
// drivers: the chain's bits. The faces validate, size the workspace and run as
// for the other operators.
#pragma once

#include <cstddef>

#include "core/post_problem.hpp"
#include "mhc/mhc.hpp"
#include "ops/described.hpp"
#include "ops/pre_single_pass/pre_single_pass.hpp"

namespace mhc::ops::post_pre {

// The post writes x_next, which the pre reads.
struct ForwardProblem {
  core::PostProblem post;
  pre_single_pass::ForwardProblem pre;
};
// The pre's backward writes the gradient of x_next (x's dtype) into the workspace,
// where the post's backward reads it as its grad_out.
struct BackwardProblem {
  pre_single_pass::BackwardProblem pre;
  core::PostProblem post;
};

Status validate_forward(const PostPreForwardInputs& in, const PostPreForwardOutputs& out, const Options& options,
                        ForwardProblem* problem);
Status validate_backward(const PostPreBackwardInputs& in, const PostPreBackwardOutputs& out, const Options& options,
                         BackwardProblem* problem);

size_t forward_workspace_bytes(const ForwardProblem& problem, int num_threads = 0);
size_t backward_workspace_bytes(const BackwardProblem& problem, int num_threads = 0);
Status run_forward(const ForwardProblem& problem, void* workspace, size_t bytes, int num_threads);
Status run_backward(const BackwardProblem& problem, void* workspace, size_t bytes, int num_threads);

Status run_forward_in_thread_workspace(const ForwardProblem& problem, int num_threads);
Status run_backward_in_thread_workspace(const BackwardProblem& problem, int num_threads);

}  // namespace mhc::ops::post_pre

// The operator's hooks for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(post_pre_forward, post_pre::ForwardProblem, PostPreForward, post_pre::validate_forward,
                       post_pre::run_forward_in_thread_workspace)
MHC_DESCRIBED_OPERATOR(post_pre_backward, post_pre::BackwardProblem, PostPreBackward, post_pre::validate_backward,
                       post_pre::run_backward_in_thread_workspace)
