// The SIMD kernel family (Highway, run-time dispatch over AVX-512 and AVX2).
#pragma once

#include <cstdint>

#include "kernels/kernels.hpp"

namespace mhc::kernels::simd {

// Rows of phi per pass of the forward GEMM, and columns per chunk of u.
inline constexpr int64_t kRowsPerPass = 80;
inline constexpr int64_t kChunkColumns = 2048;
// Outputs larger than this are written with streaming stores (grad_x; h_in, which
// is written once per token after x is read twice, from a lower size).
inline constexpr int64_t kStreamBytes = int64_t(64) << 20;
inline constexpr int64_t kStreamHInBytes = int64_t(8) << 20;

int64_t forward_scratch_floats(const core::Dims& d);
void forward_tokens(const ForwardArgs& args, int64_t t0, int64_t t1, int worker);
// The forward after m = phi.u, for kernels that form m their own way (AMX):
// per token sum(v^2) from 16 lanes folded in a fixed order, the per-token
// outputs, and h_in.
// h_pre: N floats of scratch.
void forward_finish_tokens(const core::ForwardProblem& p, int64_t t0, int64_t t1, const float* m, int64_t m_stride,
                           const float* sq_lanes, float* h_pre);
int64_t backward_scratch_floats(const core::Dims& d);
int64_t backward_chunk_floats(const core::BackwardProblem& p);
void backward_token_stats(const BackwardArgs& args, int64_t chunk0, int64_t t0, int64_t t1, int worker);
void backward_columns(const BackwardArgs& args, int64_t t0, int64_t t1, const plan::ColumnItem& item,
                      int worker);
void backward_rows(const BackwardArgs& args, int64_t chunk0, int64_t t0, int64_t t1, int worker);
void backward_finish_columns(const BackwardArgs& args, const plan::ColumnItem& item);

}  // namespace mhc::kernels::simd
