// The operator layer: validation -> problem descriptor -> plan -> kernels.
// Faces (C++, C, aclnn) call only these. The split into validate / workspace /
// run is the two-phase shape of aclnn (and oneDNN): validation and sizing write
// nothing; run writes only outputs and the workspace it is given.
#pragma once

#include <cstddef>

#include "core/problem.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops {

Status validate_forward(const PreForwardInputs& in, const PreForwardOutputs& out,
                        const Options& options, core::ForwardProblem* problem);
Status validate_backward(const PreBackwardInputs& in, const PreBackwardOutputs& out,
                         const Options& options, core::BackwardProblem* problem);

// Bytes of scratch memory run_* needs for this problem at this thread count
// (<= 0: the default count); may be 0. Pass the same num_threads to run_*.
size_t forward_workspace_bytes(const core::ForwardProblem& problem, int num_threads = 0);
size_t backward_workspace_bytes(const core::BackwardProblem& problem, int num_threads = 0);

// Run a validated problem. `workspace` must hold workspace_bytes(problem) bytes,
// aligned to 64 (nullptr allowed when that is 0). num_threads <= 0: default.
Status run_forward(const core::ForwardProblem& problem, void* workspace, size_t workspace_bytes,
                   int num_threads);
Status run_backward(const core::BackwardProblem& problem, void* workspace,
                    size_t workspace_bytes, int num_threads);

}  // namespace mhc::ops
