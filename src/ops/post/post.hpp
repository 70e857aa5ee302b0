// MhcPost and MhcPostBackward (SPEC §11) for the faces: validate into a problem
// descriptor, size the workspace, run (the two-phase shape of pre_forward.hpp).
#pragma once

#include <cstddef>

#include "ops/described.hpp"
#include "core/post_problem.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops::post {

// What a face asks of validation besides SPEC's tensors.
struct Rules {
  bool fp32_grad_x = true;  // grad_x may be fp32 (the aclnn face keeps CANN's: x's dtype)
  bool grad_x = true;       // false: no grad_x, out.grad_x unread (the site backward's prepare, SPEC §15)
};

Status validate_forward(const PostForwardInputs& in, const PostForwardOutputs& out, const Options& options,
                        core::PostProblem* problem);
Status validate_backward(const PostBackwardInputs& in, const PostBackwardOutputs& out, const Options& options,
                         core::PostProblem* problem, const Rules& rules = {});

size_t forward_workspace_bytes(const core::PostProblem& problem, int num_threads = 0);
size_t backward_workspace_bytes(const core::PostProblem& problem, int num_threads = 0);
Status run_forward(const core::PostProblem& problem, void* workspace, size_t bytes, int num_threads);
Status run_backward(const core::PostProblem& problem, void* workspace, size_t bytes, int num_threads);

Status run_forward_in_thread_workspace(const core::PostProblem& problem, int num_threads);

// The forward of tokens [t0, t1), every column, on the calling thread: a fused
// operator's part (ops/post_pre), for problems whose tensors fit the kernels'
// views as they are (fits_in_place); scratch: forward_tokens_scratch_floats.
bool fits_in_place(const core::PostProblem& problem);
int64_t forward_tokens_scratch_floats(const core::PostProblem& problem);
void forward_tokens(const core::PostProblem& problem, float* scratch, int64_t t0, int64_t t1);
Status run_backward_in_thread_workspace(const core::PostProblem& problem, int num_threads);

}  // namespace mhc::ops::post

// The operator's hook for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(post_forward, core::PostProblem, PostForward, post::validate_forward,
                       post::run_forward_in_thread_workspace)
MHC_DESCRIBED_OPERATOR(post_backward, core::PostProblem, PostBackward, post::validate_backward,
                       post::run_backward_in_thread_workspace)
