// Planning: how a validated problem is cut into work items and how much
// workspace the kernels need. Item boundaries depend on the problem only (never
// on the thread count), which is what makes results bitwise independent of
// threading (SPEC §5).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/problem.hpp"

namespace mhc::plan {

// Tokens per forward work item of the SIMD and portable families: each item reads
// all of phi once, so longer items read it less often; its u chunk (64 x 8 KiB)
// still stays in L2. 64 against 32, with phi's blocks copied to L1 (mhc-bench,
// avx512): c 32.8-33.5 -> 29.9-30.2 ms, d 0.79-0.81 -> 0.75-0.79, a within noise.
inline constexpr int64_t kTokensPerItem = 64;
// Backward tokens are processed in chunks: per-token statistics of a chunk, then
// its column work. The sums over tokens (grad_phi, grad_gamma) are formed per
// chunk in fp32 and added into running totals, which keeps the rounding error
// near (kTokensPerChunk + T / kTokensPerChunk) ulps instead of T ulps.
inline constexpr int64_t kTokensPerChunk = 64;
// Chunks are dealt to this many lanes in turn (chunk c to lane c % kLanes), each
// with its own chunk buffers and running totals; grad_phi and grad_gamma are the
// lanes' totals added in lane order. The lanes run at the same time on their own
// workers, so one lane's memory-bound phases overlap another's compute-bound
// column phase, and a chunk's data never crosses between lanes. A fixed count,
// never the thread count: the sums' order depends on T only.
inline constexpr int kLanes = 2;
// Columns of one stream (a range of d for one n) per backward column item.
inline constexpr int64_t kColumnsPerItem = 256;

// Forward calls too short for this many items of the family's length are cut into
// this many shorter items, of whole groups of kForwardItemGranule tokens (the AMX
// family's pair of 16-token tiles), so that 2-4 workers share them: with one item
// of up to 256 tokens (amx) or 64 (SIMD) a call of that size ran on one thread.
// Harness, N = 4, D = 7168, 2 threads: amx T = 64 1.13 -> 0.83 ms, 128 1.74 ->
// 1.21, 256 3.12 -> 1.70; avx512 T = 64 1.21 -> 0.76; T = 512 and longer unchanged.
inline constexpr int64_t kForwardItems = 4;
inline constexpr int64_t kForwardItemGranule = 32;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
// Float counts rounded up so every workspace region starts on a 64-byte boundary.
inline int64_t align16(int64_t floats) { return round_up(floats, 16); }

struct ForwardPlan {
  int threads = 1;
  int64_t item_tokens = kTokensPerItem;
  int64_t token_items = 0;
  int64_t scratch_per_worker = 0;  // floats, asked of the kernel family
  int64_t off_shared = 0;          // floats: operands prepared once per call, after the scratch
  int prepare_parts = 0;           // parallel parts of that preparation (0: none)
  size_t workspace_bytes = 0;
};

struct ColumnItem {
  int64_t n, d0, d1;
};

struct BackwardPlan {
  int threads = 1;
  int64_t chunks = 0;                 // ceil(T / kTokensPerChunk)
  int lanes = 1;                      // min(kLanes, chunks)
  int64_t column_items_per_stream = 0;
  int64_t column_items = 0;           // N * column_items_per_stream
  int64_t scratch_per_worker = 0;     // floats, asked of the kernel family
  // offsets (floats) into the workspace
  int64_t off_scratch = 0;            // threads * scratch_per_worker
  int64_t off_chunk = 0;              // [lanes] buffers the workers of a lane share for one chunk
  int64_t chunk_stride = 0;           //   floats from one lane's buffers to the next
  int64_t off_G = 0;                  // [T, F]   dL/dm per token
  int64_t off_c = 0;                  // [T]      coefficient of the inv_rms term per token
  int64_t off_gz = 0;                 // [T, F]   dL/dz per token (for grad_bias)
  int64_t off_alpha_terms = 0;        // [T, 3]   per-token grad_alpha terms
  int64_t off_phi_total = 0;          // [lanes][F, K] running sums of G v^T
  int64_t off_gamma_total = 0;        // [lanes][K]    running sums of v * gu (right after phi's)
  int64_t phi_total_stride = 0, gamma_total_stride = 0;  // floats from one lane's totals to the next
  size_t workspace_bytes = 0;

  ColumnItem column_item(int64_t i, int64_t D) const {
    const int64_t n = i / column_items_per_stream, d0 = (i % column_items_per_stream) * kColumnsPerItem;
    return {n, d0, d0 + kColumnsPerItem < D ? d0 + kColumnsPerItem : D};
  }
};

// item_tokens: tokens per work item; shared_floats: once-per-call operands (0: none).
ForwardPlan plan_forward(const core::ForwardProblem& problem, int threads, int64_t scratch_floats,
                         int64_t item_tokens = kTokensPerItem, int64_t shared_floats = 0);
BackwardPlan plan_backward(const core::BackwardProblem& problem, int threads, int64_t scratch_floats,
                           int64_t chunk_floats);

}  // namespace mhc::plan
