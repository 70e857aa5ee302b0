// MhcPre (SPEC §2) with the GEMM m = phi.u on AMX tiles, for bf16 x.
//
// Why AMX: with bf16 x the forward's F x K product is the operator's whole
// arithmetic, and one tdpbf16ps does 16 tokens x 32 columns x 16 rows of phi in
// 16 cycles: 16 times the fp32 FMA rate of the core. phi is fp32, so the product
// is taken exactly in three bf16 parts: phi.gamma = hi + mid + lo, each part the
// truncation of what the previous ones left (8 + 8 + 8 bits of the 24), every
// product bf16 x bf16 exact, the sums in fp32. x (bf16) is the tile operand as
// it lies in memory; gamma is folded into phi once per call (the SIMD kernels
// fold it into x instead; both round one product per element).
//
// Per call, forward_prepare packs the three parts of phi.gamma in the tiles'
// pair-interleaved (VNNI) layout. Per item of kItemTokens tokens, the k steps
// run in blocks whose packed phi stays in L2, the item's tokens in groups of one
// or two 16-token tiles; each token's row of the accumulators depends on its own
// x and phi only (batch invariance), in a fixed order of steps and parts. Then
// the SIMD family's finish: sum(v^2), the per-token outputs and h_in.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* they use).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "kernels/amx/amx.hpp"
#include "kernels/amx/tiles.hpp"
#include "kernels/common/token_math.hpp"
#include "kernels/simd/simd.hpp"

namespace mhc::kernels::amx {
namespace {

constexpr int64_t kStep = 32;           // columns of k per tile step (one A tile row: 64 bytes of bf16)
constexpr int64_t kStepsPerBlock = 64;  // packed phi of one block: 64 x 3 x 16 x F dwords, ~300 KiB at F = 24
constexpr int kParts = 3;               // hi, mid, lo
constexpr int kMaxFTiles = 6;
constexpr int64_t kFewTokens = 16;      // calls of at most this many tokens skip the packing (decode)           // F <= 96: the C tiles of one 16-token tile fit the 8 tiles

// How F is cut into tiles of columns, and how many 16-token tiles share a B tile.
struct Geometry {
  int f_tiles;     // C tiles per 16-token tile
  int width;       // columns per C tile (<= 16)
  int token_tiles; // 16-token tiles per group (2 when the tiles fit: 2 x f_tiles C + 2 A + 1 B <= 8)
  int x_parts;     // bf16 parts of x: 1 (bf16), 2 (fp16: 11 significant bits, exactly hi + lo)
  int64_t steps;   // k steps of 32 columns, the last zero-padded
  int64_t m_stride() const { return int64_t(f_tiles) * width; }
  int64_t tile_dwords() const { return 16 * int64_t(width); }
  int64_t step_dwords() const { return kParts * f_tiles * tile_dwords(); }
};

Geometry geometry(const core::Dims& d, DType x_dtype) {
  Geometry g;
  g.f_tiles = int((d.F + 15) / 16);
  g.width = int((d.F + g.f_tiles - 1) / g.f_tiles);
  g.x_parts = x_dtype == DType::fp16 ? 2 : 1;
  g.token_tiles = g.f_tiles <= 2 && g.x_parts == 1 ? 2 : 1;
  g.steps = (d.K + kStep - 1) / kStep;
  return g;
}

// ------------------------------------------------------------------ packing phi.gamma

// 32 values of phi.gamma for row f, columns [k0, k0 + 32), zero past K.
__attribute__((target("avx512f"))) void load_phi_gamma(const core::ForwardProblem& p, int64_t f, int64_t k0, float* out) {
  const core::Dims& d = p.dims;
  const float* phi = static_cast<const float*>(p.phi.data);
  const float* gamma = static_cast<const float*>(p.gamma.data);
  const int64_t n0 = k0 / d.D, j0 = k0 % d.D;
  const bool gamma_unit = !p.gamma.present() || (p.gamma.stride[3] == 1 && (j0 + kStep <= d.D || p.gamma.stride[2] == d.D));
  if (p.phi.stride[3] == 1 && k0 + kStep <= d.K && gamma_unit) {
    const float* row = phi + p.phi.at(f, k0);
    if (!p.gamma.present()) {
      std::memcpy(out, row, kStep * sizeof(float));
    } else {
      const float* g = gamma + p.gamma.at(n0, j0);
      _mm512_store_ps(out, _mm512_mul_ps(_mm512_loadu_ps(row), _mm512_loadu_ps(g)));
      _mm512_store_ps(out + 16, _mm512_mul_ps(_mm512_loadu_ps(row + 16), _mm512_loadu_ps(g + 16)));
    }
    return;
  }
  for (int i = 0; i < kStep; ++i) {
    const int64_t k = k0 + i;
    if (k >= d.K) {
      out[i] = 0.0f;
      continue;
    }
    const float w = p.phi.load(p.phi.at(f, k));
    out[i] = p.gamma.present() ? w * p.gamma.load(p.gamma.at(k / d.D, k % d.D)) : w;
  }
}

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

// rows[i] := column i of the 16 x 16 dword matrix whose rows were rows[i].
__attribute__((target("avx512f"))) inline void transpose16(__m512i rows[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[4q + j]: 128-bit lane l holds dword j..j of rows 4q..4q+3 at column 4l + j.
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88),
                  v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    rows[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    rows[8 + j] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    rows[4 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    rows[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

// Word i of the result is the high half of fp32 lane i of (lo, hi): the bf16 of column i.
alignas(64) constexpr uint16_t kHighHalves[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                                  33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};

// Row f of phi.gamma, columns [k0, k0 + 32), in three bf16 parts of 32 columns each.
// Returns false if one of them is not finite.
__attribute__((target("avx512f,avx512bw"))) inline bool split_row(const core::ForwardProblem& p, int64_t f,
                                                                  int64_t k0, __m512i parts[kParts]) {
  const core::Dims& d = p.dims;
  __m512 lo, hi;
  const int64_t j0 = k0 % d.D;
  const bool gamma_unit = !p.gamma.present() || (p.gamma.stride[3] == 1 && (j0 + kStep <= d.D || p.gamma.stride[2] == d.D));
  if (p.phi.stride[3] == 1 && k0 + kStep <= d.K && gamma_unit) {  // the common case, inline
    const float* row = static_cast<const float*>(p.phi.data) + p.phi.at(f, k0);
    lo = _mm512_loadu_ps(row), hi = _mm512_loadu_ps(row + 16);
    if (p.gamma.present()) {
      const float* g = static_cast<const float*>(p.gamma.data) + p.gamma.at(k0 / d.D, j0);
      lo = _mm512_mul_ps(lo, _mm512_loadu_ps(g)), hi = _mm512_mul_ps(hi, _mm512_loadu_ps(g + 16));
    }
  } else {
    alignas(64) float values[kStep];
    load_phi_gamma(p, f, k0, values);
    lo = _mm512_load_ps(values), hi = _mm512_load_ps(values + 16);
  }
  __m512 first[kParts], second[kParts];
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __mmask16 nonfinite =
      _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(lo), exponent), exponent) |
      _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(hi), exponent), exponent);
  split3(lo, first);
  split3(hi, second);
  const __m512i high_halves = _mm512_load_si512(kHighHalves);
  for (int part = 0; part < kParts; ++part)
    parts[part] = _mm512_permutex2var_epi16(_mm512_castps_si512(first[part]), high_halves,
                                            _mm512_castps_si512(second[part]));
  return nonfinite == 0;
}

// Packs k steps [s0, s1): for each step, part and C tile, 16 rows (pairs of
// columns of phi) x width columns (rows of phi) of bf16 pairs, as tdpbf16ps
// reads B. Steps go in blocks of kPackSteps: each row of phi is read in a run of
// kPackSteps x 128 bytes (rows are K floats apart: short runs starve the
// prefetcher), split and paired into `pairs`, then 16 rows at a time are
// transposed in registers into the tiles.
__attribute__((target("avx512f,avx512bw"))) bool pack_steps(const core::ForwardProblem& p, const Geometry& g,
                                                            int64_t s0, int64_t s1, uint32_t* packed) {
  bool finite = true;
  const core::Dims& d = p.dims;
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
          finite = split_row(p, f, (b0 + i) * kStep, parts) && finite;
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

// ------------------------------------------------------------------ the tiles

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
    hi[i] = _mm512_castsi512_ps(_mm512_and_si512(bits, top));  // fp16 NaNs are quiet in fp32: stay NaN
    lo[i] = _mm512_maskz_sub_ps(~nonfinite, v[i], hi[i]);
  }
  const __m512i high_halves = _mm512_load_si512(kHighHalves);
  _mm512_storeu_si512(hi_row, _mm512_permutex2var_epi16(_mm512_castps_si512(hi[0]), high_halves,
                                                        _mm512_castps_si512(hi[1])));
  _mm512_storeu_si512(lo_row, _mm512_permutex2var_epi16(_mm512_castps_si512(lo[0]), high_halves,
                                                        _mm512_castps_si512(lo[1])));
}


// Where a 16-token tile's 32 columns of x come from: x itself (rows at a fixed
// stride), or a zero-padded copy (the item's last tokens, the last step, layouts
// whose rows are not unit-stride 64-byte runs).
struct XSource {
  const core::ForwardProblem* p;
  bool direct;          // x's tokens at a uniform stride, each step's 32 columns contiguous
  int64_t token_bytes;  // that stride
  uint16_t* staging;    // [16][32] tiles: per token tile (bf16), per step parity and part (fp16)
  uint16_t* row_staging;  // [32]: one row of x copied (fp16)

  // Tile row pointer and stride for tokens [t, t + count) at step s.
  std::pair<const void*, int64_t> source(int64_t t, int64_t count, int64_t s, uint16_t* tile_staging) const {
    const core::Dims& d = p->dims;
    const int64_t k0 = s * kStep;
    const char* x = static_cast<const char*>(p->x.data);
    if (direct && count == 16 && k0 + kStep <= d.K)
      return {x + 2 * p->x.at(t, k0 / d.D, k0 % d.D), token_bytes};
    const bool row_run = p->x.stride[3] == 1 && k0 + kStep <= d.K &&
                         (k0 % d.D + kStep <= d.D || p->x.stride[2] == d.D);
    if (row_run && count == 1) return {x + 2 * p->x.at(t, k0 / d.D, k0 % d.D), kStep * 2};
    for (int64_t i = 0; i < count; ++i) {
      uint16_t* row = tile_staging + i * kStep;
      if (row_run) {
        std::memcpy(row, x + 2 * p->x.at(t + i, k0 / d.D, k0 % d.D), kStep * 2);
        continue;
      }
      for (int64_t c = 0; c < kStep; ++c) {
        const int64_t k = k0 + c;
        row[c] = k < d.K ? static_cast<const uint16_t*>(p->x.data)[p->x.at(t + i, k / d.D, k % d.D)] : 0;
      }
    }
    return {tile_staging, kStep * 2};
  }

  // fp16 x: tokens [t, t + count) at step s as rows of bf16 parts into hi and lo
  // ([16][32] each), their squares into sq rows of 16.
  void stage_fp16(int64_t t, int64_t count, int64_t s, uint16_t* hi, uint16_t* lo, uint16_t* row_staging,
                  float* sq) const {
    for (int64_t i = 0; i < count; ++i) {
      const auto [row, stride] = source(t + i, 1, s, row_staging);
      (void)stride;
      fp16_parts(row, hi + i * kStep, lo + i * kStep, sq + 16 * i);
    }
  }
};

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

template <int... I, class Body>
inline void unroll(std::integer_sequence<int, I...>, Body&& body) {
  (body(std::integral_constant<int, I>{}), ...);
}

// Tiles: C[tt][ft] = tt * NF + ft, A[tt][q] = TT * NF + XP * tt + q (q: part of x),
// B = TT * NF + XP * TT.
template <int NF, int TT, int XP>
struct Group {
  static constexpr int kA = TT * NF, kB = TT * NF + XP * TT;
  static_assert(kB < 8, "eight tiles");

  static TileConfig config(int width) {
    TileConfig c;
    for (int i = 0; i < TT * NF; ++i) c.rows[i] = 16, c.bytes_per_row[i] = uint16_t(width * 4);
    for (int i = kA; i < kB; ++i) c.rows[i] = 16, c.bytes_per_row[i] = 64;
    c.rows[kB] = 16, c.bytes_per_row[kB] = uint16_t(width * 4);
    return c;
  }

  // Tokens [t, t + count) (count <= 16 TT) over steps [s0, s1); acc rows at m_stride
  // floats, the lanes of sum(v^2) in sq rows of 16. Per element of C: step by
  // step, parts of phi hi, mid, lo, and within each the parts of x hi, lo.
  static void run(const Geometry& g, const XSource& x, const uint32_t* packed, int64_t t, int64_t count,
                  int64_t s0, int64_t s1, bool first, float* acc, float* sq) {
    const int64_t acc_bytes = g.m_stride() * 4, b_bytes = g.width * 4;
    unroll(std::make_integer_sequence<int, TT>{}, [&](auto tt) {
      unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) {
        constexpr int c = decltype(tt)::value * NF + decltype(ft)::value;
        if (first) tile_zero<c>();
        else tile_load<c>(acc + decltype(tt)::value * 16 * g.m_stride() + decltype(ft)::value * g.width, acc_bytes);
      });
    });
    // fp16: the parts of x are staged a step ahead (two buffers), so the tile
    // loads do not wait for the staging stores to reach L1.
    auto stage = [&](int64_t step) {
      uint16_t* staging = x.staging + (step & 1) * 2 * 16 * kStep;
      x.stage_fp16(t, std::min<int64_t>(count, 16), step, staging, staging + 16 * kStep, x.row_staging, sq);
    };
    if constexpr (XP == 2) stage(s0);
    for (int64_t s = s0; s < s1; ++s) {
      if constexpr (XP == 2) {
        static_assert(TT == 1, "fp16 takes one token tile a group");
        if (s + 1 < s1) stage(s + 1);
        const uint16_t* staging = x.staging + (s & 1) * 2 * 16 * kStep;
        tile_load<kA>(staging, 64);
        tile_load<kA + 1>(staging + 16 * kStep, 64);
      } else {
        unroll(std::make_integer_sequence<int, TT>{}, [&](auto tt) {
          constexpr int i = decltype(tt)::value;
          const int64_t rows = std::clamp<int64_t>(count - 16 * i, 0, 16);
          const auto [base, stride] = x.source(t + 16 * i, rows, s, x.staging + i * 16 * kStep);
          tile_load<kA + i>(base, stride);
          accumulate_squares(base, stride, rows, sq + 16 * 16 * i);
        });
      }
      const uint32_t* step = packed + s * g.step_dwords();
      for (int part = 0; part < kParts; ++part)
        unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) {
          tile_load<kB>(step + (part * NF + decltype(ft)::value) * g.tile_dwords(), b_bytes);
          unroll(std::make_integer_sequence<int, TT>{}, [&](auto tt) {
            unroll(std::make_integer_sequence<int, XP>{}, [&](auto q) {
              tile_dpbf16ps<decltype(tt)::value * NF + decltype(ft)::value,
                            kA + XP * decltype(tt)::value + decltype(q)::value, kB>();
            });
          });
        });
    }
    unroll(std::make_integer_sequence<int, TT>{}, [&](auto tt) {
      unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) {
        tile_store<decltype(tt)::value * NF + decltype(ft)::value>(
            acc + decltype(tt)::value * 16 * g.m_stride() + decltype(ft)::value * g.width, acc_bytes);
      });
    });
  }
};

// m of the item's tokens [t0, t1) into acc, for one shape of tiles.
template <int NF, int TT, int XP>
void item_gemm(const Geometry& g, const XSource& x, const uint32_t* packed, int64_t t0, int64_t t1, float* acc,
               float* sq) {
  const TileConfig config = Group<NF, TT, XP>::config(g.width);
  load_config(config);
  const int64_t group = 16 * TT;
  for (int64_t s0 = 0; s0 < g.steps; s0 += kStepsPerBlock) {
    const int64_t s1 = std::min(g.steps, s0 + kStepsPerBlock);
    for (int64_t t = t0; t < t1; t += group)
      Group<NF, TT, XP>::run(g, x, packed, t, std::min(group, t1 - t), s0, s1, s0 == 0, acc + (t - t0) * g.m_stride(),
                         sq + (t - t0) * 16);
  }
  release_tiles();
}

template <int XP>
void gemm_parts(const Geometry& g, const XSource& x, const uint32_t* packed, int64_t t0, int64_t t1, float* acc,
                float* sq) {
  if constexpr (XP == 1) {  // tokens in groups of two 16-token tiles when they fit, the item's odd last tile alone
    const int64_t paired = g.token_tiles == 2 ? (t1 - t0) / 32 * 32 : 0;
    if (paired > 0) {
      if (g.f_tiles == 1) item_gemm<1, 2, 1>(g, x, packed, t0, t0 + paired, acc, sq);
      else item_gemm<2, 2, 1>(g, x, packed, t0, t0 + paired, acc, sq);
    }
    acc += paired * g.m_stride(), sq += paired * 16, t0 += paired;
    if (t0 == t1) return;
  }
  switch (g.f_tiles) {
    case 1: return item_gemm<1, 1, XP>(g, x, packed, t0, t1, acc, sq);
    case 2: return item_gemm<2, 1, XP>(g, x, packed, t0, t1, acc, sq);
    case 3: return item_gemm<3, 1, XP>(g, x, packed, t0, t1, acc, sq);
    case 4: return item_gemm<4, 1, XP>(g, x, packed, t0, t1, acc, sq);
    case 5: return item_gemm<5, 1, XP>(g, x, packed, t0, t1, acc, sq);
    default:
      if constexpr (XP == 1) return item_gemm<6, 1, 1>(g, x, packed, t0, t1, acc, sq);
  }
}

void gemm(const Geometry& g, const XSource& x, const uint32_t* packed, int64_t t0, int64_t t1, float* acc,
          float* sq) {
  if (g.x_parts == 1) gemm_parts<1>(g, x, packed, t0, t1, acc, sq);
  else gemm_parts<2>(g, x, packed, t0, t1, acc, sq);
}

// m of token t, one product at a time, for a token whose x is not finite: in
// parts, x = Inf times a part that is exactly 0 would give NaN where the
// reference has Inf. (The token's outputs are Inf or NaN either way; this keeps
// which.) A token's own data decides, so batch invariance holds.
void token_m_scalar(const core::ForwardProblem& p, int64_t t, float* m) {
  const core::Dims& d = p.dims;
  for (int64_t f = 0; f < d.F; ++f) {
    float sum = 0.0f;
    for (int64_t k = 0; k < d.K; ++k) {
      const int64_t n = k / d.D, j = k % d.D;
      float w = p.phi.load(p.phi.at(f, k));
      if (p.gamma.present()) w *= p.gamma.load(p.gamma.at(n, j));
      sum += p.x.load(p.x.at(t, n, j)) * w;
    }
    m[f] = sum;
  }
}

// ------------------------------------------------------------------ a few tokens

// A call of at most kFewTokens tokens (decode) takes the same products with the
// operands' roles swapped: A = phi.gamma in parts (16 rows of phi, split step by
// step into L1), B = x (pairs of columns, one column per token), C = 16 rows of
// phi x the tokens. Packing phi for B tiles once per call would cost a decode
// step several times its arithmetic. Every element of C is the same sequence of
// exact pair products and fp32 additions as in the packed path (step by step,
// parts hi, mid, lo), so a token's bits do not depend on its batch's size
// (the batch invariance tests compare the two).
struct FewStaging {
  static constexpr int64_t kAHalfwords = 2 * kMaxFTiles * kParts * 16 * kStep;
  static constexpr int64_t kFloats = kAHalfwords / 2 + 2 * 2 * 16 * kFewTokens + 16 * kFewTokens + 3 * kStep / 2;
  uint16_t* a;   // [2][kMaxFTiles][kParts][16][32] bf16: rows of phi.gamma in parts, two steps
  uint32_t* b;   // [2][x part][16][kFewTokens] pairs of x, two steps
  float* c;      // [16][kFewTokens] a C tile
  uint16_t* row; // [3][32] a row of x copied, and its parts (fp16)
  uint32_t* b_tile(int buf, int q) const { return b + (buf * 2 + q) * 16 * kFewTokens; }
  uint16_t* a_tile(int buf, int tile, int part) const { return a + ((buf * kMaxFTiles + tile) * kParts + part) * 16 * kStep; }
};

// The rows of C tile `tile` of phi.gamma at step s, in parts, into a (rows past F stay as they are: zero).
__attribute__((target("avx512f,avx512bw"))) bool stage_phi_rows(const core::ForwardProblem& p, const Geometry& g,
                                                                int tile, int64_t s, uint16_t* a) {
  bool finite = true;
  for (int r = 0; r < g.width && tile * g.width + r < p.dims.F; ++r) {
    __m512i parts[kParts];
    finite = split_row(p, tile * g.width + r, s * kStep, parts) && finite;
    for (int part = 0; part < kParts; ++part) _mm512_storeu_si512(a + (part * 16 + r) * kStep, parts[part]);
  }
  return finite;
}

// Everything step s needs, into staging buffer `buf`: the rows of phi.gamma in
// parts for every C tile, and the tokens' pairs of x (their squares summed as
// they pass). Staged a step ahead of the products that read them, so the tile
// loads do not wait for these stores to reach L1.
bool stage_step(const core::ForwardProblem& p, const Geometry& g, const XSource& x, int64_t t0, int64_t n, int64_t s,
                float* sq, const FewStaging& st, int buf) {
  for (int64_t c = 0; c < n; ++c) {
    const auto [row, stride] = x.source(t0 + c, 1, s, st.row);
    (void)stride;
    const uint32_t* parts[2] = {static_cast<const uint32_t*>(row), nullptr};
    if (g.x_parts == 1) {
      accumulate_squares(row, 64, 1, sq + 16 * c);
    } else {
      fp16_parts(row, st.row + kStep, st.row + 2 * kStep, sq + 16 * c);
      parts[0] = reinterpret_cast<const uint32_t*>(st.row + kStep);
      parts[1] = reinterpret_cast<const uint32_t*>(st.row + 2 * kStep);
    }
    for (int q = 0; q < g.x_parts; ++q) {
      uint32_t* b = st.b_tile(buf, q);
      for (int r = 0; r < 16; ++r) b[r * n + c] = parts[q][r];
    }
  }
  bool finite = true;
  for (int tile = 0; tile < g.f_tiles; ++tile) finite = stage_phi_rows(p, g, tile, s, st.a_tile(buf, tile, 0)) && finite;
  return finite;
}

// Tiles: C 0..NF-1, A 7 - XP, B (one per part of x) 8 - XP...7.
template <int NF, int XP>
bool few_tokens_gemm(const core::ForwardProblem& p, const Geometry& g, const XSource& x, int64_t t0, int64_t n,
                     float* acc, float* sq, const FewStaging& st) {
  constexpr int kA = 7 - XP, kB = 8 - XP;
  static_assert(NF <= kA, "C tiles below A and B");
  const core::Dims& d = p.dims;
  TileConfig config;
  for (int i = 0; i < NF; ++i) config.rows[i] = 16, config.bytes_per_row[i] = uint16_t(4 * n);
  config.rows[kA] = 16, config.bytes_per_row[kA] = 64;
  for (int q = 0; q < XP; ++q) config.rows[kB + q] = 16, config.bytes_per_row[kB + q] = uint16_t(4 * n);
  load_config(config);
  unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) { tile_zero<decltype(ft)::value>(); });
  std::memset(st.a, 0, FewStaging::kAHalfwords * sizeof(uint16_t));  // rows past F stay zero
  bool phi_finite = stage_step(p, g, x, t0, n, 0, sq, st, 0);
  for (int64_t s = 0; s < g.steps; ++s) {
    if (s + 1 < g.steps) phi_finite = stage_step(p, g, x, t0, n, s + 1, sq, st, int((s + 1) & 1)) && phi_finite;
    const int buf = int(s & 1);
    unroll(std::make_integer_sequence<int, XP>{}, [&](auto q) {
      tile_load<kB + decltype(q)::value>(st.b_tile(buf, decltype(q)::value), 4 * n);
    });
    unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) {
      constexpr int tile = decltype(ft)::value;
      for (int part = 0; part < kParts; ++part) {
        tile_load<kA>(st.a_tile(buf, tile, part), 64);
        unroll(std::make_integer_sequence<int, XP>{}, [&](auto q) { tile_dpbf16ps<tile, kA, kB + decltype(q)::value>(); });
      }
    });
  }
  unroll(std::make_integer_sequence<int, NF>{}, [&](auto ft) {
    constexpr int tile = decltype(ft)::value;
    tile_store<tile>(st.c, 4 * n);
    for (int r = 0; r < g.width && tile * g.width + r < d.F; ++r)
      for (int64_t c = 0; c < n; ++c) acc[c * g.m_stride() + tile * g.width + r] = st.c[r * n + c];
  });
  release_tiles();
  return phi_finite;
}

template <int XP>
bool few_tokens_parts(const core::ForwardProblem& p, const Geometry& g, const XSource& x, int64_t t0, int64_t n,
                      float* acc, float* sq, const FewStaging& st) {
  switch (g.f_tiles) {
    case 1: return few_tokens_gemm<1, XP>(p, g, x, t0, n, acc, sq, st);
    case 2: return few_tokens_gemm<2, XP>(p, g, x, t0, n, acc, sq, st);
    case 3: return few_tokens_gemm<3, XP>(p, g, x, t0, n, acc, sq, st);
    case 4: return few_tokens_gemm<4, XP>(p, g, x, t0, n, acc, sq, st);
    case 5: return few_tokens_gemm<5, XP>(p, g, x, t0, n, acc, sq, st);
    default:
      if constexpr (XP == 1) return few_tokens_gemm<6, 1>(p, g, x, t0, n, acc, sq, st);
      return false;
  }
}

// Returns whether phi.gamma was finite.
bool few_tokens(const core::ForwardProblem& p, const Geometry& g, const XSource& x, int64_t t0, int64_t n,
                float* acc, float* sq, const FewStaging& st) {
  if (g.x_parts == 1) return few_tokens_parts<1>(p, g, x, t0, n, acc, sq, st);
  return few_tokens_parts<2>(p, g, x, t0, n, acc, sq, st);
}

bool x_direct(const core::Strided& x, const core::Dims& d, int64_t* token_bytes) {
  const bool uniform = d.B == 1 || d.S == 1 || x.stride[0] == d.S * x.stride[1];
  *token_bytes = 2 * (d.S > 1 ? x.stride[1] : x.stride[0]);
  return uniform && x.stride[3] == 1 && (d.D % kStep == 0 || d.N == 1 || x.stride[2] == d.D);
}

// bf16 x with F <= 96, fp16 x (two parts: one A tile more) with F <= 80.
bool forward_uses_tiles_impl(const core::ForwardProblem& p) {
  if (p.dims.K == 0) return false;
  if (p.x.dtype == DType::bf16) return p.dims.F <= 16 * kMaxFTiles;
  return p.x.dtype == DType::fp16 && p.dims.F <= 16 * (kMaxFTiles - 1);
}

// The worker's scratch for one item.
struct ItemScratch {
  float* acc;          // [kItemTokens][m_stride] m, as the C tiles store it
  float* sq;           // [kItemTokens][16] lanes of sum(v^2)
  uint16_t* staging;   // [4][16][32] bf16: A tiles copied from x (bf16: 2 token tiles; fp16: 2 steps x 2 parts)
  FewStaging few;
  float* h_pre;        // [N]
};
constexpr int64_t kAccFloats = kItemTokens * 16 * kMaxFTiles, kSqFloats = kItemTokens * 16,
                  kStagingFloats = 4 * 16 * kStep / 2, kFewFloats = FewStaging::kFloats;

ItemScratch lay_out(float* base) {
  ItemScratch s;
  s.acc = base;
  s.sq = s.acc + plan::align16(kAccFloats);
  s.staging = reinterpret_cast<uint16_t*>(s.sq + plan::align16(kSqFloats));
  float* few = s.sq + plan::align16(kSqFloats) + plan::align16(kStagingFloats);
  s.few.a = reinterpret_cast<uint16_t*>(few);
  s.few.b = reinterpret_cast<uint32_t*>(few + FewStaging::kAHalfwords / 2);
  s.few.c = reinterpret_cast<float*>(s.few.b + 2 * 2 * 16 * kFewTokens);
  s.few.row = reinterpret_cast<uint16_t*>(s.few.c + 16 * kFewTokens);
  s.h_pre = few + plan::align16(kFewFloats);
  return s;
}

}  // namespace

bool forward_uses_tiles(const core::ForwardProblem& p) { return forward_uses_tiles_impl(p); }

int64_t forward_item_tokens(const core::ForwardProblem& p) {
  return forward_uses_tiles(p) ? kItemTokens : plan::kTokensPerItem;
}

// Packed phi.gamma, then the preparation's flags: [0] the number of parts, [1 + part]
// 1 when its share of phi.gamma was finite.
int64_t packed_floats(const core::ForwardProblem& p) {
  const Geometry g = geometry(p.dims, p.x.dtype);
  return plan::align16(g.steps * g.step_dwords());
}

int64_t forward_shared_floats(const core::ForwardProblem& p) {
  if (!forward_uses_tiles(p) || p.dims.T <= kFewTokens) return 0;
  return packed_floats(p) + plan::align16(1 + kMaxPrepareParts);
}

int64_t forward_scratch_floats(const core::Dims& d) {
  const int64_t own = plan::align16(kAccFloats) + plan::align16(kSqFloats) + plan::align16(kStagingFloats) +
                      plan::align16(kFewFloats) + plan::align16(d.N);
  return std::max(own, simd::forward_scratch_floats(d));
}

void forward_prepare(const ForwardArgs& args, int64_t part, int64_t parts) {
  const core::ForwardProblem& p = *args.problem;
  if (!forward_uses_tiles(p)) return;
  const Geometry g = geometry(p.dims, p.x.dtype);
  const bool finite = pack_steps(p, g, g.steps * part / parts, g.steps * (part + 1) / parts,
                                 reinterpret_cast<uint32_t*>(args.shared()));
  float* flags = args.shared() + packed_floats(p);
  flags[1 + part] = finite ? 1.0f : 0.0f;
  if (part == 0) flags[0] = float(parts);
}

void forward_tokens(const ForwardArgs& args, int64_t t0, int64_t t1, int worker) {
  const core::ForwardProblem& p = *args.problem;
  if (!forward_uses_tiles(p)) return simd::forward_tokens(args, t0, t1, worker);
  const Geometry g = geometry(p.dims, p.x.dtype);
  const ItemScratch s = lay_out(args.scratch(worker));
  std::memset(s.staging, 0, 4 * 16 * kStep * sizeof(uint16_t));  // rows past the item's tokens stay zero
  std::fill_n(s.sq, (t1 - t0) * 16, 0.0f);
  XSource x{&p, false, 0, s.staging, s.few.row};
  x.direct = x_direct(p.x, p.dims, &x.token_bytes);
  bool phi_finite = true;
  if (p.dims.T <= kFewTokens) {
    phi_finite = few_tokens(p, g, x, t0, t1 - t0, s.acc, s.sq, s.few);
  } else {
    gemm(g, x, reinterpret_cast<const uint32_t*>(args.shared()), t0, t1, s.acc, s.sq);
    const float* flags = args.shared() + packed_floats(p);
    for (int i = 0; i < int(flags[0]); ++i) phi_finite = phi_finite && flags[1 + i] == 1.0f;
  }
  // One product at a time where a zero bf16 part may meet Inf: x not finite (its
  // sum of squares tells), or phi.gamma not finite with fp16 x (whose lo part is
  // zero for x of 8 significant bits).
  const bool all_scalar = !phi_finite && g.x_parts == 2;
  for (int64_t t = t0; t < t1; ++t) {
    float lanes[16];
    std::copy_n(s.sq + (t - t0) * 16, 16, lanes);
    if (all_scalar || !std::isfinite(fold16(lanes))) token_m_scalar(p, t, s.acc + (t - t0) * g.m_stride());
  }
  simd::forward_finish_tokens(p, t0, t1, s.acc, g.m_stride(), s.sq, s.h_pre);
}

}  // namespace mhc::kernels::amx
