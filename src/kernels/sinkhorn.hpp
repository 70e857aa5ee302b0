// What a kernel family gives the MhcSinkhorn driver (ops/sinkhorn): the forward
// and backward of a range of tokens (SPEC §10). Every family computes the same
// fp32 operations in the same order (sums in index order, true divisions,
// common::exp_f32), so every family gives the same bits.
#pragma once

#include <cstdint>

#include "kernels/operands.hpp"

namespace mhc::kernels {

struct SinkhornShape {
  int64_t T = 0;      // tokens
  int64_t N = 0;      // a token's matrix is N x N
  int64_t I = 0;      // iterations: 2I normalisations after the softmax
  float eps = 0.0f;
  int64_t pitch = 0;  // the caches' row pitch (>= N)
  int64_t steps() const { return 2 * I; }
};

// The caches (SPEC §10, mhc.hpp): norm_out [2I][T][N][pitch], sum_out [2I][T][pitch];
// slot 0 holds the softmax p and its row sums, slot k the matrix after step k and
// that step's divisors; the padding columns are 0.
struct SinkhornCaches {
  float* norm_out = nullptr;
  float* sum_out = nullptr;
  bool present() const { return norm_out != nullptr; }
};

struct SinkhornForwardOperands {
  SinkhornShape shape;
  TokenRows<const float> z;  // [T][N*N]
  TokenRows<float> h_res;    // [T][N*N]
  SinkhornCaches caches;     // or absent
};

struct SinkhornBackwardOperands {
  SinkhornShape shape;
  TokenRows<const float> grad_h_res;  // [T][N*N]
  SinkhornCaches caches;              // the forward's (read only), or absent: recompute from z
  TokenRows<const float> z;           // [T][N*N] when the caches are absent
  TokenRows<float> grad_z;            // [T][N*N]
};

struct SinkhornKernels {
  // Scratch floats one worker needs.
  int64_t (*scratch_floats)(const SinkhornShape&) = nullptr;
  // Tokens per item: a multiple of the family's lanes (batch invariance: a token's
  // bits never depend on its neighbours, so any multiple serves).
  int64_t item_tokens = 64;
  void (*forward)(const SinkhornForwardOperands&, float* scratch, int64_t t0, int64_t t1) = nullptr;
  void (*backward)(const SinkhornBackwardOperands&, float* scratch, int64_t t0, int64_t t1) = nullptr;
};

}  // namespace mhc::kernels
