// SIMD MhcSinkhorn (SPEC §10) for one Highway target: a vector lane per token. A
// block of Lanes tokens is transposed into [entry][lane] scratch, runs SPEC's
// steps with the reference's operations in the reference's order (kernels/
// reference/sinkhorn.cpp), so each lane gives the reference's bits, and is
// transposed back. A short last block pads its lanes with zeros it never stores.
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
  return (s.N * s.N + s.N) * L * (1 + s.steps()) + 4 * L;
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

// The forward on rows P (z on entry, H on return); store(k) after each step k.
template <class StoreSlot>
void ForwardBlock(const SinkhornShape& s, float* P, float* divisors, StoreSlot&& store) {
  const DF df;
  const int64_t L = hn::Lanes(df), N = s.N;
  const VF eps = hn::Set(df, s.eps);
  auto at = [&](int64_t i, int64_t j) { return P + (i * N + j) * L; };
  for (int64_t i = 0; i < N; ++i) {
    VF top = hn::Load(df, at(i, 0));
    for (int64_t j = 1; j < N; ++j) {
      const VF v = hn::Load(df, at(i, j));
      top = hn::IfThenElse(hn::Gt(v, top), v, top);
    }
    VF sum = hn::Zero(df);
    for (int64_t j = 0; j < N; ++j) {
      const VF e = ExpF32(df, hn::Sub(hn::Load(df, at(i, j)), top));
      hn::Store(e, df, at(i, j));
      sum = hn::Add(sum, e);
    }
    for (int64_t j = 0; j < N; ++j) hn::Store(hn::Div(hn::Load(df, at(i, j)), sum), df, at(i, j));
    hn::Store(sum, df, divisors + i * L);
  }
  store(int64_t(0));
  for (int64_t e = 0; e < N * N; ++e) hn::Store(hn::Add(hn::Load(df, P + e * L), eps), df, P + e * L);
  for (int64_t k = 1; k < s.steps(); ++k) {
    if (k % 2 == 1) {  // columns
      for (int64_t j = 0; j < N; ++j) {
        VF c = hn::Zero(df);
        for (int64_t i = 0; i < N; ++i) c = hn::Add(c, hn::Load(df, at(i, j)));
        hn::Store(hn::Add(c, eps), df, divisors + j * L);
      }
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j)
          hn::Store(hn::Div(hn::Load(df, at(i, j)), hn::Load(df, divisors + j * L)), df, at(i, j));
    } else {  // rows
      for (int64_t i = 0; i < N; ++i) {
        VF r = hn::Zero(df);
        for (int64_t j = 0; j < N; ++j) r = hn::Add(r, hn::Load(df, at(i, j)));
        const VF divisor = hn::Add(r, eps);
        hn::Store(divisor, df, divisors + i * L);
        for (int64_t j = 0; j < N; ++j) hn::Store(hn::Div(hn::Load(df, at(i, j)), divisor), df, at(i, j));
      }
    }
    store(k);
  }
}

// The backward on rows G (grad_H on entry, grad_z on return); slot(k, &Y, &div)
// gives step k's matrix and divisors as [..][L] rows.
template <class Slot>
void BackwardBlock(const SinkhornShape& s, float* G, Slot&& slot) {
  const DF df;
  const int64_t L = hn::Lanes(df), N = s.N;
  auto g = [&](int64_t i, int64_t j) { return G + (i * N + j) * L; };
  for (int64_t k = s.steps() - 1; k >= 0; --k) {
    const float* Y;
    const float* div;
    slot(k, &Y, &div);
    auto y = [&](int64_t i, int64_t j) { return hn::Load(df, Y + (i * N + j) * L); };
    if (k == 0) {  // the softmax's Jacobian, Y = p
      for (int64_t i = 0; i < N; ++i) {
        VF d = hn::Zero(df);
        for (int64_t j = 0; j < N; ++j) d = hn::Add(d, hn::Mul(hn::Load(df, g(i, j)), y(i, j)));
        for (int64_t j = 0; j < N; ++j) hn::Store(hn::Mul(hn::Sub(hn::Load(df, g(i, j)), d), y(i, j)), df, g(i, j));
      }
    } else if (k % 2 == 1) {  // a column step
      for (int64_t j = 0; j < N; ++j) {
        VF d = hn::Zero(df);
        for (int64_t i = 0; i < N; ++i) d = hn::Add(d, hn::Mul(hn::Load(df, g(i, j)), y(i, j)));
        const VF divisor = hn::Load(df, div + j * L);
        for (int64_t i = 0; i < N; ++i) hn::Store(hn::Div(hn::Sub(hn::Load(df, g(i, j)), d), divisor), df, g(i, j));
      }
    } else {  // a row step
      for (int64_t i = 0; i < N; ++i) {
        VF d = hn::Zero(df);
        for (int64_t j = 0; j < N; ++j) d = hn::Add(d, hn::Mul(hn::Load(df, g(i, j)), y(i, j)));
        const VF divisor = hn::Load(df, div + i * L);
        for (int64_t j = 0; j < N; ++j) hn::Store(hn::Div(hn::Sub(hn::Load(df, g(i, j)), d), divisor), df, g(i, j));
      }
    }
  }
}

void ForwardTokens(const SinkhornForwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  const SinkhornShape& s = o.shape;
  const int64_t L = hn::Lanes(DF()), NN = s.N * s.N;
  const BlockScratch b = LayOut(scratch, s);
  for (int64_t t = t0; t < t1; t += L) {
    const int64_t count = std::min(L, t1 - t);
    Gather(o.z, t, count, NN, b.P);
    ForwardBlock(s, b.P, b.divisors, [&](int64_t k) {
      if (o.caches.present()) StoreCacheSlot(o.caches, s, k, t, count, b.P, b.divisors);
    });
    Scatter(b.P, NN, o.h_res, t, count);
  }
}

void BackwardTokens(const SinkhornBackwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  const SinkhornShape& s = o.shape;
  const int64_t L = hn::Lanes(DF()), NN = s.N * s.N;
  const BlockScratch b = LayOut(scratch, s);
  for (int64_t t = t0; t < t1; t += L) {
    const int64_t count = std::min(L, t1 - t);
    if (!o.caches.present()) {  // this block's forward into its own caches
      Gather(o.z, t, count, NN, b.P);
      ForwardBlock(s, b.P, b.divisors, [&](int64_t k) {
        std::memcpy(b.norm + k * NN * L, b.P, size_t(NN * L) * sizeof(float));
        std::memcpy(b.sum + k * s.N * L, b.divisors, size_t(s.N * L) * sizeof(float));
      });
    }
    Gather(o.grad_h_res, t, count, NN, b.P);
    BackwardBlock(s, b.P, [&](int64_t k, const float** Y, const float** div) {
      if (o.caches.present()) {  // slot k into the first slot of the block's own
        LoadCacheSlot(o.caches, s, k, t, count, b.norm, b.sum);
        *Y = b.norm, *div = b.sum;
      } else {
        *Y = b.norm + k * NN * L, *div = b.sum + k * s.N * L;
      }
    });
    Scatter(b.P, NN, o.grad_z, t, count);
  }
}

}  // namespace

[[maybe_unused]] const SinkhornKernels kSinkhorn = {
    .scratch_floats = ScratchFloats, .item_tokens = 64, .forward = ForwardTokens, .backward = BackwardTokens};

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mhc::kernels::simd {
const SinkhornKernels* sinkhorn(Isa isa) {
#if HWY_TARGETS & HWY_AVX3
  if (isa == Isa::avx512) return &N_AVX3::kSinkhorn;
#endif
#if HWY_TARGETS & HWY_AVX2
  if (isa == Isa::avx2) return &N_AVX2::kSinkhorn;
#endif
  return nullptr;
}
}  // namespace mhc::kernels::simd
#endif
