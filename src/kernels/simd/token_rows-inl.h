// The forward's row microkernels for one Highway target, over unit-stride rows:
// a token's row scaled by gamma with its sum of squares (the GEMM's operand u),
// and h_in as the h_pre-weighted sum of a token's N rows.
//
// Accumulation orders (the determinism contract): ScaleRow adds v*v to lane l
// of sq as one fused multiply-add per vector, in ascending order, and rounds
// u = v * gamma once; WeightedRows forms each output as fused multiply-adds
// h_pre[n] * x[n] for n ascending from zero, rounded once to the output dtype
// (round to nearest even).

// Per-target include guard (Highway's idiom).
#if defined(MHC_KERNELS_SIMD_TOKEN_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHC_KERNELS_SIMD_TOKEN_ROWS_INL_H_
#undef MHC_KERNELS_SIMD_TOKEN_ROWS_INL_H_
#else
#define MHC_KERNELS_SIMD_TOKEN_ROWS_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kernels/simd/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {

// The whole vectors of `count` elements of x (dtype T): u = v * gamma (gamma
// nullptr: v), and with with_sq sq += v * v. The line at `ahead` + the same
// byte offset is asked of L1 per vector (a row's next token: a chunk of a row is
// too short for the hardware prefetcher to learn). Returns the elements done.
template <DType T>
HWY_INLINE int64_t ScaleRow(const void* x, const float* gamma, int64_t count, float* u, VF& sq, bool with_sq,
                            const char* ahead) {
  const DF df;
  const int64_t L = hn::Lanes(df), esize = core::element_size(T);
  int64_t j = 0;
  for (; j + L <= count; j += L) {
    PrefetchLine<0>(ahead + j * esize);
    const VF v = LoadT<T>(df, x, j);
    if (with_sq) sq = hn::MulAdd(v, v, sq);
    hn::StoreU(gamma != nullptr ? hn::Mul(v, hn::LoadU(df, gamma + j)) : v, df, u + j);
  }
  return j;
}

// out[j] = sum_n h_pre[n] x[n][j] for j < count (a multiple of the lanes): the N
// rows of x n_stride elements apart, out in x's dtype T, written with streaming
// stores when `stream` (callers then end with hwy::FlushStream()).
template <DType T, size_t kN>
HWY_INLINE void WeightedRowsOf(const void* x, int64_t n_stride, const float* h_pre, int64_t count, void* out,
                               bool stream) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  VecArray<kN> weights;
#pragma GCC unroll 8
  for (size_t n = 0; n < kN; ++n) weights[n] = hn::Set(df, h_pre[n]);
  for (int64_t j = 0; j < count; j += L) {
    VF acc = hn::Zero(df);
#pragma GCC unroll 8
    for (size_t n = 0; n < kN; ++n) acc = hn::MulAdd(weights[n], LoadT<T>(df, x, n * n_stride + j), acc);
    if (stream) StreamT<T>(df, acc, out, j);
    else StoreT<T>(df, acc, out, j);
  }
}

#if HWY_TARGET != HWY_SCALAR
// WeightedRowsOf for bf16 over 2 * Lanes elements at a time: each 32-bit lane of
// one load holds two bf16 values, the even one's fp32 bits being the lane shifted
// up by 16 and the odd one's its high half, so no lane is widened or narrowed; the
// two sums are rounded as StoreBF16 rounds and put back into their halves. Same
// bits as WeightedRowsOf; count a multiple of 2 * Lanes.
template <size_t kN>
HWY_INLINE void WeightedPairsBF16(const uint16_t* x, int64_t n_stride, const float* h_pre, int64_t count,
                                  uint16_t* out, bool stream) {
  const DF df;
  const hn::RebindToUnsigned<DF> du32;
  const hn::Repartition<uint16_t, DF> du16;
  const int64_t L = hn::Lanes(df);
  VecArray<kN> weights;
#pragma GCC unroll 8
  for (size_t n = 0; n < kN; ++n) weights[n] = hn::Set(df, h_pre[n]);
  const auto high = hn::Set(du32, 0xffff0000u);
  const bool aligned = reinterpret_cast<uintptr_t>(out) % (2 * L * sizeof(uint16_t)) == 0;
  for (int64_t j = 0; j < count; j += 2 * L) {
    VF even = hn::Zero(df), odd = hn::Zero(df);
#pragma GCC unroll 8
    for (size_t n = 0; n < kN; ++n) {
      const auto pair = hn::BitCast(du32, hn::LoadU(du16, x + n * n_stride + j));
      even = hn::MulAdd(weights[n], hn::BitCast(df, hn::ShiftLeft<16>(pair)), even);
      odd = hn::MulAdd(weights[n], hn::BitCast(df, hn::And(pair, high)), odd);
    }
    const auto packed = hn::BitCast(
        du16, hn::Or(hn::ShiftRight<16>(BF16InHighHalves(df, even)), hn::And(BF16InHighHalves(df, odd), high)));
    if (stream && aligned) hn::Stream(packed, du16, out + j);
    else hn::StoreU(packed, du16, out + j);
  }
}
#endif

template <DType T>
HWY_INLINE void WeightedRows(const void* x, int64_t n_stride, const float* h_pre, int64_t N, int64_t count, void* out,
                             bool stream) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (T == DType::bf16) if (N == 4) {  // mHC's usual streams, bf16: pairs of lanes, then the rest
    const int64_t pairs = count / (2 * hn::Lanes(DF())) * (2 * hn::Lanes(DF()));
    WeightedPairsBF16<4>(static_cast<const uint16_t*>(x), n_stride, h_pre, pairs, static_cast<uint16_t*>(out), stream);
    if (pairs == count) return;
    x = static_cast<const uint16_t*>(x) + pairs;
    out = static_cast<uint16_t*>(out) + pairs;
    count -= pairs;
  }
#endif
  if (N == 4) return WeightedRowsOf<T, 4>(x, n_stride, h_pre, count, out, stream);  // mHC's usual streams
  const DF df;
  const int64_t L = hn::Lanes(df);
  for (int64_t j = 0; j < count; j += L) {
    VF acc = hn::Zero(df);
    for (int64_t n = 0; n < N; ++n) acc = hn::MulAdd(hn::Set(df, h_pre[n]), LoadT<T>(df, x, n * n_stride + j), acc);
    if (stream) StreamT<T>(df, acc, out, j);
    else StoreT<T>(df, acc, out, j);
  }
}

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
