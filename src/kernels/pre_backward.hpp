// What a kernel family gives the MhcPreBackward driver (ops/pre/backward_*): the
// phases of one chunk of tokens, over the call's operands (pointers, strides,
// counts) and the typed buffers the driver's plan lays out.
// Kernels allocate nothing, start no threads and read no environment.
#pragma once

#include <cstdint>

#include "kernels/pre_forward.hpp"  // align16, ceil_div

namespace mhc::kernels {

// Tokens per chunk: per-token statistics of a chunk, then its column work. The
// sums over tokens (grad_phi, grad_gamma) are formed per chunk in fp32 and added
// to running totals, which keeps their rounding near (kTokensPerChunk +
// T / kTokensPerChunk) ulps instead of T.
inline constexpr int64_t kTokensPerChunk = 64;
// Chunk c goes to lane c % kLanes, each lane with its own chunk buffers and
// running totals; grad_phi and grad_gamma are the lanes' totals added in lane
// order. A fixed count, never the thread count: the sums' order depends on T only.
inline constexpr int kLanes = 2;
// Columns of one stream (a range of d for one n) per column item.
inline constexpr int64_t kColumnsPerItem = 256;

struct ColumnItem {
  int64_t n, d0, d1;
};

// The backward's workspace as typed views.
struct BackwardBuffers {
  float* G = nullptr;            // [T, F]  dL/dm per token
  float* c = nullptr;            // [T]     coefficient of the inv_rms term per token
  float* gz = nullptr;           // [T, F]  dL/dz per token (grad_bias)
  float* alpha_terms = nullptr;  // [T, 3]  per-token grad_alpha terms
  int lanes = 1;
  float* chunk[kLanes] = {};        // buffers a lane's workers share for one chunk
  float* phi_total[kLanes] = {};    // [F, K] running sums of G v^T
  float* gamma_total[kLanes] = {};  // [K]    running sums of v * gu
};

// MhcPreBackward's operands (SPEC §3). Rows in x's dtype are unit-stride, their
// tokens at uniform strides; the fp32 vectors are contiguous.
struct BackwardOperands {
  PreShape shape;
  double hc_eps = 0.0;  // as given: the fp32 families round it, the reference does not
  StreamRows<const void> x;            // [T][N][D]
  Matrix<const float> phi;             // [F][K]
  Matrix<const float> gamma;           // [N][D], or absent
  const float* alpha = nullptr;        // [alpha_entries()]
  StreamRows<const void> grad_h_in;    // [T][D]
  TokenRows<const float> grad_h_post;  // [T][N], absent for the head
  TokenRows<const float> grad_h_res;   // [T][R], absent unless alpha has 3 entries
  TokenRows<const float> inv_rms;      // [T][1]
  TokenRows<const float> h_mix;        // [T][F]
  TokenRows<const float> h_pre;        // [T][N]
  TokenRows<const float> h_post;       // [T][N], absent for the head
  StreamRows<const void> grad_x_post;  // [T][N][D], or absent (0)
  DType grad_x_post_dtype = DType::fp32;  // x's, or fp32 (MhcPostBackward's fp32 grad_x)
  // The site backward's finish (SPEC §15): grad_x_post formed here, row by row, as
  // MhcPostBackward's fp32 grad_x of the site's post, sum_j post_h_res[i, j] *
  // post_grad_out[j] (common::post_grad_x's order), never stored. Absent unless
  // both are; grad_x_post is then absent.
  StreamRows<const void> post_grad_out;  // [T][N][D] in x's dtype
  TokenRows<const float> post_h_res;     // [T][N*N]
  // The single-pass form (SPEC §14): grad_x's collapse term takes pre_mix instead
  // of h_pre; with grad_h_pre present g_pre is grad_h_pre, and the sums
  // sum_d v grad_h_in go to grad_pre_mix (when present). grad_h_pre_adds: V4's
  // h_pre as an output of its own (SPEC §15), g_pre = the sums + grad_h_pre.
  TokenRows<const float> pre_mix;      // [T][N], or absent (h_pre)
  TokenRows<const float> grad_h_pre;   // [T][N], or absent (MhcPre's g_pre)
  TokenRows<float> grad_pre_mix;       // [T][N], or absent
  bool grad_h_pre_adds = false;
  StreamRows<void> grad_x;             // [T][N][D]
  Matrix<float> grad_phi;              // [F][K]
  Matrix<float> grad_gamma;            // [N][D], or absent
  float* grad_alpha = nullptr;         // [alpha_entries()]
  float* grad_bias = nullptr;          // [F]
  bool streaming_stores = true;        // grad_x far larger than the caches may bypass them (the driver's policy)
};

// One backward call of a phase: the operands, the buffers, the chunk's lane, the worker's scratch.
struct BackwardStep {
  const BackwardOperands* operands;
  const BackwardBuffers* buffers;
  int lane;
  float* scratch;  // scratch_floats(shape) floats, the worker's own
  float* chunk() const { return buffers->chunk[lane]; }
  float* phi_total() const { return buffers->phi_total[lane]; }
  float* gamma_total() const { return buffers->gamma_total[lane]; }
};

struct PreBackwardKernels {
  // Scratch floats one worker needs; floats of a lane's shared chunk buffers.
  int64_t (*scratch_floats)(const PreShape&) = nullptr;
  int64_t (*chunk_floats)(const PreShape&) = nullptr;
  // Phase 1: per-token G, c, gz and grad_alpha terms of tokens [t0, t1) of the
  // chunk starting at chunk0.
  void (*token_stats)(const BackwardStep&, int64_t chunk0, int64_t t0, int64_t t1) = nullptr;
  // Phase 2, the chunk [t0, t1) and one column item: the chunk's sums of G v^T
  // and v*gu added to the lane's totals, and grad_x unless the family has phase 3.
  void (*columns)(const BackwardStep&, int64_t t0, int64_t t1, const ColumnItem&) = nullptr;
  // Phase 3 (nullptr: none): grad_x of tokens [t0, t1) of the chunk at chunk0.
  void (*rows)(const BackwardStep&, int64_t chunk0, int64_t t0, int64_t t1) = nullptr;
  // After the last chunk: grad_phi and grad_gamma of a column item from the lanes' totals.
  void (*finish_columns)(const BackwardStep&, const ColumnItem&) = nullptr;
  // grad_bias and grad_alpha from the per-token terms.
  void (*finish_sums)(const BackwardStep&) = nullptr;
  // Instead of the phases: the whole operator on one thread, with memory of its
  // own (the float64 reference, whose sums over all tokens in float64 and token
  // order chunks of fp32 totals would change). nullptr for the phased families.
  void (*serial)(const BackwardOperands&) = nullptr;
};

// The scalar forms every fp32 family shares: grad_phi and grad_gamma of a column
// item from the lanes' totals (lane order); grad_bias and grad_alpha (token order,
// per chunk then across chunks).
namespace common {  // kernels/common/backward_sums.cpp
void finish_columns_scalar(const BackwardStep&, const ColumnItem&);
void finish_sums_scalar(const BackwardStep&);
}  // namespace common

}  // namespace mhc::kernels
