// Planning: how a validated problem is cut into work items and how much
// workspace the kernels need. Item boundaries depend on the problem only (never
// on the thread count), which is what makes results bitwise independent of
// threading (SPEC §5).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/problem.hpp"

namespace mhc::plan {

// Tokens per forward item / backward token-statistics item.
inline constexpr int64_t kTokensPerItem = 16;
// Tokens summed in one level of the two-level sums over tokens (grad_phi,
// grad_gamma, grad_bias, grad_alpha): fp32 partials of this many tokens are
// added into running totals, which keeps the rounding error near
// (kTokensPerChunk + T / kTokensPerChunk) ulps instead of T ulps.
inline constexpr int64_t kTokensPerChunk = 64;
// Columns (of K) per backward column item.
inline constexpr int64_t kColumnsPerItem = 256;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Float counts rounded up so every workspace region starts on a 64-byte boundary.
inline int64_t align16(int64_t floats) { return (floats + 15) / 16 * 16; }

// Workspace regions, as offsets in floats from a 64-byte aligned base.
struct ForwardPlan {
  int threads = 1;
  int64_t token_items = 0;
  int64_t scratch_per_worker = 0;  // floats: v and u = v*gamma [K each], m [F], h_pre [N]
  size_t workspace_bytes = 0;
};

struct BackwardPlan {
  int threads = 1;
  int64_t token_items = 0;
  int64_t column_items = 0;
  int64_t chunks = 0;               // ceil(T / kTokensPerChunk)
  int64_t scratch_per_worker = 0;   // floats
  // offsets (floats) into the workspace
  int64_t off_scratch = 0;          // threads * scratch_per_worker
  int64_t off_G = 0;                // [T, F]   dL/dm per token
  int64_t off_c = 0;                // [T]      inv_rms-term coefficient per token
  int64_t off_gz = 0;               // [T, F]   dL/dz per token (for grad_bias)
  int64_t off_alpha_terms = 0;      // [T, 3]   per-token grad_alpha terms
  int64_t off_phi_partial = 0;      // [F, K]   chunk partial of P = sum G v^T
  int64_t off_phi_total = 0;        // [F, K]
  int64_t off_gamma_partial = 0;    // [K]
  int64_t off_gamma_total = 0;      // [K]
  size_t workspace_bytes = 0;
};

ForwardPlan plan_forward(const core::ForwardProblem& problem, int threads);
BackwardPlan plan_backward(const core::BackwardProblem& problem, int threads);

}  // namespace mhc::plan
