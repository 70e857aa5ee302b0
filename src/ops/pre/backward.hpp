// MhcPreBackward (SPEC §3) for the faces: validate into a problem descriptor,
// size the workspace, run (the two-phase shape of forward.hpp).
#pragma once

#include <cstddef>

#include "ops/described.hpp"
#include "core/problem.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops::pre::backward {

// What a face asks of validation besides SPEC's tensors.
struct Rules {
  bool eps_values = true;  // eps finite and >= 0 (the aclnn face: CANN checks no eps value)
  // grad_x is a composed operator's workspace (ops/post_pre): its view gives the
  // shape and dtype only, its memory is not checked against the caller's.
  bool grad_x_in_workspace = false;
};

Status validate(const PreBackwardInputs& in, const PreBackwardOutputs& out, const Options& options,
                core::BackwardProblem* problem, const Rules& rules = {});
size_t workspace_bytes(const core::BackwardProblem& problem, int num_threads = 0);
Status run(const core::BackwardProblem& problem, void* workspace, size_t workspace_bytes, int num_threads);

// run() in the calling thread's reused workspace, sized here (the C++ face's call).
Status run_in_thread_workspace(const core::BackwardProblem& problem, int num_threads);

}  // namespace mhc::ops::pre::backward

// The operator's hook for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(pre_backward, core::BackwardProblem, PreBackward, pre::backward::validate,
                       pre::backward::run_in_thread_workspace)
