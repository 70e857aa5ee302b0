// phi.gamma in three exact bf16 parts (phi_parts.hpp).
#include "kernels/amx/phi_parts.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/amx/intrinsics.hpp"
#include "kernels/amx/transpose.hpp"

namespace mhc::kernels::amx {
namespace {

// ------------------------------------------------------------------ packing phi.gamma

// 32 values of phi.gamma for row f, columns [k0, k0 + 32), zero past K, one at a
// time (split_row reads whole runs itself).
void load_phi_gamma(const ForwardOperands& o, int64_t f, int64_t k0, float* out) {
  const PreShape& d = o.shape;
  for (int i = 0; i < kStep; ++i) {
    const int64_t k = k0 + i;
    if (k >= d.K) {
      out[i] = 0.0f;
      continue;
    }
    const float w = o.phi.row(f)[k];
    out[i] = o.gamma.present() ? w * o.gamma.row(k / d.D)[k % d.D] : w;
  }
}

// One fp32 vector split exactly into three bf16-valued fp32 vectors: each part the
// truncation to 8 significant bits of what the previous ones left. Returns the
// lanes that are not finite: Inf stays whole in hi, a NaN keeps its top bits
// there; the caller redoes such sums one product at a time, so their other parts
// are never used. (Masking them out and quieting NaNs would slow every split:
// mhc-kernel-bench AmxSplitStep.)
__attribute__((target("avx512f,avx512bw,avx512dq"))) inline __mmask16 split3(__m512 v, __m512 parts[kParts]) {
  const __m512i top = _mm512_set1_epi32(int(0xffff0000u));
  const __mmask16 nonfinite = _mm512_fpclass_ps_mask(v, 0x99);  // QNaN, +Inf, -Inf, SNaN
  const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), top));
  const __m512 rest = _mm512_sub_ps(v, hi);
  const __m512 mid = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(rest), top));
  parts[0] = hi;
  parts[1] = mid;
  parts[2] = _mm512_sub_ps(rest, mid);  // at most 8 significant bits: exact in bf16
  return nonfinite;
}

// 32 values of phi.gamma (lo: columns 0-15, hi: 16-31) in three bf16 parts of 32
// columns each. Returns the lanes that are not finite.
__attribute__((target("avx512f,avx512bw,avx512dq"))) inline __mmask16 split_pairs(__m512 lo, __m512 hi,
                                                                         __m512i parts[kParts]) {
  __m512 first[kParts], second[kParts];
  const __mmask16 nonfinite = split3(lo, first) | split3(hi, second);
  const __m512i high_halves = _mm512_load_si512(kHighHalves);
  for (int part = 0; part < kParts; ++part)
    parts[part] = _mm512_permutex2var_epi16(_mm512_castps_si512(first[part]), high_halves,
                                            _mm512_castps_si512(second[part]));
  return nonfinite;
}

// Whether columns [k0, k0 + 32) of phi.gamma can be read as two vectors of each row
// of phi and two of gamma: a whole step, gamma's columns in one run.
inline bool unit_step(const ForwardOperands& o, int64_t k0) {
  const PreShape& d = o.shape;
  const bool gamma_run = !o.gamma.present() || k0 % d.D + kStep <= d.D || o.gamma.row_stride == d.D;
  return k0 + kStep <= d.K && gamma_run;
}

// gamma's columns [k0, k0 + 32) of a unit step; nullptr without gamma.
inline const float* gamma_step(const ForwardOperands& o, int64_t k0) {
  if (!o.gamma.present()) return nullptr;
  return o.gamma.row(k0 / o.shape.D) + k0 % o.shape.D;
}

// 32 values of phi.gamma as two vectors, from a unit step's row of phi times
// gamma's columns (none: nullptr)...
__attribute__((target("avx512f"))) inline void load_unit_row(const float* row, const float* gamma, __m512& lo,
                                                             __m512& hi) {
  lo = _mm512_loadu_ps(row), hi = _mm512_loadu_ps(row + 16);
  if (gamma != nullptr)
    lo = _mm512_mul_ps(lo, _mm512_loadu_ps(gamma)), hi = _mm512_mul_ps(hi, _mm512_loadu_ps(gamma + 16));
}
// ...or from row f of phi, value by value.
__attribute__((target("avx512f"))) inline void load_any_row(const ForwardOperands& o, int64_t f, int64_t k0,
                                                            __m512& lo, __m512& hi) {
  alignas(64) float values[kStep];
  load_phi_gamma(o, f, k0, values);
  lo = _mm512_load_ps(values), hi = _mm512_load_ps(values + 16);
}

// Row f of phi.gamma, columns [k0, k0 + 32), in three bf16 parts of 32 columns each.
// Returns false if one of them is not finite.
__attribute__((target("avx512f,avx512bw,avx512dq"))) inline bool split_row(const ForwardOperands& o, int64_t f,
                                                                  int64_t k0, __m512i parts[kParts]) {
  __m512 lo, hi;
  if (unit_step(o, k0))  // the common case, inline
    load_unit_row(o.phi.row(f) + k0, gamma_step(o, k0), lo, hi);
  else
    load_any_row(o, f, k0, lo, hi);
  return split_pairs(lo, hi, parts) == 0;
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512dq"))) bool split_step(const float* values, uint16_t* parts) {
  __m512i split[kParts];
  const bool finite = split_pairs(_mm512_loadu_ps(values), _mm512_loadu_ps(values + 16), split) == 0;
  for (int part = 0; part < kParts; ++part) _mm512_storeu_si512(parts + part * kStep, split[part]);
  return finite;
}

// Packs k steps [s0, s1): for each step, part and C tile, 16 rows (pairs of
// columns of phi) x width columns (rows of phi) of bf16 pairs, as tdpbf16ps
// reads B. Steps go in blocks of kPackSteps: each row of phi is read in a run of
// kPackSteps x 128 bytes (rows are K floats apart: short runs starve the
// prefetcher), split and paired into `pairs`, then 16 rows at a time are
// transposed in registers into the tiles.
__attribute__((target("avx512f,avx512bw,avx512dq"))) bool pack_steps(const ForwardOperands& o, const Geometry& g,
                                                            int64_t s0, int64_t s1, uint32_t* packed) {
  bool finite = true;
  const PreShape& d = o.shape;
  constexpr int64_t kPackSteps = 8;
  alignas(64) __m512i pairs[kPackSteps][kParts][16];  // 24 KiB
  const __mmask16 row_mask = __mmask16((1u << g.width) - 1);
  for (int64_t b0 = s0; b0 < s1; b0 += kPackSteps) {
    const int64_t steps = std::min(kPackSteps, s1 - b0);
    for (int tile = 0; tile < g.f_tiles; ++tile) {
      for (int c = 0; c < 16; ++c) {
        const int64_t f = int64_t(tile) * g.width + c;
        const bool real = c < g.width && f < d.F;
        for (int64_t i = 0; i < steps; ++i) {
          if (!real) {
            for (int part = 0; part < kParts; ++part) pairs[i][part][c] = _mm512_setzero_si512();
            continue;
          }
          __m512i parts[kParts];
          finite = split_row(o, f, (b0 + i) * kStep, parts) && finite;
          for (int part = 0; part < kParts; ++part) pairs[i][part][c] = parts[part];
        }
      }
      for (int64_t i = 0; i < steps; ++i)
        for (int part = 0; part < kParts; ++part) {
          transpose16(pairs[i][part]);
          uint32_t* tile_base = packed + (b0 + i) * g.step_dwords() + (part * g.f_tiles + tile) * g.tile_dwords();
          for (int r = 0; r < 16; ++r) _mm512_mask_storeu_epi32(tile_base + r * g.width, row_mask, pairs[i][part][r]);
        }
    }
  }
  return finite;
}

// The rows of C tile `tile` of phi.gamma at step s, in parts, into a (rows past F
// stay as they are: zero). A decode call splits all of phi.gamma: a unit step's
// offsets into phi and gamma are taken once for all its rows (split_row divides
// k0 by D for each).
__attribute__((target("avx512f,avx512bw,avx512dq"))) bool stage_phi_rows(const ForwardOperands& o, const Geometry& g,
                                                                int tile, int64_t s, uint16_t* a) {
  const int64_t f0 = int64_t(tile) * g.width, k0 = s * kStep;
  const int rows = int(std::clamp<int64_t>(o.shape.F - f0, 0, g.width));
  const bool unit = unit_step(o, k0);
  const float* first_row = unit ? o.phi.row(f0) + k0 : nullptr;
  const float* gamma = unit ? gamma_step(o, k0) : nullptr;
  __mmask16 nonfinite = 0;
  for (int r = 0; r < rows; ++r) {
    __m512 lo, hi;
    if (unit) load_unit_row(first_row + r * o.phi.row_stride, gamma, lo, hi);
    else load_any_row(o, f0 + r, k0, lo, hi);
    __m512i parts[kParts];
    nonfinite |= split_pairs(lo, hi, parts);
    for (int part = 0; part < kParts; ++part) _mm512_storeu_si512(a + (part * 16 + r) * kStep, parts[part]);
  }
  return nonfinite == 0;
}

}  // namespace mhc::kernels::amx
