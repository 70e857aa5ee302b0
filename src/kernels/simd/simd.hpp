// The SIMD kernel families (Highway): the same source compiled for each target,
// x86's AVX-512 and AVX2+FMA+F16C, aarch64's SVE2, SVE and NEON (SVE's vector length
// is read at run time). Each target's functions are gathered in its own
// kernel tables; the registry names a table per target, so a forced family calls
// that target's functions directly.
#pragma once

#include <cstdint>

#include "kernels/pre_backward.hpp"
#include "kernels/pre_forward.hpp"
#include "kernels/tables.hpp"

namespace mhc::kernels::simd {

// Rows of phi per pass of the forward GEMM, and columns per chunk of u.
inline constexpr int64_t kRowsPerPass = 80;
inline constexpr int64_t kChunkColumns = kSliceColumns;  // a chunk of u is a slice of the sums
// Outputs larger than this are written with streaming stores (grad_x; h_in, which
// is written once per token after x is read twice, from a lower size).
inline constexpr int64_t kStreamBytes = int64_t(64) << 20;
inline constexpr int64_t kStreamHInBytes = int64_t(8) << 20;

}  // namespace mhc::kernels::simd
