// MhcPreBackward (SPEC §3) for the faces: validate into a problem descriptor,
// size the workspace, run (the two-phase shape of forward.hpp).
#pragma once

#include <cstddef>

#include "core/problem.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops::pre::backward {

// What a face asks of validation besides SPEC's tensors.
struct Rules {
  bool eps_values = true;  // eps finite and >= 0 (the aclnn face: CANN checks no eps value)
};

Status validate(const PreBackwardInputs& in, const PreBackwardOutputs& out, const Options& options,
                core::BackwardProblem* problem, const Rules& rules = {});
size_t workspace_bytes(const core::BackwardProblem& problem, int num_threads = 0);
Status run(const core::BackwardProblem& problem, void* workspace, size_t workspace_bytes, int num_threads);

// run() in the calling thread's reused workspace, sized here (the C++ face's call).
Status run_in_thread_workspace(const core::BackwardProblem& problem, int num_threads);

}  // namespace mhc::ops::pre::backward

// The described operators (src/description/operators.def) pre_backward: what the C++
// face runs for each, by its description name.
namespace mhc::ops::operators {

struct pre_backward {
  using Problem = core::BackwardProblem;
  static Status validate(const PreBackwardInputs& in, const PreBackwardOutputs& out, const Options& options, Problem* problem) {
    return pre::backward::validate(in, out, options, problem);
  }
  static Status run(const Problem& problem, int num_threads) { return pre::backward::run_in_thread_workspace(problem, num_threads); }
};
}  // namespace mhc::ops::operators
