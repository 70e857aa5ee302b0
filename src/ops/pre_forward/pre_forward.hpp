// MhcPre (SPEC §2) for the faces: validate into a problem descriptor, size the
// workspace, run. The two-phase shape of aclnn and oneDNN: validation and sizing
// write nothing; run writes only the outputs and the workspace it is given.
#pragma once

#include <cstddef>

#include "core/problem.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops::pre_forward {

// What a face asks of validation besides SPEC's tensors.
struct Rules {
  bool eps_values = true;  // eps finite and >= 0 (the aclnn face: CANN checks no eps value)
};

Status validate(const PreForwardInputs& in, const PreForwardOutputs& out, const Options& options,
                core::ForwardProblem* problem, const Rules& rules = {});
// Bytes of workspace run() needs at this thread count (<= 0: the default count); may be 0.
size_t workspace_bytes(const core::ForwardProblem& problem, int num_threads = 0);
// `workspace`: workspace_bytes(problem, num_threads) bytes aligned to 64 (nullptr when 0).
Status run(const core::ForwardProblem& problem, void* workspace, size_t workspace_bytes, int num_threads);

// run() in the calling thread's reused workspace, sized here (the C++ face's call).
Status run_in_thread_workspace(const core::ForwardProblem& problem, int num_threads);

}  // namespace mhc::ops::pre_forward
