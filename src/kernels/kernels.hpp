// Kernel families. A family is a table of pure functions over a validated
// problem, its plan and a workspace: no validation, no allocation, no threads.
// The operator layer picks one family once per process (run-time ISA dispatch)
// and drives its work items on the thread pool.
#pragma once

#include <cstdint>

#include "core/problem.hpp"
#include "plan/plan.hpp"

namespace mhc::kernels {

struct ForwardArgs {
  const core::ForwardProblem* problem;
  const plan::ForwardPlan* plan;
  float* workspace;
};

struct BackwardArgs {
  const core::BackwardProblem* problem;
  const plan::BackwardPlan* plan;
  float* workspace;
};

struct Family {
  const char* name;
  // Forward: every per-token output of tokens [t0, t1).
  void (*forward_tokens)(const ForwardArgs&, int64_t t0, int64_t t1, int worker);
  // Backward phase 1: per-token G, c, gz, alpha terms of tokens [t0, t1).
  void (*backward_token_stats)(const BackwardArgs&, int64_t t0, int64_t t1, int worker);
  // Backward phase 2: grad_x, grad_phi, grad_gamma for columns [k0, k1), all tokens in order.
  void (*backward_columns)(const BackwardArgs&, int64_t k0, int64_t k1);
  // Backward phase 3: grad_bias, grad_alpha (sums over tokens, serial, fixed order).
  void (*backward_small_sums)(const BackwardArgs&);
};

// The family in use: MHC_ISA (portable | reference | ...) or the best the CPU runs.
// "reference" is not a Family: the operator layer runs the float64 reference whole.
const Family* selected_family();
bool reference_selected();
const char* selected_name();

// Families compiled into this build.
const Family* portable_family();

}  // namespace mhc::kernels

namespace mhc::reference {
// The executable form of SPEC §2-§3: float64 accumulation, serial, readable.
// Used by tests as the golden and selectable with MHC_ISA=reference.
// (Unlike production kernels it allocates its own float64 scratch.)
void pre_forward(const core::ForwardProblem& problem);
void pre_backward(const core::BackwardProblem& problem);
}  // namespace mhc::reference
