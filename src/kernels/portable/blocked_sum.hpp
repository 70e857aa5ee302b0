// fp32 sums with 16 independent partial sums folded by a fixed tree: the error
// grows with n/16 instead of n, and the order (hence the bits) is fixed by n alone.
#pragma once

#include <cstdint>

#include "kernels/common/token_math.hpp"

namespace mhc::kernels::portable {

inline constexpr int kLanes = 16;

inline float fold_lanes(float (&acc)[kLanes]) { return common::fold16(acc); }

// sum_i a[i] * b[i * b_stride]
inline float dot(const float* a, const float* b, int64_t b_stride, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  if (b_stride == 1) {
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  } else {
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[(i + l) * b_stride];
  }
  for (int l = 0; i < n && l < kLanes; ++i, ++l) acc[l] += a[i] * b[i * b_stride];  // n % kLanes left
  return fold_lanes(acc);
}

inline float sum_of_squares(const float* a, int64_t n) { return dot(a, a, 1, n); }

}  // namespace mhc::kernels::portable
