// The backward's column microkernel for one Highway target: one strip (a vector
// of columns) and a block of R rows of phi, over a chunk's tokens. The block's
// phi vectors and its chunk sums of G v^T stay in registers while the tokens
// stream through; gu = phi^T G accumulates in the gu tile.
//
// Accumulation order (the determinism contract): for each row r, sums[r] takes
// G[t][r] * v[t] (u[t] when a u tile is given: the HF32 operand of the product)
// as one fused multiply-add per token, t ascending from zero, and
// is added once to totals[r]; gu of token t is its value on entry (zero for the
// first block) plus two fused chains over the block's rows, even rows and odd
// rows, added; the last block of rows (kLast) adds v*gu to the strip's sum of
// v*gu per token as fused multiply-adds, and leaves y = c v + gamma gu in gu's place.

// Per-target include guard (Highway's idiom).
#if defined(MHC_KERNELS_SIMD_STRIP_BLOCK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHC_KERNELS_SIMD_STRIP_BLOCK_INL_H_
#undef MHC_KERNELS_SIMD_STRIP_BLOCK_INL_H_
#else
#define MHC_KERNELS_SIMD_STRIP_BLOCK_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kernels/pre_backward.hpp"
#include "kernels/simd/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {

// Rows of phi per register block: 2*rows + 4 vector registers (32 on AVX-512, 16
// on AVX2), 3 more in the last block of rows (the sums of v*gu, gamma, c).
constexpr int kBlockRows = HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 ? 6 : 12;
// Floats from one token's row of the gu tile to the next: a column item and a
// cache line, so that the rows of tokens a few apart do not alias in L1.
constexpr int64_t kTokenFloats = kColumnsPerItem + 16;

// What the last block of rows does with a strip's final gu, token by token: the
// chunk's sum of v*gu (for grad_gamma), and y = gamma*gu + c*v stored in gu's
// place, so that the row phase reads one tile instead of two.
struct StripFinish {
  const float* c;      // [tokens] the chunk's c
  const float* gamma;  // the strip's gamma, a vector (ones without gamma)
  float* gamma_total;  // the strip's running sums of v*gu
};

// One strip, rows [f0, f0+R), the chunk's `tokens` tokens: chunk sums of G v^T
// (G u^T with a u tile: fp32, rows kTokenFloats apart) added to the totals (only
// the strip's `width` real columns), gu accumulated; with kLast, the strip
// finished as StripFinish says.
template <int R, bool kLast, DType T, bool kUTile>
HWY_INLINE void StripBlock(const float* G_chunk, int64_t F, int64_t tokens, int64_t f0,
                           const float* const* phi_rows, const void* v_tile, int64_t v_row, float* gu_tile, bool first_block,
                           int64_t width, float* totals, int64_t total_stride, const StripFinish& finish,
                           const float* u_tile) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  VecArray<R> w, sums;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    w[r] = hn::LoadU(df, phi_rows[r]);
    sums[r] = hn::Zero(df);
  }
  VF gamma_sum = hn::Zero(df);
  const float* c = finish.c;  // locals: the stores below could alias finish
  const VF gamma = kLast ? hn::LoadU(df, finish.gamma) : hn::Zero(df);
  for (int64_t t = 0; t < tokens; ++t) {
    const VF v = LoadT<T>(df, v_tile, t * v_row);
    VF u = v;
    if constexpr (kUTile) u = hn::Load(df, u_tile + t * kTokenFloats);
    const float* G = G_chunk + t * F + f0;
    VF gu_even = first_block ? hn::Zero(df) : hn::Load(df, gu_tile + t * kTokenFloats), gu_odd = hn::Zero(df);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const VF g = hn::Set(df, G[r]);
      sums[r] = hn::MulAdd(g, u, sums[r]);
      if (r % 2 == 0) gu_even = hn::MulAdd(g, w[r], gu_even);
      else gu_odd = hn::MulAdd(g, w[r], gu_odd);
    }
    const VF gu = hn::Add(gu_even, gu_odd);
    if constexpr (kLast) {
      gamma_sum = hn::MulAdd(v, gu, gamma_sum);
      hn::Store(hn::MulAdd(hn::Set(df, c[t]), v, hn::Mul(gamma, gu)), df, gu_tile + t * kTokenFloats);
    } else {
      hn::Store(gu, df, gu_tile + t * kTokenFloats);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* total = totals + (f0 + r) * total_stride;
    if (width == L) {
      hn::StoreU(hn::Add(hn::LoadU(df, total), sums[r]), df, total);
    } else {
      HWY_ALIGN float lanes[hn::MaxLanes(df)];
      hn::Store(sums[r], df, lanes);
      for (int64_t i = 0; i < width; ++i) total[i] += lanes[i];
    }
  }
  if constexpr (kLast) {
    HWY_ALIGN float lanes[hn::MaxLanes(df)];
    hn::Store(gamma_sum, df, lanes);
    for (int64_t i = 0; i < width; ++i) finish.gamma_total[i] += lanes[i];
  }
}

template <bool kLast, DType T>
static void RunStripBlock(int rows, const float* G_chunk, int64_t F, int64_t tokens, int64_t f0,
                          const float* const* phi_rows, const void* v_tile, int64_t v_row, float* gu_tile, bool first,
                          int64_t width, float* totals, int64_t total_stride, const StripFinish& finish,
                          const float* u_tile = nullptr) {
  auto run = [&]<bool kUTile>() {
    // rows is at most kBlockRows; the cases from kBlockRows up are not instantiated
    // (AVX2) and fall through to the full block below.
#define MHC_STRIP_CASE(R)                                                                                     \
  case R:                                                                                                     \
    if constexpr (R < kBlockRows)                                                                             \
      return StripBlock<R, kLast, T, kUTile>(G_chunk, F, tokens, f0, phi_rows, v_tile, v_row, gu_tile, first, \
                                             width, totals, total_stride, finish, u_tile);                    \
    break;
    switch (rows) {
      MHC_STRIP_CASE(1) MHC_STRIP_CASE(2) MHC_STRIP_CASE(3) MHC_STRIP_CASE(4) MHC_STRIP_CASE(5)
      MHC_STRIP_CASE(6) MHC_STRIP_CASE(7) MHC_STRIP_CASE(8) MHC_STRIP_CASE(9) MHC_STRIP_CASE(10)
      MHC_STRIP_CASE(11)
      default:
        break;
    }
#undef MHC_STRIP_CASE
    StripBlock<kBlockRows, kLast, T, kUTile>(G_chunk, F, tokens, f0, phi_rows, v_tile, v_row, gu_tile, first, width,
                                             totals, total_stride, finish, u_tile);
  };
  if (u_tile != nullptr) run.template operator()<true>();
  else run.template operator()<false>();
}

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
