// The AMX forward's rows of x (x_rows.hpp).
#include "kernels/amx/x_rows.hpp"

#include <cstring>

#include "kernels/amx/intrinsics.hpp"

namespace mhc::kernels::amx {

std::pair<const void*, int64_t> XSource::source(int64_t t, int64_t count, int64_t s,
                                               uint16_t* tile_staging) const {
  if (count == 16)
    if (const char* row = direct_row(t, s)) return {row, token_bytes};
  const PreShape& d = o->shape;
  const int64_t k0 = s * kStep;
  const char* x = static_cast<const char*>(o->x.data);
  const bool row_run = k0 + kStep <= d.K && (k0 % d.D + kStep <= d.D || o->x.stream_stride == d.D);
  if (row_run && count == 1) return {x + 2 * (o->x.at(t, k0 / d.D) + k0 % d.D), kStep * 2};
  for (int64_t i = 0; i < count; ++i) {
    uint16_t* row = tile_staging + i * kStep;
    if (row_run) {
      std::memcpy(row, x + 2 * (o->x.at(t + i, k0 / d.D) + k0 % d.D), kStep * 2);
      continue;
    }
    for (int64_t c = 0; c < kStep; ++c) {
      const int64_t k = k0 + c;
      row[c] = k < d.K ? static_cast<const uint16_t*>(o->x.data)[o->x.at(t + i, k / d.D) + k % d.D] : 0;
    }
  }
  return {tile_staging, kStep * 2};
}

XSource::Step XSource::step(int64_t s) const {
  const PreShape& d = o->shape;
  const int64_t k0 = s * kStep;
  const bool row_run = k0 + kStep <= d.K && (k0 % d.D + kStep <= d.D || o->x.stream_stride == d.D);
  return {row_run, k0 / d.D, k0 % d.D};
}

const char* XSource::direct_row(int64_t t, int64_t s) const {
  const PreShape& d = o->shape;
  const int64_t k0 = s * kStep;
  if (!direct || k0 + kStep > d.K) return nullptr;
  return static_cast<const char*>(o->x.data) + 2 * (o->x.at(t, k0 / d.D) + k0 % d.D);
}

void XSource::stage_fp16_rows(const char* first, int64_t i0, int64_t i1, uint16_t* hi, uint16_t* lo,
                              float* sq) const {
  for (int64_t i = i0; i < i1; ++i) fp16_parts(first + i * token_bytes, hi + i * kStep, lo + i * kStep, sq + 16 * i);
}

void XSource::stage_fp16(int64_t t, int64_t count, int64_t s, uint16_t* hi, uint16_t* lo, float* sq) const {
  if (const char* first = direct_row(t, s)) return stage_fp16_rows(first, 0, count, hi, lo, sq);
  for (int64_t i = 0; i < count; ++i) {
    const auto [row, stride] = source(t + i, 1, s, row_staging);
    (void)stride;
    fp16_parts(row, hi + i * kStep, lo + i * kStep, sq + 16 * i);
  }
}

bool x_direct(const ForwardOperands& o) {
  const PreShape& d = o.shape;
  return d.D % kStep == 0 || d.N == 1 || o.x.stream_stride == d.D;
}

// sq[i][lane] += the squares of the 32 bf16 of row i (rows at `stride` bytes):
// the sums of v^2 formed while the rows are in L1 for the tiles, so the finish
// reads x once more, not twice.
__attribute__((target("avx512f,avx512bw"))) void accumulate_squares(const void* base, int64_t stride, int64_t rows,
                                                                    float* sq) {
  const char* row = static_cast<const char*>(base);
  const __m512i high = _mm512_set1_epi32(int(0xffff0000u));
  for (int64_t i = 0; i < rows; ++i, row += stride, sq += 16) {
    const __m512i v = _mm512_loadu_si512(row);
    const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    __m512 acc = _mm512_load_ps(sq);
    acc = _mm512_fmadd_ps(even, even, acc);
    acc = _mm512_fmadd_ps(odd, odd, acc);
    _mm512_store_ps(sq, acc);
  }
}

// A row of 32 fp16 of x as two rows of bf16 parts, hi (8 significant bits) and lo
// (the other 3: exact), and its squares added into sq[16] (fp32 from the fp16,
// first 16 then 16). Inf and NaN go whole into hi.
__attribute__((target("avx512f,avx512bw,f16c"))) void fp16_parts(const void* row, uint16_t* hi_row,
                                                                 uint16_t* lo_row, float* sq) {
  const __m256i* halves = static_cast<const __m256i*>(row);
  const __m512 v[2] = {_mm512_cvtph_ps(_mm256_loadu_si256(halves)), _mm512_cvtph_ps(_mm256_loadu_si256(halves + 1))};
  __m512 acc = _mm512_load_ps(sq);
  acc = _mm512_fmadd_ps(v[0], v[0], acc);
  acc = _mm512_fmadd_ps(v[1], v[1], acc);
  _mm512_store_ps(sq, acc);
  const __m512i top = _mm512_set1_epi32(int(0xffff0000u)), exponent = _mm512_set1_epi32(0x7f800000);
  __m512 hi[2], lo[2];
  for (int i = 0; i < 2; ++i) {
    const __m512i bits = _mm512_castps_si512(v[i]);
    const __mmask16 nonfinite = _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), exponent);
    hi[i] = _mm512_castsi512_ps(_mm512_and_si512(bits, top));  // (x not finite: token_m_scalar redoes m)
    lo[i] = _mm512_maskz_sub_ps(~nonfinite, v[i], hi[i]);
  }
  const __m512i high_halves = _mm512_load_si512(kHighHalves);
  _mm512_storeu_si512(hi_row, _mm512_permutex2var_epi16(_mm512_castps_si512(hi[0]), high_halves,
                                                        _mm512_castps_si512(hi[1])));
  _mm512_storeu_si512(lo_row, _mm512_permutex2var_epi16(_mm512_castps_si512(lo[0]), high_halves,
                                                        _mm512_castps_si512(lo[1])));
}

}  // namespace mhc::kernels::amx
