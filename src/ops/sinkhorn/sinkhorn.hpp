// MhcSinkhorn and MhcSinkhornBackward (SPEC §10) for the faces: validate into a
// problem descriptor, size the workspace, run (the two-phase shape of pre_forward.hpp).
#pragma once

#include <cstddef>

#include "ops/described.hpp"
#include "core/sinkhorn_problem.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops::sinkhorn {

// What a face asks of validation besides SPEC's tensors.
struct Rules {
  bool eps_values = true;  // eps finite and >= 0 (the aclnn face: CANN checks no eps value)
  // The fused pair (ops/pre_sinkhorn): the forward's z and the backward's grad_z
  // are that driver's workspace, the views only give their shapes; their memory
  // is not checked against the caller's.
  bool driver_buffer = false;
};

Status validate_forward(const SinkhornForwardInputs& in, const SinkhornForwardOutputs& out, const Options& options,
                        core::SinkhornProblem* problem, const Rules& rules = {});
Status validate_backward(const SinkhornBackwardInputs& in, const SinkhornBackwardOutputs& out,
                         const Options& options, core::SinkhornProblem* problem, const Rules& rules = {});

// Bytes of workspace at this thread count (<= 0: the default); may be 0.
size_t forward_workspace_bytes(const core::SinkhornProblem& problem, int num_threads = 0);
size_t backward_workspace_bytes(const core::SinkhornProblem& problem, int num_threads = 0);
Status run_forward(const core::SinkhornProblem& problem, void* workspace, size_t bytes, int num_threads);
Status run_backward(const core::SinkhornProblem& problem, void* workspace, size_t bytes, int num_threads);

Status run_forward_in_thread_workspace(const core::SinkhornProblem& problem, int num_threads);
Status run_backward_in_thread_workspace(const core::SinkhornProblem& problem, int num_threads);

}  // namespace mhc::ops::sinkhorn

// The operator's hook for the C++ face (ops/described.hpp).
MHC_DESCRIBED_OPERATOR(sinkhorn_forward, core::SinkhornProblem, SinkhornForward, sinkhorn::validate_forward,
                       sinkhorn::run_forward_in_thread_workspace)
MHC_DESCRIBED_OPERATOR(sinkhorn_backward, core::SinkhornProblem, SinkhornBackward, sinkhorn::validate_backward,
                       sinkhorn::run_backward_in_thread_workspace)
