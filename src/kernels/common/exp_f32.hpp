// exp in fp32 from multiplies and adds only (Cody-Waite reduction by ln 2, Cephes'
// degree-7 polynomial, no fused multiply-add), so a scalar loop and any vector
// width give the same bits: SPEC fixes the Sinkhorn's arithmetic but not its exp.
// Within 2 ulp of exp over [-87.3, 88]; 0 below, +inf above, NaN kept (the
// Sinkhorn only takes it of values <= 0).
// The vector twin is ExpF32 in kernels/simd/exp_f32-inl.h: change both together.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mhc::kernels::common {

struct ExpF32Constants {
  static constexpr float kLowest = -87.33654f;   // below: 0 (no subnormal results)
  static constexpr float kHighest = 88.0f;  // above: +inf (n stays <= 127)
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693359375f;  // 9 bits: n * kLn2Hi is exact
  static constexpr float kLn2Lo = -2.12194440e-4f;
  static constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                  4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
};

inline float exp_f32(float x) {
  using C = ExpF32Constants;
  if (std::isnan(x)) return x;
  if (x < C::kLowest) return 0.0f;
  if (x > C::kHighest) return INFINITY;
  const float n = std::nearbyint(x * C::kLog2e);  // ties to even, as the vector Round
  const float r = (x - n * C::kLn2Hi) - n * C::kLn2Lo;
  float p = C::kP[0];
  for (int i = 1; i < 6; ++i) p = p * r + C::kP[i];
  const float e = (p * (r * r) + r) + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;  // 2^n, n in [-126, 127]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

}  // namespace mhc::kernels::common
