// MhcPreSinglePass and its backward (SPEC §14), DeepSeek-V4.1's site, composed of
// the pre block's drivers (with the collapse's weights swapped for the carried
// pre-mix) and the Sinkhorn's. The faces validate, size the workspace and run as
// for the other operators.
#pragma once

#include <cstddef>

#include "core/problem.hpp"
#include "core/sinkhorn_problem.hpp"
#include "mhc/mhc.hpp"
#include "ops/described.hpp"
#include "ops/pre/forward.hpp"

namespace mhc::ops::pre_single_pass {

// pre_forward writes z_res into the workspace; sinkhorn_forward reads it there.
struct ForwardProblem {
  core::ForwardProblem pre;
  core::SinkhornProblem sinkhorn;
};
// z_res is formed again from the caches into the workspace, the Sinkhorn's
// backward (recomputed from z) writes grad_z beside it, pre_backward reads it.
// Without pre_mix the collapse's weights are (1, 0, ..) and without grad_h_pre its
// zeros: both one row in the workspace, at token stride 0.
struct BackwardProblem {
  core::SinkhornProblem sinkhorn;
  core::BackwardProblem pre;
  core::Strided bias;  // [F], for z_res
  // V4's site (MhcPostPre, SPEC §15): h_in collapsed with its own h_pre; a
  // grad_h_pre given adds to the collapse's sums.
  bool own_h_pre = false;
};

Status validate_forward(const PreSinglePassForwardInputs& in, const PreSinglePassForwardOutputs& out,
                        const Options& options, ForwardProblem* problem);
// What a composed operator (ops/post_pre) asks of validation besides SPEC's tensors.
struct Rules {
  bool grad_x_in_workspace = false;  // pre::backward::Rules'
};
Status validate_backward(const PreSinglePassBackwardInputs& in, const PreSinglePassBackwardOutputs& out,
                         const Options& options, BackwardProblem* problem, const Rules& rules = {});

size_t forward_workspace_bytes(const ForwardProblem& problem, int num_threads = 0);
size_t backward_workspace_bytes(const BackwardProblem& problem, int num_threads = 0);
// prologue: pre::forward::run's (what writes x, token range by token range).
Status run_forward(const ForwardProblem& problem, void* workspace, size_t bytes, int num_threads,
                   const pre::forward::TokenPrologue* prologue = nullptr);
Status run_backward(const BackwardProblem& problem, void* workspace, size_t bytes, int num_threads);

Status run_forward_in_thread_workspace(const ForwardProblem& problem, int num_threads);
Status run_backward_in_thread_workspace(const BackwardProblem& problem, int num_threads);

}  // namespace mhc::ops::pre_single_pass

// The operator's hooks for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(pre_single_pass_forward, pre_single_pass::ForwardProblem, PreSinglePassForward,
                       pre_single_pass::validate_forward, pre_single_pass::run_forward_in_thread_workspace)
MHC_DESCRIBED_OPERATOR(pre_single_pass_backward, pre_single_pass::BackwardProblem, PreSinglePassBackward,
                       pre_single_pass::validate_backward, pre_single_pass::run_backward_in_thread_workspace)
