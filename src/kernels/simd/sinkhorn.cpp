// SIMD MhcSinkhorn (SPEC §10) for one Highway target: a vector lane per token. A
// block of Lanes tokens is transposed into [entry][lane] scratch, runs SPEC's
// steps in registers with the fp32 steps' operations in their order
// (kernels/fp32_steps/sinkhorn.cpp), so each lane gives their bits, and
// is transposed back. A short last block pads its lanes with zeros it never stores.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/sinkhorn.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/simd/exp_f32-inl.h"
#include "kernels/simd/vec-inl.h"
#include "kernels/tables.hpp"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {
namespace {

// The block's scratch, all [..][L] floats: the matrix, the divisors, and for a
// recompute every slot of the block's own caches.
struct BlockScratch {
  float* P;         // [N*N][L]
  float* divisors;  // [N][L]
  float* norm;      // [2I][N*N][L]
  float* sum;       // [2I][N][L]
};

int64_t ScratchFloats(const SinkhornShape& s) {
  const int64_t L = hn::Lanes(DF());
  const int64_t simd = (s.N * s.N + s.N) * L * (1 + s.steps()) + 4 * L;
  return std::max(simd, fp32_steps::kSinkhorn.scratch_floats(s));  // N > 8: the fp32 steps' loops
}

BlockScratch LayOut(float* base, const SinkhornShape& s) {
  const int64_t L = hn::Lanes(DF()), NN = s.N * s.N;
  float* at = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(base) + 63) / 64 * 64);
  BlockScratch b;
  b.P = at;
  b.divisors = b.P + NN * L;
  b.norm = b.divisors + s.N * L;
  b.sum = b.norm + s.steps() * NN * L;
  return b;
}

// rows[e][lane] = token (t0 + lane)'s entry e, zero past `count` tokens.
void Gather(const TokenRows<const float>& in, int64_t t0, int64_t count, int64_t NN, float* rows) {
  const int64_t L = hn::Lanes(DF());
  for (int64_t l = 0; l < L; ++l) {
    const float* row = l < count ? in.at(t0 + l) : nullptr;
    for (int64_t e = 0; e < NN; ++e) rows[e * L + l] = row ? row[e] : 0.0f;
  }
}
void Scatter(const float* rows, int64_t NN, const TokenRows<float>& out, int64_t t0, int64_t count) {
  const int64_t L = hn::Lanes(DF());
  for (int64_t l = 0; l < count; ++l)
    for (int64_t e = 0; e < NN; ++e) out.at(t0 + l)[e] = rows[e * L + l];
}

// Slot k of the caller's caches for the block's tokens, from / into [..][L] rows.
void StoreCacheSlot(const SinkhornCaches& c, const SinkhornShape& s, int64_t k, int64_t t0, int64_t count,
                    const float* P, const float* divisors) {
  const int64_t L = hn::Lanes(DF()), N = s.N, pitch = s.pitch;
  for (int64_t l = 0; l < count; ++l) {
    float* m = c.norm_out + (k * s.T + t0 + l) * N * pitch;
    float* d = c.sum_out + (k * s.T + t0 + l) * pitch;
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < N; ++j) m[i * pitch + j] = P[(i * N + j) * L + l];
      for (int64_t j = N; j < pitch; ++j) m[i * pitch + j] = 0.0f;
      d[i] = divisors[i * L + l];
    }
    for (int64_t i = N; i < pitch; ++i) d[i] = 0.0f;
  }
}
void LoadCacheSlot(const SinkhornCaches& c, const SinkhornShape& s, int64_t k, int64_t t0, int64_t count, float* Y,
                   float* divisors) {
  const int64_t L = hn::Lanes(DF()), N = s.N, pitch = s.pitch;
  for (int64_t l = 0; l < L; ++l) {
    const bool real = l < count;
    const float* m = c.norm_out + (k * s.T + t0 + l) * N * pitch;
    const float* d = c.sum_out + (k * s.T + t0 + l) * pitch;
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < N; ++j) Y[(i * N + j) * L + l] = real ? m[i * pitch + j] : 0.0f;
      divisors[i * L + l] = real ? d[i] : 1.0f;
    }
  }
}

#if HWY_TARGET == HWY_AVX3
// N = 4 on AVX-512: a block of 16 tokens' 16 entries is a 16 x 16 transpose, so
// the gathers, scatters and cache slots of full blocks move whole vectors
// (mhc-bench sinkhorn forward/backward with caches) instead of single floats.
// The values are moved, never computed: the same bits as the scalar moves.
constexpr bool kBlockTranspose = true;

// r[i] lane j <-> r[j] lane i.
HWY_INLINE void Transpose16(__m512 (&r)[16]) {
  __m512 a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // b[4i + m] block c: rows 4i..4i+3 of column 4c + m
    const __m512d lo = _mm512_castps_pd(a[4 * i]), lo2 = _mm512_castps_pd(a[4 * i + 2]);
    const __m512d hi = _mm512_castps_pd(a[4 * i + 1]), hi2 = _mm512_castps_pd(a[4 * i + 3]);
    b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
    b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
    b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
    b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 c1 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0x88), c2 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0xdd);
    const __m512 c3 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0x88);
    const __m512 c4 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0xdd);
    r[m] = _mm512_shuffle_f32x4(c1, c3, 0x88);
    r[8 + m] = _mm512_shuffle_f32x4(c1, c3, 0xdd);
    r[4 + m] = _mm512_shuffle_f32x4(c2, c4, 0x88);
    r[12 + m] = _mm512_shuffle_f32x4(c2, c4, 0xdd);
  }
}

// 16 tokens' rows of 16 floats <-> rows [16][16] (entry-major).
HWY_INLINE void GatherSixteen(const TokenRows<const float>& in, int64_t t0, float* rows) {
  __m512 r[16];
  for (int l = 0; l < 16; ++l) r[l] = _mm512_loadu_ps(in.at(t0 + l));
  Transpose16(r);
  for (int e = 0; e < 16; ++e) _mm512_store_ps(rows + 16 * e, r[e]);
}
HWY_INLINE void ScatterSixteen(const float* rows, const TokenRows<float>& out, int64_t t0) {
  __m512 r[16];
  for (int e = 0; e < 16; ++e) r[e] = _mm512_load_ps(rows + 16 * e);
  Transpose16(r);
  for (int l = 0; l < 16; ++l) _mm512_storeu_ps(out.at(t0 + l), r[l]);
}

// Slot k of 16 tokens' caches from / into rows [16][16] and divisors [4][16], for
// pitch 4 (token rows back to back) or 8 (each row of 4 then 4 zeros).
HWY_INLINE void StoreSlotSixteen(const SinkhornCaches& c, const SinkhornShape& s, int64_t k, int64_t t0,
                                 const VF (&M)[16], const VF (&divisors)[4]) {
  __m512 r[16];
  for (int e = 0; e < 16; ++e) r[e] = M[e].raw;
  Transpose16(r);
  float* norm = c.norm_out + (k * s.T + t0) * 4 * s.pitch;
  float* sum = c.sum_out + (k * s.T + t0) * s.pitch;
  const DF df;
  if (s.pitch == 4) {
    for (int l = 0; l < 16; ++l) _mm512_storeu_ps(norm + 16 * l, r[l]);
    hn::StoreInterleaved4(divisors[0], divisors[1], divisors[2], divisors[3], df, sum);
    return;
  }
  const __m512 zero = _mm512_setzero_ps();
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 16, 16, 16, 4, 5, 6, 7, 16, 16, 16, 16);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 16, 16, 16, 16, 12, 13, 14, 15, 16, 16, 16, 16);
  for (int l = 0; l < 16; ++l) {
    _mm512_storeu_ps(norm + 32 * l, _mm512_permutex2var_ps(r[l], first, zero));
    _mm512_storeu_ps(norm + 32 * l + 16, _mm512_permutex2var_ps(r[l], second, zero));
  }
  HWY_ALIGN float quads[64];
  hn::StoreInterleaved4(divisors[0], divisors[1], divisors[2], divisors[3], df, quads);
  for (int l = 0; l < 16; ++l) {
    _mm_storeu_ps(sum + 8 * l, _mm_load_ps(quads + 4 * l));
    _mm_storeu_ps(sum + 8 * l + 4, _mm_setzero_ps());
  }
}
HWY_INLINE void LoadSlotSixteen(const SinkhornCaches& c, const SinkhornShape& s, int64_t k, int64_t t0, float* Y,
                                float* divisors) {
  const float* norm = c.norm_out + (k * s.T + t0) * 4 * s.pitch;
  const float* sum = c.sum_out + (k * s.T + t0) * s.pitch;
  const DF df;
  __m512 r[16];
  HWY_ALIGN float quads[64];
  if (s.pitch == 4) {
    for (int l = 0; l < 16; ++l) r[l] = _mm512_loadu_ps(norm + 16 * l);
    std::memcpy(quads, sum, sizeof quads);
  } else {
    const __m512i rows = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    for (int l = 0; l < 16; ++l)
      r[l] = _mm512_permutex2var_ps(_mm512_loadu_ps(norm + 32 * l), rows, _mm512_loadu_ps(norm + 32 * l + 16));
    for (int l = 0; l < 16; ++l) _mm_store_ps(quads + 4 * l, _mm_loadu_ps(sum + 8 * l));
  }
  Transpose16(r);
  for (int e = 0; e < 16; ++e) _mm512_store_ps(Y + 16 * e, r[e]);
  VF d0, d1, d2, d3;
  hn::LoadInterleaved4(df, quads, d0, d1, d2, d3);
  hn::Store(d0, df, divisors), hn::Store(d1, df, divisors + 16);
  hn::Store(d2, df, divisors + 32), hn::Store(d3, df, divisors + 48);
}
#else
constexpr bool kBlockTranspose = false;
#endif

// The whole-block moves where this target has them (callers check kBlockTranspose).
template <class VFArray, class DivArray>
HWY_INLINE void StoreSlotBlock(const SinkhornCaches& c, const SinkhornShape& s, int64_t k, int64_t t0,
                               const VFArray& M, const DivArray& divisors) {
#if HWY_TARGET == HWY_AVX3
  if constexpr (sizeof(M) == sizeof(VF) * 16) StoreSlotSixteen(c, s, k, t0, M, divisors);
#endif
}
HWY_INLINE void LoadSlotBlock(const SinkhornCaches& c, const SinkhornShape& s, int64_t k, int64_t t0, float* Y,
                              float* divisors) {
#if HWY_TARGET == HWY_AVX3
  LoadSlotSixteen(c, s, k, t0, Y, divisors);
#endif
}
HWY_INLINE void GatherBlock(const TokenRows<const float>& in, int64_t t0, float* rows) {
#if HWY_TARGET == HWY_AVX3
  GatherSixteen(in, t0, rows);
#endif
}
HWY_INLINE void ScatterBlock(const float* rows, const TokenRows<float>& out, int64_t t0) {
#if HWY_TARGET == HWY_AVX3
  ScatterSixteen(rows, out, t0);
#endif
}

// The forward of a block whose z is in rows [N*N][L]; store(k, P, divisors) after
// each step k; returns with H in P. kN is N, fixed so the matrix stays in registers.
template <int kN, class StoreSlot>
HWY_INLINE void ForwardBlock(const SinkhornShape& s, const float* rows, VecArray<kN * kN>& P, StoreSlot&& store) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  const VF eps = hn::Set(df, s.eps);
  VecArray<kN> divisors;
  for (int e = 0; e < kN * kN; ++e) P[e] = hn::Load(df, rows + e * L);
  for (int i = 0; i < kN; ++i) {  // step 0: the row softmax
    VF top = P[i * kN];
    for (int j = 1; j < kN; ++j) {
      const VF p = P[i * kN + j];
      top = hn::IfThenElse(hn::Gt(p, top), p, top);
    }
    VF sum = hn::Zero(df);
    for (int j = 0; j < kN; ++j) {
      P[i * kN + j] = ExpF32(df, hn::Sub(P[i * kN + j], top));
      sum = hn::Add(sum, P[i * kN + j]);
    }
    for (int j = 0; j < kN; ++j) P[i * kN + j] = hn::Div(P[i * kN + j], sum);
    divisors[i] = sum;
  }
  store(int64_t(0), P, divisors);
  for (int e = 0; e < kN * kN; ++e) P[e] = hn::Add(P[e], eps);
  for (int64_t k = 1; k < s.steps(); ++k) {
    if (k % 2 == 1) {  // columns
      for (int j = 0; j < kN; ++j) {
        VF c = hn::Zero(df);
        for (int i = 0; i < kN; ++i) c = hn::Add(c, P[i * kN + j]);
        divisors[j] = hn::Add(c, eps);
      }
      for (int i = 0; i < kN; ++i)
        for (int j = 0; j < kN; ++j) P[i * kN + j] = hn::Div(P[i * kN + j], divisors[j]);
    } else {  // rows
      for (int i = 0; i < kN; ++i) {
        VF r = hn::Zero(df);
        for (int j = 0; j < kN; ++j) r = hn::Add(r, P[i * kN + j]);
        divisors[i] = hn::Add(r, eps);
        for (int j = 0; j < kN; ++j) P[i * kN + j] = hn::Div(P[i * kN + j], divisors[i]);
      }
    }
    store(k, P, divisors);
  }
}

// The backward of a block whose grad_H is in rows [N*N][L], written back there as
// grad_z; slot(k, &Y, &div) gives step k's matrix and divisors as [..][L] rows.
template <int kN, class Slot>
HWY_INLINE void BackwardBlock(const SinkhornShape& s, float* rows, Slot&& slot) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  VecArray<kN * kN> G;
  for (int e = 0; e < kN * kN; ++e) G[e] = hn::Load(df, rows + e * L);
  for (int64_t k = s.steps() - 1; k >= 0; --k) {
    const float* Y;
    const float* div;
    slot(k, &Y, &div);
    auto y = [&](int i, int j) { return hn::Load(df, Y + (i * kN + j) * L); };
    if (k == 0) {  // the softmax's Jacobian, Y = p
      for (int i = 0; i < kN; ++i) {
        VF d = hn::Zero(df);
        for (int j = 0; j < kN; ++j) d = hn::Add(d, hn::Mul(G[i * kN + j], y(i, j)));
        for (int j = 0; j < kN; ++j) G[i * kN + j] = hn::Mul(hn::Sub(G[i * kN + j], d), y(i, j));
      }
    } else if (k % 2 == 1) {  // a column step
      for (int j = 0; j < kN; ++j) {
        VF d = hn::Zero(df);
        for (int i = 0; i < kN; ++i) d = hn::Add(d, hn::Mul(G[i * kN + j], y(i, j)));
        const VF divisor = hn::Load(df, div + j * L);
        for (int i = 0; i < kN; ++i) G[i * kN + j] = hn::Div(hn::Sub(G[i * kN + j], d), divisor);
      }
    } else {  // a row step
      for (int i = 0; i < kN; ++i) {
        VF d = hn::Zero(df);
        for (int j = 0; j < kN; ++j) d = hn::Add(d, hn::Mul(G[i * kN + j], y(i, j)));
        const VF divisor = hn::Load(df, div + i * L);
        for (int j = 0; j < kN; ++j) G[i * kN + j] = hn::Div(hn::Sub(G[i * kN + j], d), divisor);
      }
    }
  }
  for (int e = 0; e < kN * kN; ++e) hn::Store(G[e], df, rows + e * L);
}

// N = 4 on AVX-512 and AVX2, a few tokens without caches (decode): a token's 16
// entries in two vectors of 8, so a step divides twice a token, where a block of a
// lane per token divides 16 times whatever its count (T = 1 on AVX-512: 0.77 µs a
// call against 2.75; mhc-bench decode, hc_pre rows). Entry (i, j) = e = 4i + j, lane
// e % 8 of vector e / 8, runs the block's operations on it in their order; a row's or
// a column's terms come to each of its lanes by a permute, in index order.
#define MHC_SINKHORN_ENTRY_LANES (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2)
#if MHC_SINKHORN_ENTRY_LANES
// The block's sum of a row's or column's kTerms terms, from +0 in index order,
// term m brought to each lane from vector source(m) by of[m].
template <int kTerms, class D, class Source, class Indices>
HWY_INLINE hn::Vec<D> TermSum(D d, Source&& source, const Indices* of) {
  hn::Vec<D> sum = hn::Zero(d);
  for (int m = 0; m < kTerms; ++m) sum = hn::Add(sum, hn::TableLookupLanes(source(m), of[m]));
  return sum;
}
// The block's row max: the first term, then each larger one in index order.
template <int kTerms, class D, class Indices>
HWY_INLINE hn::Vec<D> TermMax(hn::Vec<D> v, const Indices* of) {
  hn::Vec<D> top = hn::TableLookupLanes(v, of[0]);
  for (int m = 1; m < kTerms; ++m) {
    const hn::Vec<D> p = hn::TableLookupLanes(v, of[m]);
    top = hn::IfThenElse(hn::Gt(p, top), p, top);
  }
  return top;
}
// Up to half a block of tokens; past that the block's divisions cost less than the
// permutes.
constexpr int64_t kEntryLaneTokens = hn::MaxLanes(DF()) / 2;

template <int kTokens>
HWY_INLINE void ForwardEntryLanes(const SinkhornForwardOperands& o, int64_t t) {
  const hn::CappedTag<float, 8> df;  // 8 lanes on AVX-512 too: a shorter chain of divisions
  using VF = hn::Vec<decltype(df)>;
  constexpr int L = int(hn::MaxLanes(df)), kV = 16 / L;  // vectors a token
  using TI = hn::TFromD<hn::RebindToSigned<decltype(df)>>;
  HWY_ALIGN TI row_index[4][L], column_index[4][L];
  for (int m = 0; m < 4; ++m)
    for (int l = 0; l < L; ++l) {
      row_index[m][l] = TI(4 * (l / 4) + m);        // entry (i, m) for lane (i, j), in the lane's vector
      column_index[m][l] = TI(4 * m % L + l % 4);  // entry (m, j), in vector 4m / L
    }
  using Indices = decltype(hn::SetTableIndices(df, row_index[0]));
  Indices of_row[4], of_column[4];
  for (int m = 0; m < 4; ++m) {
    of_row[m] = hn::SetTableIndices(df, row_index[m]);
    of_column[m] = hn::SetTableIndices(df, column_index[m]);
  }
  const VF eps = hn::Set(df, o.shape.eps);
  VF P[kTokens][kV];
  for (int q = 0; q < kTokens; ++q)  // step 0: the row softmax
    for (int v = 0; v < kV; ++v) {
      const VF z = hn::LoadU(df, o.z.at(t + q) + v * L);
      const VF e = ExpF32(df, hn::Sub(z, TermMax<4, decltype(df)>(z, of_row)));
      P[q][v] = hn::Add(hn::Div(e, TermSum<4>(df, [&](int) { return e; }, of_row)), eps);
    }
  for (int64_t k = 1; k < o.shape.steps(); ++k) {
    for (int q = 0; q < kTokens; ++q) {
      if (k % 2 == 1) {  // columns: the same divisors for every vector
        const VF divisor = hn::Add(TermSum<4>(df, [&](int m) { return P[q][4 * m / L]; }, of_column), eps);
        for (int v = 0; v < kV; ++v) P[q][v] = hn::Div(P[q][v], divisor);
      } else {  // rows
        for (int v = 0; v < kV; ++v)
          P[q][v] = hn::Div(P[q][v], hn::Add(TermSum<4>(df, [&](int) { return P[q][v]; }, of_row), eps));
      }
    }
  }
  for (int q = 0; q < kTokens; ++q)
    for (int v = 0; v < kV; ++v) hn::StoreU(P[q][v], df, o.h_res.at(t + q) + v * L);
}

// N = 5..8, a few tokens without caches, one at a time: a row of the token's matrix
// in a vector of 8 (N lanes real), so a step divides N times where a block divides
// N² times (T = 1, N = 8: 1.3 µs a call against 10.2). A column's terms are the
// rows' lanes as they lie; a row's come to each of its lanes by a permute, in index
// order. The other lanes start at the row's max, so at exp(0) = 1, and stay near
// 1 / N (never subnormal); they are never stored.
constexpr int64_t kRowLaneTokens = hn::MaxLanes(DF()) / 4;  // past that the block wins (N = 5)

template <int kN>
HWY_INLINE void ForwardRowLanes(const SinkhornForwardOperands& o, int64_t t) {
  const hn::CappedTag<float, 8> df;
  using VF = hn::Vec<decltype(df)>;
  using TI = hn::TFromD<hn::RebindToSigned<decltype(df)>>;
  HWY_ALIGN TI lane_index[kN][8];
  for (int m = 0; m < kN; ++m)
    for (int l = 0; l < 8; ++l) lane_index[m][l] = TI(m);
  using Indices = decltype(hn::SetTableIndices(df, lane_index[0]));
  Indices of_lane[kN];  // lane m to every lane
  for (int m = 0; m < kN; ++m) of_lane[m] = hn::SetTableIndices(df, lane_index[m]);
  const auto real = hn::FirstN(df, kN);
  const VF eps = hn::Set(df, o.shape.eps);
  const float* z_rows = o.z.at(t);
  VF P[kN];
  for (int i = 0; i < kN; ++i) {  // step 0: the row softmax
    const VF z = hn::MaskedLoad(real, df, z_rows + i * kN);
    const VF top = TermMax<kN, decltype(df)>(z, of_lane);
    const VF e = ExpF32(df, hn::Sub(hn::IfThenElse(real, z, top), top));
    P[i] = hn::Add(hn::Div(e, TermSum<kN>(df, [&](int) { return e; }, of_lane)), eps);
  }
  for (int64_t k = 1; k < o.shape.steps(); ++k) {
    if (k % 2 == 1) {  // columns
      VF c = hn::Zero(df);
      for (int i = 0; i < kN; ++i) c = hn::Add(c, P[i]);
      const VF divisor = hn::Add(c, eps);
      for (int i = 0; i < kN; ++i) P[i] = hn::Div(P[i], divisor);
    } else {  // rows
      for (int i = 0; i < kN; ++i)
        P[i] = hn::Div(P[i], hn::Add(TermSum<kN>(df, [&](int) { return P[i]; }, of_lane), eps));
    }
  }
  float* h_rows = o.h_res.at(t);
  for (int i = 0; i < kN; ++i) hn::BlendedStore(P[i], real, df, h_rows + i * kN);
}

// Tokens [t0, t1), at most kEntryLaneTokens, four at a time.
void ForwardFewTokens(const SinkhornForwardOperands& o, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; t += 4) {
    switch (std::min<int64_t>(4, t1 - t)) {
      case 1: ForwardEntryLanes<1>(o, t); break;
      case 2: ForwardEntryLanes<2>(o, t); break;
      case 3: ForwardEntryLanes<3>(o, t); break;
      default: ForwardEntryLanes<4>(o, t); break;
    }
  }
}
#endif

template <int kN>
void ForwardTokensN(const SinkhornForwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  const DF df;
  const SinkhornShape& s = o.shape;
  const int64_t L = hn::Lanes(df), NN = kN * kN;
  const BlockScratch b = LayOut(scratch, s);
  for (int64_t t = t0; t < t1; t += L) {
    const int64_t count = std::min(L, t1 - t);
#if MHC_SINKHORN_ENTRY_LANES
    if (kN == 4 && count <= kEntryLaneTokens && !o.caches.present()) {
      ForwardFewTokens(o, t, t + count);
      continue;
    }
    if constexpr (kN >= 5) {
      if (count <= kRowLaneTokens && !o.caches.present()) {
        for (int64_t q = t; q < t + count; ++q) ForwardRowLanes<kN>(o, q);
        continue;
      }
    }
#endif
    const bool whole = kN == 4 && kBlockTranspose && count == 16;  // a whole AVX-512 block of N = 4
    const bool whole_slots = whole && (s.pitch == 4 || s.pitch == 8);
    if (whole) GatherBlock(o.z, t, b.P); else Gather(o.z, t, count, NN, b.P);
    VecArray<kN * kN> P;
    ForwardBlock<kN>(s, b.P, P, [&](int64_t k, const VecArray<kN * kN>& M, const VecArray<kN>& divisors) {
      if (!o.caches.present()) return;
      if (whole_slots) return StoreSlotBlock(o.caches, s, k, t, M, divisors);
      for (int e = 0; e < kN * kN; ++e) hn::Store(M[e], df, b.norm + e * L);
      for (int i = 0; i < kN; ++i) hn::Store(divisors[i], df, b.sum + i * L);
      StoreCacheSlot(o.caches, s, k, t, count, b.norm, b.sum);
    });
    for (int e = 0; e < kN * kN; ++e) hn::Store(P[e], df, b.P + e * L);
    if (whole) ScatterBlock(b.P, o.h_res, t); else Scatter(b.P, NN, o.h_res, t, count);
  }
}

template <int kN>
void BackwardTokensN(const SinkhornBackwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  const DF df;
  const SinkhornShape& s = o.shape;
  const int64_t L = hn::Lanes(df), NN = kN * kN;
  const BlockScratch b = LayOut(scratch, s);
  for (int64_t t = t0; t < t1; t += L) {
    const int64_t count = std::min(L, t1 - t);
    const bool whole = kN == 4 && kBlockTranspose && count == 16;  // a whole AVX-512 block of N = 4
    const bool whole_slots = whole && (s.pitch == 4 || s.pitch == 8);
    if (!o.caches.present()) {  // this block's forward into its own caches
      if (whole) GatherBlock(o.z, t, b.P); else Gather(o.z, t, count, NN, b.P);
      VecArray<kN * kN> P;
      ForwardBlock<kN>(s, b.P, P, [&](int64_t k, const VecArray<kN * kN>& M, const VecArray<kN>& divisors) {
        for (int e = 0; e < kN * kN; ++e) hn::Store(M[e], df, b.norm + (k * NN + e) * L);
        for (int i = 0; i < kN; ++i) hn::Store(divisors[i], df, b.sum + (k * kN + i) * L);
      });
    }
    if (whole) GatherBlock(o.grad_h_res, t, b.P); else Gather(o.grad_h_res, t, count, NN, b.P);
    BackwardBlock<kN>(s, b.P, [&](int64_t k, const float** Y, const float** div) {
      if (o.caches.present()) {  // slot k into the first slot of the block's own
        if (whole_slots) LoadSlotBlock(o.caches, s, k, t, b.norm, b.sum);
        else LoadCacheSlot(o.caches, s, k, t, count, b.norm, b.sum);
        *Y = b.norm, *div = b.sum;
      } else {
        *Y = b.norm + k * NN * L, *div = b.sum + k * kN * L;
      }
    });
    if (whole) ScatterBlock(b.P, o.grad_z, t); else Scatter(b.P, NN, o.grad_z, t, count);
  }
}

// N up to 8 in registers (and the stack): body.template operator()<N>(); false
// for larger N, which run one token at a time in the fp32 steps' loops, whose
// bits these are.
template <class Body>
bool WithFixedN(int64_t N, Body&& body) {
  switch (N) {
    case 1: return body.template operator()<1>(), true;
    case 2: return body.template operator()<2>(), true;
    case 3: return body.template operator()<3>(), true;
    case 4: return body.template operator()<4>(), true;
    case 5: return body.template operator()<5>(), true;
    case 6: return body.template operator()<6>(), true;
    case 7: return body.template operator()<7>(), true;
    case 8: return body.template operator()<8>(), true;
    default: return false;
  }
}

void ForwardTokens(const SinkhornForwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  if (!WithFixedN(o.shape.N, [&]<int kN>() { ForwardTokensN<kN>(o, scratch, t0, t1); }))
    fp32_steps::kSinkhorn.forward(o, scratch, t0, t1);
}

void BackwardTokens(const SinkhornBackwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  if (!WithFixedN(o.shape.N, [&]<int kN>() { BackwardTokensN<kN>(o, scratch, t0, t1); }))
    fp32_steps::kSinkhorn.backward(o, scratch, t0, t1);
}

}  // namespace

[[maybe_unused]] const SinkhornKernels kSinkhorn = {
    .scratch_floats = ScratchFloats, .item_tokens = 64, .forward = ForwardTokens, .backward = BackwardTokens};

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/per_target.hpp"

namespace mhc::kernels::simd {
const SinkhornKernels* sinkhorn(Isa isa) { return MHC_SIMD_PER_TARGET(const SinkhornKernels*, isa, kSinkhorn); }
}  // namespace mhc::kernels::simd
#endif
