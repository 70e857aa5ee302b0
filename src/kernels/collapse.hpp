// MhcCollapse's microkernels (SPEC §14), one token at a time over pointers to its
// rows; the same code, and so the same bits, on every kernel family: the
// operator streams x once and is bound by memory, not arithmetic.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace mhc::kernels {

// h[j] = sum_n w[n] x[n][j]: from zero, n ascending, each product and sum rounded
// to fp32, then h in x's dtype. Stream n of x at x + n * stream_stride elements;
// acc: D floats of scratch.
void collapse_token(const void* x, int64_t stream_stride, DType dtype, const float* w, int64_t N, int64_t D,
                    void* h, float* acc);

// grad_x[n][j] = w[n] g[j] (x's dtype); grad_w[n] = sum_j x[n][j] g[j] summed in 16
// lanes (column j into lane j % 16, j ascending) folded by a fixed tree: the order
// depends on D only. g: D floats of scratch (grad_h as fp32).
void collapse_backward_token(const void* grad_h, const void* x, int64_t stream_stride, DType dtype,
                             const float* w, int64_t N, int64_t D, void* grad_x, int64_t grad_stream_stride,
                             float* grad_w, float* g);

}  // namespace mhc::kernels
