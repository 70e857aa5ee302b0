// fp32 sums with 16 independent partial sums folded by a fixed tree: the error
// grows with n/16 instead of n, and the order (hence the bits) is fixed by n alone.
#pragma once

#include <algorithm>
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

// lanes[l] += the sum over columns [k0, k1) of a[k] b[k] in kLanes lanes, in blocks
// of `block` columns from k0, each block's lanes from zero (lane (k - block start)
// % kLanes), then added in order.
inline void add_blocks(const float* a, const float* b, int64_t k0, int64_t k1, int64_t block, float (&lanes)[kLanes]) {
  for (int64_t b0 = k0; b0 < k1; b0 += block) {
    const int64_t b1 = std::min(k1, b0 + block);
    float acc[kLanes] = {};
    int64_t i = b0;
    for (; i + kLanes <= b1; i += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < b1; ++i, ++l) acc[l] += a[i] * b[i];
    for (int l = 0; l < kLanes; ++l) lanes[l] += acc[l];
  }
}

}  // namespace mhc::kernels::portable
