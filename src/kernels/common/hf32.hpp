// HF32 (SPEC §7, CANN's opImplMode 1): an fp32 value with its significand
// rounded to 10 stored bits, half away from zero, on the bit pattern; a carry
// rounds into the exponent (the largest values become Inf). NaN is returned as
// it is: the bit formula alone would turn some NaNs into Inf or a signed zero.
#pragma once

#include <cstdint>
#include <cstring>

namespace mhc::kernels::common {

inline float round_hf32(float a) {
  int32_t b;
  std::memcpy(&b, &a, 4);
  if ((b & 0x7fffffff) > 0x7f800000) return a;  // NaN
  b = ((b >> 12) + 1) >> 1 << 13;               // arithmetic shifts (C++20)
  float r;
  std::memcpy(&r, &b, 4);
  return r;
}

inline void round_hf32(float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) values[i] = round_hf32(values[i]);
}

}  // namespace mhc::kernels::common
