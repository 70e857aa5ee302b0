// The forward's GEMM microkernel for one Highway target: a register-blocked tile
// of TT tokens x TR rows of phi over a run of column vectors.
//
// Accumulation order (the determinism contract): lane l of acc[t][f] adds
// u[t][i L + l] * w[f][i L + l] as one fused multiply-add per vector i, i
// ascending, onto its value on entry (onto zero with from_zero, for the first
// run of a sum: its accumulators need no fill); so chained calls over
// consecutive column runs give the bits of one call over all of them.

// Per-target include guard (Highway's idiom).
#if defined(MHC_KERNELS_SIMD_GEMM_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHC_KERNELS_SIMD_GEMM_TILE_INL_H_
#undef MHC_KERNELS_SIMD_GEMM_TILE_INL_H_
#else
#define MHC_KERNELS_SIMD_GEMM_TILE_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kernels/simd/simd.hpp"
#include "kernels/simd/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {

// Rows of u are padded by one cache line so that the tokens of a tile do not sit
// a multiple of 4 KiB apart (same L1 set).
constexpr int64_t kURowFloats = kChunkColumns + 16;

// Register blocking: accumulators kTileTokens x kTileRows, plus the u vectors and one phi row.
constexpr int kTileTokens = HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 ? 2 : 4;
constexpr int kTileRows = 6;

// acc[t][f] += u[t] . phi[f] (acc[t][f] = with from_zero) over `vectors` column
// vectors, for a tile of TT tokens x TR rows: u's rows kURowFloats apart, phi's
// w_stride, the accumulators' acc_stride.
template <int TT, int TR>
HWY_INLINE void Tile(const float* u, const float* phi, int64_t w_stride, int64_t vectors, float* acc_rows,
                     int64_t acc_stride, bool from_zero) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  VecArray<TR> acc[TT];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int f = 0; f < TR; ++f)
      acc[t][f] = from_zero ? hn::Zero(df) : hn::Load(df, acc_rows + t * acc_stride + f * L);
  for (int64_t i = 0; i < vectors; ++i) {
    VecArray<TT> uv;
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) uv[t] = hn::Load(df, u + t * kURowFloats + i * L);
#pragma GCC unroll 8
    for (int f = 0; f < TR; ++f) {
      VF w = hn::LoadU(df, phi + f * w_stride + i * L);
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2
      asm("" : "+v"(w.raw));  // one load reused by the tile's tokens, not re-read per FMA
#endif
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) acc[t][f] = hn::MulAdd(uv[t], w, acc[t][f]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int f = 0; f < TR; ++f) hn::Store(acc[t][f], df, acc_rows + t * acc_stride + f * L);
}

// Tile<1, TR> with the token's cast fused in (decode: the first row tile of a
// one-token slice): v = x (dtype T) per vector, u = v * gamma (gamma nullptr: v,
// HF32-rounded with hf32) stored for the slice's other tiles and used here, and
// with sq the squares v * v, one fused multiply-add per vector onto zero. The
// bits are those of ScaleRow over the same vectors, then Tile<1, TR>; the cast's
// loads and multiplies hide behind the stream of phi (mhc-bench decode, T=1).
template <DType T, int TR>
HWY_INLINE void CastTileOf(const void* x, const float* gamma, bool hf32, float* u, const float* phi,
                           int64_t w_stride, int64_t vectors, float* acc_rows, bool from_zero, VF* sq) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  VecArray<TR> acc;
  VF squares = hn::Zero(df);
#pragma GCC unroll 8
  for (int f = 0; f < TR; ++f) acc[f] = from_zero ? hn::Zero(df) : hn::Load(df, acc_rows + f * L);
  for (int64_t i = 0; i < vectors; ++i) {
    const VF v = LoadT<T>(df, x, i * L);
    if (sq != nullptr) squares = hn::MulAdd(v, v, squares);
    VF uv = gamma != nullptr ? hn::Mul(v, hn::LoadU(df, gamma + i * L)) : v;
    if (hf32) uv = RoundHf32(df, uv);
    hn::Store(uv, df, u + i * L);
#pragma GCC unroll 8
    for (int f = 0; f < TR; ++f) {
      VF w = hn::LoadU(df, phi + f * w_stride + i * L);
      acc[f] = hn::MulAdd(uv, w, acc[f]);
    }
  }
#pragma GCC unroll 8
  for (int f = 0; f < TR; ++f) hn::Store(acc[f], df, acc_rows + f * L);
  if (sq != nullptr) *sq = squares;
}

template <DType T>
HWY_INLINE void CastTile(int rows, const void* x, const float* gamma, bool hf32, float* u, const float* phi,
                         int64_t w_stride, int64_t vectors, float* acc, bool from_zero, VF* sq) {
  switch (rows) {
    case 1: return CastTileOf<T, 1>(x, gamma, hf32, u, phi, w_stride, vectors, acc, from_zero, sq);
    case 2: return CastTileOf<T, 2>(x, gamma, hf32, u, phi, w_stride, vectors, acc, from_zero, sq);
    case 3: return CastTileOf<T, 3>(x, gamma, hf32, u, phi, w_stride, vectors, acc, from_zero, sq);
    case 4: return CastTileOf<T, 4>(x, gamma, hf32, u, phi, w_stride, vectors, acc, from_zero, sq);
    case 5: return CastTileOf<T, 5>(x, gamma, hf32, u, phi, w_stride, vectors, acc, from_zero, sq);
    default: return CastTileOf<T, kTileRows>(x, gamma, hf32, u, phi, w_stride, vectors, acc, from_zero, sq);
  }
}

template <int TT>
HWY_INLINE void TileRows(int rows, const float* u, const float* phi, int64_t w_stride, int64_t vectors, float* acc,
                         int64_t acc_stride, bool from_zero) {
  switch (rows) {
    case 1: return Tile<TT, 1>(u, phi, w_stride, vectors, acc, acc_stride, from_zero);
    case 2: return Tile<TT, 2>(u, phi, w_stride, vectors, acc, acc_stride, from_zero);
    case 3: return Tile<TT, 3>(u, phi, w_stride, vectors, acc, acc_stride, from_zero);
    case 4: return Tile<TT, 4>(u, phi, w_stride, vectors, acc, acc_stride, from_zero);
    case 5: return Tile<TT, 5>(u, phi, w_stride, vectors, acc, acc_stride, from_zero);
    default: return Tile<TT, kTileRows>(u, phi, w_stride, vectors, acc, acc_stride, from_zero);
  }
}

static void RunTile(int tokens, int rows, const float* u, const float* phi, int64_t w_stride, int64_t vectors,
                    float* acc, int64_t acc_stride, bool from_zero) {
  static_assert(kTileTokens == 2 || kTileTokens == 4, "tile dispatch covers 1..4 tokens");
  switch (tokens) {
    case 1: return TileRows<1>(rows, u, phi, w_stride, vectors, acc, acc_stride, from_zero);
    case 2: return TileRows<2>(rows, u, phi, w_stride, vectors, acc, acc_stride, from_zero);
    case 3: return TileRows<3>(rows, u, phi, w_stride, vectors, acc, acc_stride, from_zero);
    default: return TileRows<4>(rows, u, phi, w_stride, vectors, acc, acc_stride, from_zero);
  }
}

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
