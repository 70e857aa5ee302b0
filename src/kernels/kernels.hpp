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
  float* scratch(int worker) const { return workspace + worker * plan->scratch_per_worker; }
  // Operands the family prepares once per call (forward_prepare) and every item reads.
  float* shared() const { return workspace + plan->off_shared; }
};

struct BackwardArgs {
  const core::BackwardProblem* problem;
  const plan::BackwardPlan* plan;
  float* workspace;
  int lane = 0;  // the lane (plan::kLanes) of the chunk being worked on
  float* scratch(int worker) const {
    return workspace + plan->off_scratch + worker * plan->scratch_per_worker;
  }
  float* chunk_buffers() const { return workspace + plan->off_chunk + lane * plan->chunk_stride; }
  // Running totals of a lane (by default this one's): sums of G v^T [F, K], of v * gu [K].
  float* phi_total(int of_lane) const { return workspace + plan->off_phi_total + of_lane * plan->phi_total_stride; }
  float* phi_total() const { return phi_total(lane); }
  float* gamma_total(int of_lane) const {
    return workspace + plan->off_gamma_total + of_lane * plan->gamma_total_stride;
  }
  float* gamma_total() const { return gamma_total(lane); }
};

// The prepare hooks are called with at most this many parts (the thread pool's cap).
inline constexpr int64_t kMaxPrepareParts = 1024;

struct Family {
  const char* name;
  // Scratch floats one worker needs.
  int64_t (*forward_scratch_floats)(const core::Dims&);
  int64_t (*backward_scratch_floats)(const core::Dims&);
  // Forward: every per-token output of tokens [t0, t1).
  void (*forward_tokens)(const ForwardArgs&, int64_t t0, int64_t t1, int worker);
  // Floats of the buffers shared by the workers for one chunk of tokens (may be 0).
  int64_t (*backward_chunk_floats)(const core::BackwardProblem&);
  // Backward phase 1: per-token G, c, gz and grad_alpha terms of tokens [t0, t1)
  // (which lie in the chunk starting at chunk0).
  void (*backward_token_stats)(const BackwardArgs&, int64_t chunk0, int64_t t0, int64_t t1, int worker);
  // Backward phase 2, for the chunk of tokens [t0, t1) and the columns (n, d0..d1):
  // the chunk's sums of G v^T and v*gu added into the running totals, and grad_x
  // unless the family has phase 3.
  void (*backward_columns)(const BackwardArgs&, int64_t t0, int64_t t1, const plan::ColumnItem&, int worker);
  // Backward phase 3 (nullptr: none): grad_x of tokens [t0, t1) of the chunk at chunk0, row by row.
  void (*backward_rows)(const BackwardArgs&, int64_t chunk0, int64_t t0, int64_t t1, int worker);
  // After the last chunk: grad_phi and grad_gamma of a column item from the lanes' running totals.
  void (*backward_finish_columns)(const BackwardArgs&, const plan::ColumnItem&);
  // Optional forward hooks (nullptr: at most plan::kTokensPerItem tokens per item, nothing shared).
  // Most tokens per forward item (plan_forward cuts short calls finer), from the
  // dims and dtypes only (never from T's value alone changing a token's
  // arithmetic: batch invariance).
  int64_t (*forward_item_tokens)(const core::ForwardProblem&) = nullptr;
  // Floats of operands prepared once per call, before the items run.
  int64_t (*forward_shared_floats)(const core::ForwardProblem&) = nullptr;
  // Prepares part `part` of `parts` of those operands; the parts run in parallel.
  void (*forward_prepare)(const ForwardArgs&, int64_t part, int64_t parts) = nullptr;
};

// Scalar forms shared by the families: grad_phi and grad_gamma of a column item
// from the running totals; grad_bias and grad_alpha (token order, two-level).
void backward_finish_columns(const BackwardArgs&, const plan::ColumnItem&);
void backward_small_sums(const BackwardArgs&);

// The family in use: MHC_ISA (amx | avx512 | avx2 | portable | reference ...) or the best
// the CPU runs. "reference" is not a Family: the operator layer runs the float64
// reference whole.
const Family* selected_family();
bool reference_selected();
const char* selected_name();

// Families compiled into this build.
const Family* portable_family();
const Family* simd_family();
const char* simd_best_name();         // "avx512", "avx2", or nullptr when no SIMD target runs here
const Family* amx_family();           // AVX-512 with AMX-BF16 tiles, or nullptr when this CPU/OS/build has none
bool simd_force(const char* name);    // restrict the SIMD family to one target; false if not usable

}  // namespace mhc::kernels

namespace mhc::reference {
// The executable form of SPEC §2-§3: float64, serial, readable (reference.hpp has
// the array form). Unlike production kernels it allocates its own scratch.
void pre_forward(const core::ForwardProblem& problem);
void pre_backward(const core::BackwardProblem& problem);
}  // namespace mhc::reference
