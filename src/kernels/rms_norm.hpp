// The RMSNorm an engine fuses into h_in's write (SPEC §16), one token at a time
// over pointers to its row; the same code, and so the same bits, on every kernel
// family: it streams one row of D elements and is bound by memory.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace mhc::kernels {

// ms = (sum_j h[j]^2) / D, the squares summed in 16 lanes (column j into lane
// j % 16, j ascending) folded by a fixed tree: the order depends on D only; then
// y[j] = rne((h[j] * (1 / sqrt(ms + eps))) * weight[j]) in x's dtype. h and y in
// `dtype`, weight in `weight_dtype` (x's or fp32).
void rms_norm_token(const void* h, DType dtype, const void* weight, DType weight_dtype, float eps, int64_t D,
                    void* y);

}  // namespace mhc::kernels
