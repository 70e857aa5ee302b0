// MhcPreSinkhorn and its backward (SPEC §12), CANN's fused pair, as the
// composition of the unfused drivers: the same bits as the chain. The faces
// validate, size the workspace and run as for the other operators.
#pragma once

#include <cstddef>

#include "ops/described.hpp"
#include "core/problem.hpp"
#include "core/sinkhorn_problem.hpp"
#include "mhc/mhc.hpp"
#include "ops/pre_single_pass/pre_single_pass.hpp"

namespace mhc::ops::pre_sinkhorn {

struct Rules {
  bool eps_values = true;  // norm_eps and hc_eps finite and >= 0 (the aclnn face: CANN checks none)
};

// The single pass's V4 form (h_in by the site's own h_pre): pre_forward writes
// z_res into the workspace, sinkhorn_forward reads it there.
using ForwardProblem = pre_single_pass::ForwardProblem;
// sinkhorn_backward writes grad_z into the workspace, h_post is recomputed there
// from the caches; pre_backward reads both.
struct BackwardProblem {
  core::SinkhornProblem sinkhorn;
  core::BackwardProblem pre;
  core::Strided bias;  // [F], for h_post
  float norm_eps = 0.0f;
};

Status validate_forward(const PreSinkhornForwardInputs& in, const PreSinkhornForwardOutputs& out,
                        const Options& options, ForwardProblem* problem, const Rules& rules = {});
Status validate_backward(const PreSinkhornBackwardInputs& in, const PreSinkhornBackwardOutputs& out,
                         const Options& options, BackwardProblem* problem, const Rules& rules = {});

using pre_single_pass::forward_workspace_bytes;  // the forward is the single pass's V4 form
size_t backward_workspace_bytes(const BackwardProblem& problem, int num_threads = 0);
using pre_single_pass::run_forward;
Status run_backward(const BackwardProblem& problem, void* workspace, size_t bytes, int num_threads);

Status run_forward_in_thread_workspace(const ForwardProblem& problem, int num_threads);
Status run_backward_in_thread_workspace(const BackwardProblem& problem, int num_threads);

}  // namespace mhc::ops::pre_sinkhorn

// The operator's hook for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(pre_sinkhorn_forward, pre_sinkhorn::ForwardProblem, PreSinkhornForward, pre_sinkhorn::validate_forward,
                       pre_sinkhorn::run_forward_in_thread_workspace)
MHC_DESCRIBED_OPERATOR(pre_sinkhorn_backward, pre_sinkhorn::BackwardProblem, PreSinkhornBackward, pre_sinkhorn::validate_backward,
                       pre_sinkhorn::run_backward_in_thread_workspace)
