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

// Tile<TT, TR> with the tokens' cast fused in (the first row tile of a slice, or of
// a panel): per token, v = x (dtype T) per vector, u = v * gamma (gamma nullptr: v,
// HF32-rounded with hf32) stored for the slice's other tiles and used here, and
// with sq the squares v * v, one fused multiply-add per vector onto zero (lanes
// stored at sq + t * L).
// x[t] is token t's row at the first column, ahead[t] (ahead nullptr: none) a row
// asked of the cache meanwhile, as ScaleRow does; u's rows kURowFloats apart. The bits
// are those of ScaleRow over the same vectors, then Tile<TT, TR>; the cast's loads
// and multiplies hide behind the stream of phi and the tile's multiply-adds
// (mhc-bench decode, T=1 and T=64).
template <DType T, int TT, int TR>
HWY_INLINE void CastTileOf(const void* const* x, const float* gamma, bool hf32, float* u, const float* phi,
                           int64_t w_stride, int64_t vectors, float* acc_rows, int64_t acc_stride, bool from_zero,
                           float* sq, const void* const* ahead) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  VecArray<TR> acc[TT];
  VecArray<TT> squares;
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t) {
    squares[t] = hn::Zero(df);
#pragma GCC unroll 8
    for (int f = 0; f < TR; ++f)
      acc[t][f] = from_zero ? hn::Zero(df) : hn::Load(df, acc_rows + t * acc_stride + f * L);
  }
  for (int64_t i = 0; i < vectors; ++i) {
    VecArray<TT> uv;
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t) {
      if (ahead != nullptr) PrefetchLine<0>(static_cast<const char*>(ahead[t]) + i * L * core::element_size(T));
      const VF v = LoadT<T>(df, x[t], i * L);
      if (sq != nullptr) squares[t] = hn::MulAdd(v, v, squares[t]);
      VF scaled = gamma != nullptr ? hn::Mul(v, hn::LoadU(df, gamma + i * L)) : v;
      if (hf32) scaled = RoundHf32(df, scaled);
      hn::Store(scaled, df, u + t * kURowFloats + i * L);
      uv[t] = scaled;
    }
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
  for (int t = 0; t < TT; ++t) {
#pragma GCC unroll 8
    for (int f = 0; f < TR; ++f) hn::Store(acc[t][f], df, acc_rows + t * acc_stride + f * L);
    if (sq != nullptr) hn::Store(squares[t], df, sq + t * L);
  }
}

// Tokens of a fused cast tile: its squares, u vectors, accumulators, phi vector and
// gamma in registers (AVX2's 16 take one token: two spill, mhc-kernel-bench
// PreForward/avx2/T:64).
constexpr int kCastTileTokens = HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 ? 1 : 2;

template <DType T, int TT>
HWY_INLINE void CastTileRows(int rows, const void* const* x, const float* gamma, bool hf32, float* u,
                             const float* phi, int64_t w_stride, int64_t vectors, float* acc, int64_t acc_stride,
                             bool from_zero, float* sq, const void* const* ahead) {
  auto tile = [&]<int TR>() HWY_ATTR {
    CastTileOf<T, TT, TR>(x, gamma, hf32, u, phi, w_stride, vectors, acc, acc_stride, from_zero, sq, ahead);
  };
  switch (rows) {
    case 1: return tile.template operator()<1>();
    case 2: return tile.template operator()<2>();
    case 3: return tile.template operator()<3>();
    case 4: return tile.template operator()<4>();
    case 5: return tile.template operator()<5>();
    default: return tile.template operator()<kTileRows>();
  }
}

// CastTileOf for 1 to kCastTileTokens tokens and 1 to kTileRows rows.
template <DType T>
HWY_INLINE void CastTile(int tokens, int rows, const void* const* x, const float* gamma, bool hf32, float* u,
                         const float* phi, int64_t w_stride, int64_t vectors, float* acc, int64_t acc_stride,
                         bool from_zero, float* sq, const void* const* ahead) {
  static_assert(kCastTileTokens == 1 || kCastTileTokens == 2, "cast tile dispatch covers 1..2 tokens");
  if (kCastTileTokens == 1 || tokens == 1)
    return CastTileRows<T, 1>(rows, x, gamma, hf32, u, phi, w_stride, vectors, acc, acc_stride, from_zero, sq, ahead);
  if constexpr (kCastTileTokens == 2)
    CastTileRows<T, 2>(rows, x, gamma, hf32, u, phi, w_stride, vectors, acc, acc_stride, from_zero, sq, ahead);
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
