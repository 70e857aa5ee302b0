// Element types: sizes and conversions between bf16/fp16 and fp32.
// Written by hand because the conversions must be exact and identical on every
// ISA (round to nearest, ties to even; NaN stays NaN); vector kernels convert the
// same way in hardware.
#pragma once

#include <cstdint>
#include <cstring>

#include "mhc/mhc.hpp"

namespace mhc::core {

inline constexpr int64_t element_size(DType t) { return t == DType::fp32 ? 4 : 2; }

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp32: return "fp32";
  }
  return "unknown";
}

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // Inf/NaN
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    // subnormal: value = man * 2^-24, exact in fp32
    float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {
    // result is subnormal (or zero): scale so that the fp16 quantum 2^-24 becomes 1.0
    // and let the FPU round to nearest-even (exact: abs < 2^-14 has few enough bits).
    const float scaled = bits_float(abs) * 16777216.0f;  // * 2^24
    const float rounded = scaled + 8388608.0f - 8388608.0f;  // round to integer, ties even
    return uint16_t(sign | uint16_t(rounded));
  }
  uint32_t mant_rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // ties to even on bit 13
  return uint16_t(sign | uint16_t((mant_rounded - 0x38000000u) >> 13));
}

// Typed element access through a byte-addressed base and an element offset.
inline float load_element(const void* base, DType t, int64_t offset) {
  switch (t) {
    case DType::fp32: return static_cast<const float*>(base)[offset];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::fp16: return fp16_to_float(static_cast<const uint16_t*>(base)[offset]);
  }
  return 0.0f;
}

inline void store_element(void* base, DType t, int64_t offset, float value) {
  switch (t) {
    case DType::fp32: static_cast<float*>(base)[offset] = value; return;
    case DType::bf16: static_cast<uint16_t*>(base)[offset] = float_to_bf16(value); return;
    case DType::fp16: static_cast<uint16_t*>(base)[offset] = float_to_fp16(value); return;
  }
}

}  // namespace mhc::core
