// fp32 operands of the AMX kernels in exact bf16 parts. tdpbf16ps multiplies
// bf16 by bf16 exactly and adds in fp32, so an fp32 operand taken as the sum of
// three bf16 parts (8 + 8 + 8 of its 24 significant bits) gives products as exact
// as fp32 FMAs do; only the order of the fp32 additions differs.
#pragma once

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* they use).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace mhc::kernels::amx {

constexpr int kParts = 3;  // hi, mid, lo

// One fp32 vector split exactly into three bf16-valued fp32 vectors: each part the
// truncation to 8 significant bits of what the previous ones left. Inf and NaN go
// whole into hi (NaN made quiet so truncation cannot turn it into Inf).
__attribute__((target("avx512f,avx512bw"))) inline void split3(__m512 v, __m512 parts[kParts]) {
  const __m512i top = _mm512_set1_epi32(int(0xffff0000u));
  const __m512i bits = _mm512_castps_si512(v);
  const __mmask16 nonfinite =
      _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7f800000));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  __m512i hi = _mm512_and_si512(bits, top);
  hi = _mm512_mask_or_epi32(hi, nan, hi, _mm512_set1_epi32(0x00400000));
  const __m512 rest = _mm512_maskz_sub_ps(~nonfinite, v, _mm512_castsi512_ps(hi));
  const __m512 mid = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(rest), top));
  parts[0] = _mm512_castsi512_ps(hi);
  parts[1] = mid;
  parts[2] = _mm512_sub_ps(rest, mid);  // at most 8 significant bits: exact in bf16
}

// The same split of one value, as the bf16 bits of its parts.
inline void split3_bits(float v, uint16_t parts[kParts]) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const bool nonfinite = (bits & 0x7f800000u) == 0x7f800000u, nan = (bits & 0x7fffffffu) > 0x7f800000u;
  uint32_t hi = bits & 0xffff0000u;
  if (nan) hi |= 0x00400000u;
  float hi_value;
  std::memcpy(&hi_value, &hi, 4);
  const float rest = nonfinite ? 0.0f : v - hi_value;
  uint32_t rest_bits;
  std::memcpy(&rest_bits, &rest, 4);
  const uint32_t mid = rest_bits & 0xffff0000u;
  float mid_value;
  std::memcpy(&mid_value, &mid, 4);
  const float lo = rest - mid_value;
  uint32_t lo_bits;
  std::memcpy(&lo_bits, &lo, 4);
  parts[0] = uint16_t(hi >> 16);
  parts[1] = uint16_t(mid >> 16);
  parts[2] = uint16_t(lo_bits >> 16);
}

// The bf16 of lanes of `low` in the low halves and of `high` in the high halves of
// each dword (both bf16-valued fp32): a row of a B tile whose pairs are (low, high).
__attribute__((target("avx512f"))) inline __m512i pair_halves(__m512 low, __m512 high) {
  return _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(low), 16),
                         _mm512_and_si512(_mm512_castps_si512(high), _mm512_set1_epi32(int(0xffff0000u))));
}

}  // namespace mhc::kernels::amx
