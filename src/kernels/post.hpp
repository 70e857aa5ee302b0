// What a kernel family gives the MhcPost driver (ops/post): the forward over a
// block of tokens and columns and the backward over a block of tokens (SPEC §11).
// Every family does SPEC's fp32 operations in SPEC's order, no fused
// multiply-add, sums from +0 in index order, so every family gives the same bits.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"
#include "kernels/operands.hpp"

namespace mhc::kernels {

struct PostShape {
  int64_t T = 0, N = 0, D = 0;
  DType x_dtype = DType::bf16;       // x, h_out, out, grad_out, grad_h_out
  DType grad_x_dtype = DType::bf16;  // x's, or fp32
  bool has_h_res = false;            // absent: the identity
};

struct PostForwardOperands {
  PostShape shape;
  StreamRows<const void> x;        // [T][N][D]
  TokenRows<const float> h_res;    // [T][N*N], or absent
  StreamRows<const void> h_out;    // [T][1][D]
  TokenRows<const float> h_post;   // [T][N]
  StreamRows<void> out;            // [T][N][D]
  bool streaming_stores = true;    // outputs far larger than the caches may bypass them (the driver's policy)
};

struct PostBackwardOperands {
  PostShape shape;
  StreamRows<const void> grad_out;  // [T][N][D]
  StreamRows<const void> x;         // [T][N][D]
  TokenRows<const float> h_res;     // [T][N*N], or absent
  StreamRows<const void> h_out;     // [T][1][D]
  TokenRows<const float> h_post;    // [T][N]
  StreamRows<void> grad_x;          // [T][N][D] in grad_x_dtype, or absent (the site backward's prepare)
  TokenRows<float> grad_h_res;      // [T][N*N], or absent
  StreamRows<void> grad_h_out;      // [T][1][D]
  TokenRows<float> grad_h_post;     // [T][N]
  bool streaming_stores = true;     // as the forward's
};

struct PostKernels {
  int64_t (*forward_scratch_floats)(const PostShape&) = nullptr;
  int64_t (*backward_scratch_floats)(const PostShape&) = nullptr;
  // Tokens [t0, t1), columns [d0, d1) (d0 a multiple of 64).
  void (*forward)(const PostForwardOperands&, float* scratch, int64_t t0, int64_t t1, int64_t d0,
                  int64_t d1) = nullptr;
  // Tokens [t0, t1), all columns (the sums over D run in index order).
  void (*backward)(const PostBackwardOperands&, float* scratch, int64_t t0, int64_t t1) = nullptr;
};

}  // namespace mhc::kernels
