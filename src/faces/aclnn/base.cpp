// acl/acl_base.h's helpers: aclDataTypeSize and the binary16 conversions.
// The conversions are written by hand on the bit patterns: exact by
// construction (no compiler or CPU support for _Float16 needed, no dependency),
// round to nearest even, and every binary16 value, NaNs included, round-trips.
#include <cstdint>
#include <cstring>

#include "faces/aclnn/face.hpp"

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// q = m / 2^shift rounded to nearest, ties to even (1 <= shift <= 31).
uint32_t shift_round_even(uint32_t m, uint32_t shift) {
  const uint32_t q = m >> shift, rest = m & ((uint32_t(1) << shift) - 1), half = uint32_t(1) << (shift - 1);
  return q + ((rest > half || (rest == half && (q & 1u))) ? 1u : 0u);
}

}  // namespace

extern "C" {

size_t aclDataTypeSize(aclDataType dataType) {
  switch (mhc::faces::aclnn::enum_value(dataType)) {  // any int a C caller passed
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    default: return 0;  // ACL_STRING (no fixed size), ACL_DT_UNDEFINED, unknown values
  }
}

aclFloat16 aclFloatToFloat16(float value) {
  const uint32_t u = bits_of(value);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: the payload's top 10 bits, never zero (that would be Inf)
    const uint32_t payload = (abs >> 13) & 0x3ffu;
    return aclFloat16(sign | 0x7c00u | (payload != 0 ? payload : 0x200u));
  }
  if (abs >= 0x477ff000u) return aclFloat16(sign | 0x7c00u);  // >= 65520 (half-way past 65504) and Inf
  const uint32_t exponent = abs >> 23, mantissa = abs & 0x7fffffu;
  if (exponent < 113) {  // below 2^-14: a subnormal binary16 (a multiple of 2^-24) or zero
    if (exponent < 102) return aclFloat16(sign);  // below 2^-25, half of the smallest subnormal
    // value = (2^23 + mantissa) * 2^(exponent - 150) = q * 2^-24 with q rounded: shift 126 - exponent (14..24)
    return aclFloat16(sign | shift_round_even(0x800000u | mantissa, 126u - exponent));
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10
  // bits; a carry rounds into the exponent, which stays below 31 (abs < 65520).
  return aclFloat16(sign | shift_round_even(abs - (112u << 23), 13));
}

float aclFloat16ToFloat(aclFloat16 value) {
  const uint32_t sign = uint32_t(value & 0x8000u) << 16;
  const uint32_t exponent = (value >> 10) & 0x1fu, mantissa = value & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN (payload kept)
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal, mantissa * 2^-24: normalise so the leading 1 becomes the implicit bit.
  if (mantissa == 0) return float_of(sign);
  uint32_t m = mantissa, e = 113;  // the biased fp32 exponent of 2^-14
  while ((m & 0x400u) == 0) {
    m <<= 1;
    --e;
  }
  return float_of(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

}  // extern "C"
