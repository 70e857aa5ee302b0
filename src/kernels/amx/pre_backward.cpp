// MhcPreBackward (SPEC §3) for bf16 x in two passes, the F x K products on AMX
// tiles. Other dtypes take the SIMD family's chunked schedule.
//
// Pass 1 (tokens split over the workers): the SIMD family's per-token
// statistics (g_pre, then G, c, gz, the grad_alpha terms), and G of every token
// in three exact bf16 parts as A tiles, both ways (rows tokens; rows f).
// Pass 2 (blocks of columns split over the workers, every block over all
// tokens): per chunk of 64 tokens and stream n,
//  - x as B tiles of token pairs, from x's rows;
//  - grad_phi's chunk sums S[f][k] = sum_t G[t][f] x[t][k] (G^T in 3 parts, x
//    exact), added into the running totals as the SIMD family adds its sums;
//  - gu[t][k] = sum_f G[t][f] phi[f][k]: both fp32, so both in three parts, and
//    the six products of parts that reach fp32's precision (hi.hi, hi.mid,
//    mid.hi, hi.lo, mid.mid, lo.hi; the three dropped are below 2^-24 of the
//    product), smallest first;
//  - row by row: y = gamma*gu + c*x, the sums of x*gu, and grad_x =
//    h_pre*grad_h_in + y + grad_x_post.
// phi in parts is packed once per call and a block's share stays in L2 while
// every token streams through it once: x is read twice (pass 1 and 2), the other
// per-token tensors once, and nothing of size T x K is written but grad_x.
// A token's outputs depend on its own data, phi and the fixed order of parts and
// steps (batch invariance); a column's sums on T only; blocks are whole strips of
// 16 columns, so neither depends on the number of workers. A zero bf16 part
// times Inf would give NaN where the reference has Inf: a token whose G is not
// finite (which a non-finite x implies) gets its gu one product at a time, its
// chunk the sums likewise, and every token does when phi is not finite.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/amx/amx.hpp"
#include "kernels/amx/bf16_parts.hpp"
#include "kernels/amx/tiles.hpp"
#include "kernels/simd/simd.hpp"

namespace mhc::kernels::amx {
namespace {

constexpr int64_t kStrip = 16;                               // columns per B and C tile
constexpr int64_t kChunk = plan::kTokensPerChunk;            // 64 tokens: the sums' chunk
constexpr int64_t kTokenTiles = kChunk / 16;                 // A tiles of G per chunk
constexpr int64_t kHalves = kChunk / 32;                     // B tiles of x (token pairs) per strip
constexpr int64_t kMaxStrips = 128;                          // strips of one stream per block
constexpr int kMaxFTiles = 5;                                // F <= 80: C tiles + 2 B + 1 A <= 8
constexpr int kTerms = 6;
constexpr int kTermG[kTerms] = {2, 1, 0, 1, 0, 0};    // parts of G, smallest products first
constexpr int kTermPhi[kTerms] = {0, 1, 2, 0, 1, 0};  // parts of phi
constexpr int64_t kTile = 16 * 32;                    // halfwords of one 1 KiB tile
constexpr int64_t kGuRow = kMaxStrips * kStrip;       // floats of a token's row of gu in a block
constexpr int64_t kXRow = kMaxStrips * 32;            // halfwords of a row of pairs of x in a block
// Tile numbers: the sums use C 0..fb-1, B 5 and 6, A 7; gu uses C 0..3, A 4-5, B 6-7.
constexpr int kSumsB0 = 5, kSumsB1 = 6, kSumsA = 7;

struct Geometry {
  int64_t kf;      // tiles of 32 rows of phi (gu's reduction)
  int fb;          // tiles of 16 rows of phi (the sums' C tiles)
  int64_t strips;  // strips of 16 columns per stream
  int64_t chunks;  // chunks of 64 tokens
};

Geometry geometry(const core::Dims& d) {
  return {(d.F + 31) / 32, int((d.F + 15) / 16), (d.D + kStrip - 1) / kStrip, (d.T + kChunk - 1) / kChunk};
}

bool uses_tiles(const core::BackwardProblem& p) {
  return p.x.dtype == DType::bf16 && p.dims.F <= 16 * kMaxFTiles && p.dims.T > 0 && p.dims.K > 0;
}

// ------------------------------------------------------------------ layouts

// Per call: phi in parts as gu's B tiles, [part][kf][n][strip] tiles of 16 rows
// (pairs of rows of phi) x 16 columns; the preparation's flags ([0] the number of
// parts, [1 + part] 1 when its share of phi is finite); G in parts as A tiles,
// [part][kf][token tile][16 tokens][32 f] and [part][fb][token half][16 f][32
// tokens], zero past T; and a flag per token whose G is not finite.
struct Shared {
  uint16_t* b_phi;
  float* flags;
  uint16_t* a_g;
  uint16_t* a_gt;
  float* nonfinite;
};

struct SharedSizes {  // in floats
  int64_t b_phi, flags, a_g, a_gt, nonfinite;
  int64_t total() const { return b_phi + flags + a_g + a_gt + nonfinite; }
};

SharedSizes shared_sizes(const core::Dims& d) {
  const Geometry g = geometry(d);
  return {plan::align16(kParts * g.kf * d.N * g.strips * kTile / 2), plan::align16(1 + kMaxPrepareParts),
          plan::align16(kParts * g.kf * g.chunks * kTokenTiles * kTile / 2),
          plan::align16(kParts * g.fb * g.chunks * kHalves * kTile / 2), plan::align16(g.chunks * kChunk)};
}

Shared shared_of(const BackwardArgs& args) {
  const SharedSizes z = shared_sizes(args.problem->dims);
  float* at = args.shared();
  Shared s;
  s.b_phi = reinterpret_cast<uint16_t*>(at);
  s.flags = at += z.b_phi;
  s.a_g = reinterpret_cast<uint16_t*>(at += z.flags);
  s.a_gt = reinterpret_cast<uint16_t*>(at += z.a_g);
  s.nonfinite = at += z.a_gt;
  return s;
}

uint16_t* b_phi_tile(const Shared& s, const core::Dims& d, const Geometry& g, int part, int64_t kr, int64_t n,
                     int64_t strip) {
  return s.b_phi + (((part * g.kf + kr) * d.N + n) * g.strips + strip) * kTile;
}
uint16_t* a_g_tile(const Shared& s, const Geometry& g, int part, int64_t kr, int64_t token_tile) {
  return s.a_g + ((part * g.kf + kr) * g.chunks * kTokenTiles + token_tile) * kTile;
}
uint16_t* a_gt_tile(const Shared& s, const Geometry& g, int part, int64_t ft, int64_t half) {
  return s.a_gt + ((part * g.fb + ft) * g.chunks * kHalves + half) * kTile;
}

// Per worker, after the SIMD family's scratch (pass 1 uses that).
struct WorkerScratch {
  uint16_t* b_x;     // [kHalves][16 pairs][kMaxStrips][32]: the chunk's x of one stream as token pairs;
                     // the B tile of (half, strip) has its rows kXRow halfwords apart
  float* gu;         // [32][kGuRow]: gu of half a chunk
  float* c_rows;     // [2][kMaxFTiles][16][16]: C tiles of sums of two strips
  float* gamma;      // [kMaxStrips][16]: gamma of the block's strips of one stream
  float* gamma_sum;  // [kMaxStrips][16]: the chunk's sums of x*gu
  float* gu_row;     // [16]
};

constexpr int64_t kWorkerFloats =
    kHalves * kMaxStrips * kTile / 2 + 32 * kGuRow + 2 * kMaxFTiles * 256 + 2 * kMaxStrips * kStrip + kStrip;

WorkerScratch scratch_of(const BackwardArgs& args, int worker) {
  float* at = args.scratch(worker) + plan::align16(simd::backward_scratch_floats(args.problem->dims));
  WorkerScratch w;
  w.b_x = reinterpret_cast<uint16_t*>(at);
  w.gu = at += kHalves * kMaxStrips * kTile / 2;
  w.c_rows = at += 32 * kGuRow;
  w.gamma = at += 2 * kMaxFTiles * 256;
  w.gamma_sum = at += kMaxStrips * kStrip;
  w.gu_row = at + kMaxStrips * kStrip;
  return w;
}

// ------------------------------------------------------------------ rows of 16

__mmask16 first(int64_t width) { return __mmask16((1u << width) - 1); }

// 16 bf16 (width real, zero past them) of a row at element `offset`, unit stride or not.
__attribute__((target("avx512f,avx512bw,avx512vl"))) __m256i load16_bits(const core::Strided& t, int64_t offset,
                                                                          int64_t width) {
  const uint16_t* base = static_cast<const uint16_t*>(t.data);
  if (t.stride[3] == 1)
    return width == kStrip ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + offset))
                           : _mm256_maskz_loadu_epi16(first(width), base + offset);
  alignas(32) uint16_t row[kStrip] = {};
  for (int64_t c = 0; c < width; ++c) row[c] = base[offset + c * t.stride[3]];
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(row));
}

__attribute__((target("avx512f,avx512bw"))) __m512 bf16_to_fp32(__m256i bits) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// v rounded to bf16, nearest-even (NaN kept quiet), into width elements of a row.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void store16_bf16(const core::Strided& t, int64_t offset,
                                                                       int64_t width, __m512 v, bool stream) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i high = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  high = _mm512_mask_or_epi32(high, nan, _mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __m256i halves = _mm512_cvtepi32_epi16(high);
  uint16_t* base = static_cast<uint16_t*>(t.data);
  if (t.stride[3] != 1) {
    alignas(32) uint16_t row[kStrip];
    _mm256_store_si256(reinterpret_cast<__m256i*>(row), halves);
    for (int64_t c = 0; c < width; ++c) base[offset + c * t.stride[3]] = row[c];
  } else if (stream && width == kStrip && reinterpret_cast<uintptr_t>(base + offset) % 32 == 0) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(base + offset), halves);
  } else if (width == kStrip) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(base + offset), halves);
  } else {
    _mm256_mask_storeu_epi16(base + offset, first(width), halves);
  }
}

// ------------------------------------------------------------------ preparation

// 16 columns [j0, j0 + 16) of row f of phi (stream n) as fp32, zero past D or F.
__attribute__((target("avx512f"))) __m512 load_phi16(const core::BackwardProblem& p, int64_t f, int64_t n,
                                                     int64_t j0) {
  const core::Dims& d = p.dims;
  if (f >= d.F) return _mm512_setzero_ps();
  const int64_t width = std::min(kStrip, d.D - j0);
  const float* phi = static_cast<const float*>(p.phi.data);
  if (p.phi.stride[3] == 1) return _mm512_maskz_loadu_ps(first(width), phi + p.phi.at(f, n * d.D + j0));
  alignas(64) float row[kStrip] = {};
  for (int64_t c = 0; c < width; ++c) row[c] = p.phi.load(p.phi.at(f, n * d.D + j0 + c));
  return _mm512_load_ps(row);
}

// gu's B tiles for (stream, strip) pairs [i0, i1); false if phi there is not finite.
__attribute__((target("avx512f,avx512bw"))) bool pack_phi(const core::BackwardProblem& p, const Shared& s,
                                                          int64_t i0, int64_t i1) {
  const core::Dims& d = p.dims;
  const Geometry g = geometry(d);
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  __mmask16 nonfinite = 0;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t n = i / g.strips, strip = i % g.strips;
    for (int64_t kr = 0; kr < g.kf; ++kr)
      for (int r = 0; r < 16; ++r) {
        const __m512 even = load_phi16(p, 32 * kr + 2 * r, n, strip * kStrip);
        const __m512 odd = load_phi16(p, 32 * kr + 2 * r + 1, n, strip * kStrip);
        for (__m512 v : {even, odd})
          nonfinite |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), exponent), exponent);
        __m512 even_parts[kParts], odd_parts[kParts];
        split3(even, even_parts);
        split3(odd, odd_parts);
        for (int part = 0; part < kParts; ++part)
          _mm512_storeu_si512(b_phi_tile(s, d, g, part, kr, n, strip) + r * 32,
                              pair_halves(even_parts[part], odd_parts[part]));
      }
  }
  return nonfinite == 0;
}

bool phi_finite(const Shared& s) {
  const int parts = int(s.flags[0]);
  for (int i = 0; i < parts; ++i)
    if (s.flags[1 + i] != 1.0f) return false;
  return true;
}

// ------------------------------------------------------------------ the sums

// The chunk's x of stream n, strips [s0, s0 + strips), as B tiles: row r of half h
// holds tokens 32h + 2r and 32h + 2r + 1 of each column as a pair; zero past T.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void pack_x(const core::BackwardProblem& p, int64_t c0,
                                                                  int64_t tokens, int64_t n, int64_t s0,
                                                                  int64_t strips, uint16_t* b_x) {
  const core::Dims& d = p.dims;
  for (int64_t pair = 0; pair < kChunk / 2; ++pair) {
    const int64_t t = 2 * pair;
    uint16_t* row = b_x + pair * kXRow;  // written in one run
    // Row offsets once per token: Strided::at divides by S.
    const int64_t even_row = t < tokens ? p.x.at(c0 + t, n, 0) : 0;
    const int64_t odd_row = t + 1 < tokens ? p.x.at(c0 + t + 1, n, 0) : 0;
    for (int64_t si = 0; si < strips; ++si) {
      const int64_t j = (s0 + si) * kStrip, width = std::min(kStrip, d.D - j);
      const __m256i even = t < tokens ? load16_bits(p.x, even_row + j * p.x.stride[3], width) : _mm256_setzero_si256();
      const __m256i odd =
          t + 1 < tokens ? load16_bits(p.x, odd_row + j * p.x.stride[3], width) : _mm256_setzero_si256();
      _mm512_storeu_si512(row + si * 32, _mm512_or_si512(_mm512_cvtepu16_epi32(even),
                                                             _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd), 16)));
    }
  }
}

// C[ft] = sum over parts and token halves of (G^T part) . x, for one strip.
template <int FB>
void strip_sums(const Shared& s, const Geometry& g, int64_t chunk, const uint16_t* b_x, float* c_rows) {
  unroll(std::make_integer_sequence<int, FB>{}, [&](auto ft) { tile_zero<decltype(ft)::value>(); });
  tile_load<kSumsB0>(b_x, kXRow * 2);
  tile_load<kSumsB1>(b_x + 16 * kXRow, kXRow * 2);
  for (int part = 0; part < kParts; ++part)
    unroll(std::make_integer_sequence<int, FB>{}, [&](auto ft) {
      constexpr int c = decltype(ft)::value;
      tile_load<kSumsA>(a_gt_tile(s, g, part, c, chunk * kHalves), 64);
      tile_dpbf16ps<c, kSumsA, kSumsB0>();
      tile_load<kSumsA>(a_gt_tile(s, g, part, c, chunk * kHalves + 1), 64);
      tile_dpbf16ps<c, kSumsA, kSumsB1>();
    });
  unroll(std::make_integer_sequence<int, FB>{}, [&](auto ft) {
    tile_store<decltype(ft)::value>(c_rows + decltype(ft)::value * 256, 64);
  });
}

// The same for two strips at once when F <= 32 (two f tiles at most): C tiles
// [ft][strip] 0-3, A 4-5, B 6-7, every tile loaded feeding two products.
// c_rows: the first strip's tiles, then the second's.
template <int FB>
void strip_pair_sums(const Shared& s, const Geometry& g, int64_t chunk, const uint16_t* b_x, float* c_rows) {
  static_assert(FB <= 2, "four C tiles");
  constexpr int kA0 = 4, kB0 = 6, kB1 = 7;
  unroll(std::make_integer_sequence<int, 2 * FB>{}, [&](auto c) { tile_zero<decltype(c)::value>(); });
  for (int64_t half = 0; half < kHalves; ++half) {
    tile_load<kB0>(b_x + half * 16 * kXRow, kXRow * 2);
    tile_load<kB1>(b_x + half * 16 * kXRow + 32, kXRow * 2);
    for (int part = 0; part < kParts; ++part) {
      unroll(std::make_integer_sequence<int, FB>{}, [&](auto ft) {
        tile_load<kA0 + decltype(ft)::value>(a_gt_tile(s, g, part, decltype(ft)::value, chunk * kHalves + half), 64);
      });
      unroll(std::make_integer_sequence<int, FB>{}, [&](auto ft) {
        constexpr int f = decltype(ft)::value;
        tile_dpbf16ps<2 * f, kA0 + f, kB0>();
        tile_dpbf16ps<2 * f + 1, kA0 + f, kB1>();
      });
    }
  }
  unroll(std::make_integer_sequence<int, FB>{}, [&](auto ft) {
    constexpr int f = decltype(ft)::value;
    tile_store<2 * f>(c_rows + f * 256, 64);
    tile_store<2 * f + 1>(c_rows + (kMaxFTiles + f) * 256, 64);
  });
}

void strip_sums(int fb, const Shared& s, const Geometry& g, int64_t chunk, const uint16_t* b_x, float* c_rows) {
  switch (fb) {
    case 1: return strip_sums<1>(s, g, chunk, b_x, c_rows);
    case 2: return strip_sums<2>(s, g, chunk, b_x, c_rows);
    case 3: return strip_sums<3>(s, g, chunk, b_x, c_rows);
    case 4: return strip_sums<4>(s, g, chunk, b_x, c_rows);
    default: return strip_sums<5>(s, g, chunk, b_x, c_rows);
  }
}

// ------------------------------------------------------------------ gu

// gu of the chunk's 64 tokens for strips s0 and s1 of stream n (s1 == s0 at an
// odd end) into gu rows (columns gu_col0 and gu_col0 + 16): C tiles of 2 token
// tiles x 2 strips, so every tile loaded feeds two products.
void strips_gu(const Shared& s, const core::Dims& d, const Geometry& g, int64_t chunk, int64_t tt, int64_t n,
               int64_t s0, int64_t s1, float* gu, int64_t gu_col0) {
  constexpr int kA0 = 4, kA1 = 5, kB0 = 6, kB1 = 7;
  {
    tile_zero<0>(), tile_zero<1>(), tile_zero<2>(), tile_zero<3>();
    for (int term = 0; term < kTerms; ++term)
      for (int64_t kr = 0; kr < g.kf; ++kr) {
        const uint16_t* a_g = a_g_tile(s, g, kTermG[term], kr, chunk * kTokenTiles + tt);
        tile_load<kA0>(a_g, 64);
        tile_load<kA1>(a_g + kTile, 64);
        tile_load<kB0>(b_phi_tile(s, d, g, kTermPhi[term], kr, n, s0), 64);
        tile_load<kB1>(b_phi_tile(s, d, g, kTermPhi[term], kr, n, s1), 64);
        tile_dpbf16ps<0, kA0, kB0>();
        tile_dpbf16ps<1, kA0, kB1>();
        tile_dpbf16ps<2, kA1, kB0>();
        tile_dpbf16ps<3, kA1, kB1>();
      }
    float* rows = gu + gu_col0;
    tile_store<0>(rows, kGuRow * 4);
    tile_store<1>(rows + kStrip, kGuRow * 4);
    tile_store<2>(rows + 16 * kGuRow, kGuRow * 4);
    tile_store<3>(rows + 16 * kGuRow + kStrip, kGuRow * 4);
  }
}

// gu of one token for columns [j0, j0 + width) of stream n, one product at a time.
void token_gu_scalar(const core::BackwardProblem& p, const float* G_row, int64_t n, int64_t j0, int64_t width,
                     float* gu) {
  const core::Dims& d = p.dims;
  for (int64_t c = 0; c < kStrip; ++c) {
    float sum = 0.0f;
    if (c < width)
      for (int64_t f = 0; f < d.F; ++f) sum += G_row[f] * p.phi.load(p.phi.at(f, n * d.D + j0 + c));
    gu[c] = sum;
  }
}

// ------------------------------------------------------------------ rows

// For the chunk's tokens, stream n, the block's strips: y = gamma*gu + c*x, the
// sums of x*gu, grad_x = h_pre*grad_h_in + y + grad_x_post (the SIMD family's order).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void rows(const BackwardArgs& args, const WorkerScratch& w,
                                                               bool exact_gu, int64_t c0, int64_t tokens, int64_t n,
                                                               int64_t s0, int64_t strips) {
  const core::BackwardProblem& p = *args.problem;
  const core::Dims& d = p.dims;
  const float* c = args.workspace + args.plan->off_c;
  const float* G = args.workspace + args.plan->off_G;
  const float* nonfinite = shared_of(args).nonfinite;
  const bool has_post = p.grad_x_post.present();
  const bool stream = d.T * d.K * 2 > simd::kStreamBytes;
  for (int64_t si = 0; si < strips; ++si) _mm512_store_ps(w.gamma_sum + si * kStrip, _mm512_setzero_ps());
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t t = c0 + i;
    float* gu_row = w.gu + i * kGuRow;
    if (!exact_gu || nonfinite[t] != 0.0f)
      for (int64_t si = 0; si < strips; ++si) {
        const int64_t j = (s0 + si) * kStrip;
        token_gu_scalar(p, G + t * d.F, n, j, std::min(kStrip, d.D - j), gu_row + si * kStrip);
      }
    const __m512 h_pre = _mm512_set1_ps(p.h_pre.load(p.h_pre.at(t, 0, n)));
    const __m512 c_t = _mm512_set1_ps(c[t]);
    // Row offsets once per token: Strided::at divides by S.
    const int64_t x_row = p.x.at(t, n, 0), gh_row = p.grad_h_in.at(t, 0, 0), gx_row = p.grad_x.at(t, n, 0);
    const int64_t post_row = has_post ? p.grad_x_post.at(t, n, 0) : 0;
    for (int64_t si = 0; si < strips; ++si) {
      const int64_t j = (s0 + si) * kStrip, width = std::min(kStrip, d.D - j);
      const __m512 gu = _mm512_load_ps(gu_row + si * kStrip);
      const __m512 x = bf16_to_fp32(load16_bits(p.x, x_row + j * p.x.stride[3], width));
      const __m512 y = _mm512_fmadd_ps(c_t, x, _mm512_mul_ps(_mm512_load_ps(w.gamma + si * kStrip), gu));
      float* gamma_sum = w.gamma_sum + si * kStrip;
      _mm512_store_ps(gamma_sum, _mm512_fmadd_ps(x, gu, _mm512_load_ps(gamma_sum)));
      __m512 gx = _mm512_fmadd_ps(
          h_pre, bf16_to_fp32(load16_bits(p.grad_h_in, gh_row + j * p.grad_h_in.stride[3], width)), y);
      if (has_post)
        gx = _mm512_add_ps(
            gx, bf16_to_fp32(load16_bits(p.grad_x_post, post_row + j * p.grad_x_post.stride[3], width)));
      store16_bf16(p.grad_x, gx_row + j * p.grad_x.stride[3], width, gx, stream);
    }
  }
  float* gamma_total = args.workspace + args.plan->off_gamma_total + n * d.D;
  for (int64_t si = 0; si < strips; ++si) {
    const int64_t j = (s0 + si) * kStrip;
    const __mmask16 real = first(std::min(kStrip, d.D - j));
    _mm512_mask_storeu_ps(gamma_total + j, real, _mm512_add_ps(_mm512_maskz_loadu_ps(real, gamma_total + j),
                                                               _mm512_load_ps(w.gamma_sum + si * kStrip)));
  }
  if (stream) _mm_sfence();
}

// gamma of the block's strips of stream n (ones without gamma), zero past D.
void load_gamma(const core::BackwardProblem& p, int64_t n, int64_t s0, int64_t strips, float* gamma) {
  const core::Dims& d = p.dims;
  for (int64_t si = 0; si < strips; ++si)
    for (int64_t c = 0; c < kStrip; ++c) {
      const int64_t j = (s0 + si) * kStrip + c;
      gamma[si * kStrip + c] = j >= d.D ? 0.0f : p.gamma.present() ? p.gamma.load(p.gamma.at(n, j)) : 1.0f;
    }
}

// totals[f * stride + c] += the C tiles' rows (16 f a tile), c < width.
__attribute__((target("avx512f"))) void add_rows(const float* c_rows, int64_t F, int64_t width, float* totals,
                                                 int64_t stride) {
  const __mmask16 real = first(width);
  for (int64_t f = 0; f < F; ++f, totals += stride)
    _mm512_mask_storeu_ps(totals, real, _mm512_add_ps(_mm512_maskz_loadu_ps(real, totals),
                                                      _mm512_load_ps(c_rows + (f / 16) * 256 + (f % 16) * 16)));
}

// The chunk's sums one product at a time (a token's G is not finite).
void sums_scalar(const BackwardArgs& args, int64_t c0, int64_t tokens, int64_t n, int64_t j0, int64_t j1) {
  const core::BackwardProblem& p = *args.problem;
  const core::Dims& d = p.dims;
  const float* G = args.workspace + args.plan->off_G;
  float* phi_total = args.workspace + args.plan->off_phi_total;
  for (int64_t f = 0; f < d.F; ++f)
    for (int64_t j = j0; j < j1; ++j) {
      float sum = 0.0f;
      for (int64_t t = c0; t < c0 + tokens; ++t) sum += G[t * d.F + f] * p.x.load(p.x.at(t, n, j));
      phi_total[f * d.K + n * d.D + j] += sum;
    }
}

// Block `block` of `blocks` (a multiple of N): stream n, strips [s0, s1).
void block_strips(const core::Dims& d, const Geometry& g, int64_t block, int64_t blocks, int64_t* n, int64_t* s0,
                  int64_t* s1) {
  const int64_t per_stream = blocks / d.N, i = block % per_stream;
  *n = block / per_stream;
  *s0 = g.strips * i / per_stream;
  *s1 = g.strips * (i + 1) / per_stream;
}

}  // namespace

// ------------------------------------------------------------------ the family's entries

int64_t backward_shared_floats(const core::BackwardProblem& p) {
  return uses_tiles(p) ? shared_sizes(p.dims).total() : 0;
}

int64_t backward_chunk_floats(const core::BackwardProblem& p) {
  return uses_tiles(p) ? 0 : simd::backward_chunk_floats(p.dims);
}

int64_t backward_scratch_floats(const core::Dims& d) {
  return plan::align16(simd::backward_scratch_floats(d)) + kWorkerFloats;
}

int64_t backward_blocks(const core::BackwardProblem& p, int threads) {
  if (!uses_tiles(p)) return 0;
  // Blocks of one stream's columns (a block's phi in parts stays in L2), at most
  // kMaxStrips strips each, and enough of them for every worker.
  const int64_t strips = geometry(p.dims).strips, N = p.dims.N;
  const int64_t per_stream = std::max((strips + kMaxStrips - 1) / kMaxStrips,
                                      std::min<int64_t>(strips, (int64_t(threads) + N - 1) / N));
  return N * per_stream;
}

void backward_prepare(const BackwardArgs& args, int64_t part, int64_t parts) {
  const core::BackwardProblem& p = *args.problem;
  if (!uses_tiles(p)) return;
  const Shared s = shared_of(args);
  const int64_t items = p.dims.N * geometry(p.dims).strips;
  const bool finite = pack_phi(p, s, items * part / parts, items * (part + 1) / parts);
  s.flags[1 + part] = finite ? 1.0f : 0.0f;
  if (part == 0) s.flags[0] = float(parts);
}

void backward_token_stats(const BackwardArgs& args, int64_t chunk0, int64_t t0, int64_t t1, int worker) {
  simd::backward_token_stats(args, chunk0, t0, t1, worker);
  const core::BackwardProblem& p = *args.problem;
  if (!uses_tiles(p)) return;
  const core::Dims& d = p.dims;
  const Geometry g = geometry(d);
  const Shared s = shared_of(args);
  const float* G = args.workspace + args.plan->off_G;
  // The worker with the last tokens also zeroes the rows up to the last chunk's end.
  const int64_t last = t1 == d.T ? g.chunks * kChunk : t1;
  for (int64_t t = t0; t < last; ++t) {
    bool finite = true;
    for (int64_t f = 0; f < std::max(32 * g.kf, 16 * int64_t(g.fb)); ++f) {
      uint16_t parts[kParts] = {0, 0, 0};
      if (t < t1 && f < d.F) {
        const float value = G[t * d.F + f];
        finite = finite && std::isfinite(value);
        split3_bits(value, parts);
      }
      for (int part = 0; part < kParts; ++part) {
        if (f < 32 * g.kf)
          a_g_tile(s, g, part, f / 32, t / 16)[(t % 16) * 32 + f % 32] = parts[part];
        if (f < 16 * g.fb)
          a_gt_tile(s, g, part, f / 16, t / 32)[(f % 16) * 32 + t % 32] = parts[part];
      }
    }
    s.nonfinite[t] = finite ? 0.0f : 1.0f;
  }
}

void backward_block(const BackwardArgs& args, int64_t block, int64_t blocks, int worker) {
  const core::BackwardProblem& p = *args.problem;
  const core::Dims& d = p.dims;
  const Geometry g = geometry(d);
  const Shared s = shared_of(args);
  const WorkerScratch w = scratch_of(args, worker);
  const bool exact_gu = phi_finite(s);
  float* phi_total = args.workspace + args.plan->off_phi_total;
  int64_t n, s0, s1;
  block_strips(d, g, block, blocks, &n, &s0, &s1);
  const int64_t strips = s1 - s0;
  if (strips <= 0) return;

  TileConfig config;
  for (int i = 0; i < 8; ++i) config.rows[i] = 16, config.bytes_per_row[i] = 64;
  load_config(config);
  for (int64_t chunk = 0; chunk < g.chunks; ++chunk) {
    const int64_t c0 = chunk * kChunk, tokens = std::min(kChunk, d.T - c0);
    const bool chunk_finite = std::none_of(s.nonfinite + c0, s.nonfinite + c0 + tokens, [](float f) { return f != 0.0f; });
    {
      if (chunk_finite) {
        pack_x(p, c0, tokens, n, s0, strips, w.b_x);
        for (int64_t si = 0; si < strips;) {
          const int64_t j = (s0 + si) * kStrip;
          if (g.fb <= 2 && si + 1 < strips) {  // two strips
            if (g.fb == 1) strip_pair_sums<1>(s, g, chunk, w.b_x + si * 32, w.c_rows);
            else strip_pair_sums<2>(s, g, chunk, w.b_x + si * 32, w.c_rows);
            add_rows(w.c_rows, d.F, kStrip, phi_total + n * d.D + j, d.K);
            add_rows(w.c_rows + kMaxFTiles * 256, d.F, std::min(kStrip, d.D - j - kStrip),
                     phi_total + n * d.D + j + kStrip, d.K);
            si += 2;
          } else {
            strip_sums(g.fb, s, g, chunk, w.b_x + si * 32, w.c_rows);
            add_rows(w.c_rows, d.F, std::min(kStrip, d.D - j), phi_total + n * d.D + j, d.K);
            si += 1;
          }
        }
      } else {
        sums_scalar(args, c0, tokens, n, s0 * kStrip, std::min(d.D, s1 * kStrip));
      }
      load_gamma(p, n, s0, strips, w.gamma);
      // Half a chunk at a time: its gu (32 tokens), then its rows, while x is in L2.
      for (int64_t tt = 0; tt < kTokenTiles && 16 * tt < tokens; tt += 2) {
        if (exact_gu)
          for (int64_t si = 0; si < strips; si += 2)
            strips_gu(s, d, g, chunk, tt, n, s0 + si, si + 1 < strips ? s0 + si + 1 : s0 + si, w.gu, si * kStrip);
        rows(args, w, exact_gu, c0 + 16 * tt, std::min<int64_t>(32, tokens - 16 * tt), n, s0, strips);
      }
    }
  }
  release_tiles();
}

}  // namespace mhc::kernels::amx
