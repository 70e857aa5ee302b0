// SIMD MhcPost and MhcPostBackward (SPEC §11) for one Highway target. The forward
// and grad_x / grad_h_out run across columns, a vector of d at a time, with the
// reference's operations in its order. The backward's sums over D (grad_h_res,
// grad_h_post) must add d in index order, so for N = 4 they run across the (i, j)
// pairs instead: a block of columns is transposed into [d][4] quads of x and of
// grad_out, and each d adds one product per pair lane. Other N take the
// reference's scalar sums. Partial vectors at the end of a row go through
// zero-padded copies; every path gives the reference's bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/post.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include "hwy/cache_control.h"  // FlushStream
#include "hwy/highway.h"
#include "kernels/common/post_sums.hpp"
#include "kernels/simd/simd.hpp"
#include "kernels/simd/vec-inl.h"
#include "kernels/tables.hpp"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {
namespace {

constexpr int64_t kQuadBlock = 256;

// Lambdas of the hot loops inlined into their callers: GCC keeps some out of line,
// and then their vector arrays pass through memory (mhc-bench post backward).
#define MHC_INLINE_LAMBDA __attribute__((always_inline))  // columns per transposed block of the backward's pair sums

// Lanes elements of row `row` at column d (a full vector), or the valid ones of a
// partial vector zero-padded through `pad` (raw elements).
template <DType T>
HWY_INLINE VF LoadColumns(DF df, const void* base, int64_t offset, int64_t valid, void* pad) {
  if (valid == int64_t(hn::Lanes(df))) return LoadT<T>(df, base, offset);
  CopyRow<T>(df, base, offset, 1, valid, pad, 0);
  return LoadT<T>(df, pad, 0);
}
// The valid lanes of v at column offset; whole vectors streamed past the caches
// when `stream` (outputs far larger than the caches: no read of each line first).
template <DType T>
HWY_INLINE void StoreColumns(DF df, VF v, void* base, int64_t offset, int64_t valid, bool stream) {
  if (valid == int64_t(hn::Lanes(df))) return stream ? StreamT<T>(df, v, base, offset) : StoreT<T>(df, v, base, offset);
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(v, df, lanes);
  for (int64_t i = 0; i < valid; ++i) core::store_element(base, T, offset + i, lanes[i]);
}

bool Streams(const PostShape& s, DType type, bool allowed) {
  return allowed && s.T * s.N * s.D * core::element_size(type) > kStreamBytes;
}

int64_t ForwardScratchFloats(const PostShape& s) { return s.N * int64_t(hn::Lanes(DF())) + 64; }

// N = 4 with x's rows in registers, the loops unrolled (the same operations);
// bf16 outputs two vectors at a time (StoreBF16Pair; kHardware: vcvtne2ps2bf16).
template <DType T, bool kHardware>
void ForwardFour(const PostForwardOperands& o, int64_t t0, int64_t t1, int64_t d0, int64_t d1, bool stream) {
  const DF df;
  constexpr int kN = 4;
  const int64_t L = hn::Lanes(df);
  HWY_ALIGN float pad[hn::MaxLanes(DF())];
  for (int64_t t = t0; t < t1; ++t) {
    const float* h_post = o.h_post.at(t);
    const float* H = o.shape.has_h_res ? o.h_res.at(t) : nullptr;
    auto columns = [&](int64_t d, int64_t valid, VecArray<kN>& out) HWY_ATTR MHC_INLINE_LAMBDA {
      const VF h_out = LoadColumns<T>(df, o.h_out.data, o.h_out.at(t, 0) + d, valid, pad);
      VecArray<kN> x;
      for (int i = 0; i < kN; ++i) x[i] = LoadColumns<T>(df, o.x.data, o.x.at(t, i) + d, valid, pad);
      for (int j = 0; j < kN; ++j) {
        if (H != nullptr) {
          out[j] = hn::Mul(hn::Set(df, h_post[j]), h_out);
          for (int i = 0; i < kN; ++i) out[j] = hn::Add(out[j], hn::Mul(hn::Set(df, H[i * kN + j]), x[i]));
        } else {
          out[j] = hn::Add(x[j], hn::Mul(hn::Set(df, h_post[j]), h_out));
        }
      }
    };
    int64_t d = d0;
    if constexpr (T == DType::bf16) {
      for (; d + 2 * L <= d1; d += 2 * L) {
        VecArray<kN> first, second;
        columns(d, L, first);
        columns(d + L, L, second);
        for (int j = 0; j < kN; ++j)
          StoreBF16Pair<kHardware>(df, first[j], second[j], static_cast<uint16_t*>(o.out.data) + o.out.at(t, j) + d, stream);
      }
    }
    for (; d < d1; d += L) {
      const int64_t valid = std::min(L, d1 - d);
      VecArray<kN> out;
      columns(d, valid, out);
      for (int j = 0; j < kN; ++j) StoreColumns<T>(df, out[j], o.out.data, o.out.at(t, j) + d, valid, stream);
    }
  }
}

template <bool kHardware>
void Forward(const PostForwardOperands& o, float* scratch, int64_t t0, int64_t t1, int64_t d0, int64_t d1) {
  if (o.shape.N == 4) {
    const bool stream = Streams(o.shape, o.shape.x_dtype, o.streaming_stores);
    WithDType(o.shape.x_dtype, [&]<DType T>() { ForwardFour<T, kHardware>(o, t0, t1, d0, d1, stream); });
    if (stream) hwy::FlushStream();
    return;
  }
  const DF df;
  const PostShape& s = o.shape;
  const int64_t L = hn::Lanes(df), N = s.N;
  float* xs = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) / 64 * 64);  // [N][L]
  const bool stream = Streams(s, s.x_dtype, o.streaming_stores);
  WithDType(s.x_dtype, [&]<DType T>() {
    HWY_ALIGN float pad[hn::MaxLanes(DF())];
    for (int64_t t = t0; t < t1; ++t) {
      const float* h_post = o.h_post.at(t);
      const float* H = s.has_h_res ? o.h_res.at(t) : nullptr;
      for (int64_t d = d0; d < d1; d += L) {
        const int64_t valid = std::min(L, d1 - d);
        const VF h_out = LoadColumns<T>(df, o.h_out.data, o.h_out.at(t, 0) + d, valid, pad);
        for (int64_t i = 0; i < N; ++i)
          hn::Store(LoadColumns<T>(df, o.x.data, o.x.at(t, i) + d, valid, pad), df, xs + i * L);
        for (int64_t j = 0; j < N; ++j) {
          VF acc;
          if (H != nullptr) {
            acc = hn::Mul(hn::Set(df, h_post[j]), h_out);
            for (int64_t i = 0; i < N; ++i) acc = hn::Add(acc, hn::Mul(hn::Set(df, H[i * N + j]), hn::Load(df, xs + i * L)));
          } else {
            acc = hn::Add(hn::Load(df, xs + j * L), hn::Mul(hn::Set(df, h_post[j]), h_out));
          }
          StoreColumns<T>(df, acc, o.out.data, o.out.at(t, j) + d, valid, stream);
        }
      }
    }
  });
  if (stream) hwy::FlushStream();
}

// Per worker: g [N][L], the quads of x and g [kQuadBlock][4] each, h_out [kQuadBlock].
// Per worker: N = 4, the quads of two tokens (x, grad_out [kQuadBlock][4] and
// h_out [kQuadBlock] each); other N, grad_out's vector of columns [N][L].
int64_t BackwardScratchFloats(const PostShape& s) {
  return std::max<int64_t>(18 * kQuadBlock, s.N * int64_t(hn::Lanes(DF()))) + 64;
}

// The N = 4 backward, written for 8 or 16 lanes fixed at compile time: x86's AVX2 and
// AVX-512 (NEON has 4 lanes, SVE's are known at run time only, and the registry never
// names the scalar target; they run BackwardTokens).
#define MHC_POST_QUADS (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3)
#if MHC_POST_QUADS
// grad_h_res and grad_h_post, N = 4, of kGroup tokens at once (independent
// chains, so the adds' latency overlaps), from their quads of columns [0, count):
// pairs[v] lane l is pair (i, j) = (v * L/4 + l/4, l % 4); post lanes 0..3 are j
// (the other lanes repeat them).
struct PairSums {
  VF pairs[2];
  VF post;
};
struct TokenQuads {
  float* x;       // [kQuadBlock][4]
  float* g;       // [kQuadBlock][4]
  float* h_out;   // [kQuadBlock]
};
// The quads of a vector of columns d0 + [0, L) as StoreQuads leaves them: column
// 4b + m of the vector (block b, lane m) at quad m * L/4 + b.
HWY_INLINE void StoreQuads(DF df, VF r0, VF r1, VF r2, VF r3, float* quads) {
  const hn::RepartitionToWide<DF> dw;
  const auto r10_lower = hn::ZipLower(dw, r0, r1), r32_lower = hn::ZipLower(dw, r2, r3);
  const auto r10_upper = hn::ZipUpper(dw, r0, r1), r32_upper = hn::ZipUpper(dw, r2, r3);
  const int64_t L = hn::Lanes(df);
  hn::StoreU(hn::BitCast(df, hn::InterleaveLower(dw, r10_lower, r32_lower)), df, quads);
  hn::StoreU(hn::BitCast(df, hn::InterleaveUpper(dw, r10_lower, r32_lower)), df, quads + L);
  hn::StoreU(hn::BitCast(df, hn::InterleaveLower(dw, r10_upper, r32_upper)), df, quads + 2 * L);
  hn::StoreU(hn::BitCast(df, hn::InterleaveUpper(dw, r10_upper, r32_upper)), df, quads + 3 * L);
}
// Where StoreQuads put column d's quad (floats from the first quad).
HWY_INLINE int64_t QuadAt(int64_t d, int64_t L) {
  const int64_t c = d % L;
  return 4 * ((d - c) + (c % 4) * (L / 4) + c / 4);
}

template <int kGroup>
HWY_INLINE void AddQuads(DF df, const TokenQuads* quads, int64_t count, bool first, PairSums* sums) {
  constexpr int64_t L = hn::MaxLanes(DF());
  constexpr int64_t kVectors = 16 / L;  // 1 (L = 16) or 2 (L = 8)
  using TI = hn::TFromD<hn::RebindToSigned<DF>>;
  HWY_ALIGN TI index[2][L];
  for (int64_t v = 0; v < kVectors; ++v)
    for (int64_t l = 0; l < L; ++l) index[v][l] = TI((v * L / 4 + l / 4) % 4);
  const auto idx0 = hn::SetTableIndices(df, index[0]);
  const auto idx1 = hn::SetTableIndices(df, index[kVectors - 1]);
  VF pairs[kGroup][kVectors], post[kGroup];
  for (int q = 0; q < kGroup; ++q) {
    for (int64_t v = 0; v < kVectors; ++v) pairs[q][v] = sums[q].pairs[v];
    post[q] = sums[q].post;
  }
  auto add = [&](int64_t d, bool start) HWY_ATTR MHC_INLINE_LAMBDA {
    const int64_t at = QuadAt(d, L);
    for (int q = 0; q < kGroup; ++q) {
      const VF x = hn::LoadDup128(df, quads[q].x + at), g = hn::LoadDup128(df, quads[q].g + at);
      const VF p0 = hn::Mul(hn::TableLookupLanes(x, idx0), g), h = hn::Mul(hn::Set(df, quads[q].h_out[d]), g);
      pairs[q][0] = start ? p0 : hn::Add(pairs[q][0], p0);
      post[q] = start ? h : hn::Add(post[q], h);
      if constexpr (kVectors == 2) {
        const VF p1 = hn::Mul(hn::TableLookupLanes(x, idx1), g);
        pairs[q][1] = start ? p1 : hn::Add(pairs[q][1], p1);
      }
    }
  };
  int64_t d = 0;
  if (first) add(d++, true);  // each sum starts from its first term
  for (; d < count && d % L != 0; ++d) add(d, false);
  for (; d + L <= count; d += L)
    for (int64_t c = 0; c < L; ++c) add(d + c, false);  // unrolled: constant quad offsets
  for (; d < count; ++d) add(d, false);
  for (int q = 0; q < kGroup; ++q) {
    for (int64_t v = 0; v < kVectors; ++v) sums[q].pairs[v] = pairs[q][v];
    sums[q].post = post[q];
  }
}

// kGradX false: no grad_x (the site backward's prepare, SPEC §15).
template <DType T, DType GX, bool kGradX, bool kHardware>
void BackwardFour(const PostBackwardOperands& o, int64_t t0, int64_t t1, const TokenQuads (&scratch)[2], bool stream) {
  const DF df;
  constexpr int kN = 4;
  const PostShape& s = o.shape;
  const int64_t L = hn::Lanes(df), D = s.D;
  HWY_ALIGN float pad[hn::MaxLanes(DF())];
  // grad_x and grad_h_out of token t's vector of columns at d, and its quads at q.
  auto columns = [&](int64_t t, int64_t d, int64_t valid, int64_t q, const TokenQuads& quads, VF (&gx)[kN],
                     VF& gho) HWY_ATTR MHC_INLINE_LAMBDA {
    const float* h_post = o.h_post.at(t);
    const float* H = s.has_h_res ? o.h_res.at(t) : nullptr;
    VF g[kN];
    for (int j = 0; j < kN; ++j) g[j] = LoadColumns<T>(df, o.grad_out.data, o.grad_out.at(t, j) + d, valid, pad);
    for (int i = 0; i < kN && kGradX; ++i) {
      if (H != nullptr) {
        gx[i] = hn::Mul(hn::Set(df, H[i * kN]), g[0]);
        for (int j = 1; j < kN; ++j) gx[i] = hn::Add(gx[i], hn::Mul(hn::Set(df, H[i * kN + j]), g[j]));
      } else {
        gx[i] = g[i];
      }
    }
    gho = hn::Mul(hn::Set(df, h_post[0]), g[0]);
    for (int j = 1; j < kN; ++j) gho = hn::Add(gho, hn::Mul(hn::Set(df, h_post[j]), g[j]));
    hn::StoreU(LoadColumns<T>(df, o.h_out.data, o.h_out.at(t, 0) + d, valid, pad), df, quads.h_out + q);
    VF x[kN];
    for (int i = 0; i < kN; ++i) x[i] = LoadColumns<T>(df, o.x.data, o.x.at(t, i) + d, valid, pad);
    StoreQuads(df, x[0], x[1], x[2], x[3], quads.x + 4 * q);
    StoreQuads(df, g[0], g[1], g[2], g[3], quads.g + 4 * q);
  };
  // Token t's columns [b0, b1): the outputs, and its quads for the pair sums.
  auto block = [&](int64_t t, int64_t b0, int64_t b1, const TokenQuads& quads) HWY_ATTR MHC_INLINE_LAMBDA {
    int64_t d = b0;
    if constexpr (T == DType::bf16) {
      for (; d + 2 * L <= b1; d += 2 * L) {
        VF gx0[kN], gx1[kN], gho0, gho1;
        columns(t, d, L, d - b0, quads, gx0, gho0);
        columns(t, d + L, L, d + L - b0, quads, gx1, gho1);
        for (int i = 0; i < kN && kGradX; ++i) {
          if constexpr (GX == DType::bf16) {
            StoreBF16Pair<kHardware>(df, gx0[i], gx1[i], static_cast<uint16_t*>(o.grad_x.data) + o.grad_x.at(t, i) + d, stream);
          } else {
            StoreColumns<GX>(df, gx0[i], o.grad_x.data, o.grad_x.at(t, i) + d, L, stream);
            StoreColumns<GX>(df, gx1[i], o.grad_x.data, o.grad_x.at(t, i) + d + L, L, stream);
          }
        }
        StoreBF16Pair<kHardware>(df, gho0, gho1, static_cast<uint16_t*>(o.grad_h_out.data) + o.grad_h_out.at(t, 0) + d, stream);
      }
    }
    for (; d < b1; d += L) {
      const int64_t valid = std::min(L, b1 - d);
      VF gx[kN], gho;
      columns(t, d, valid, d - b0, quads, gx, gho);
      for (int i = 0; i < kN && kGradX; ++i) StoreColumns<GX>(df, gx[i], o.grad_x.data, o.grad_x.at(t, i) + d, valid, stream);
      StoreColumns<T>(df, gho, o.grad_h_out.data, o.grad_h_out.at(t, 0) + d, valid, stream);
    }
  };
  const int64_t group_step = 2;
  for (int64_t t = t0; t < t1; t += group_step) {
    const int group = t + 1 < t1 ? 2 : 1;
    PairSums sums[2];
    for (auto& p : sums) p = {{hn::Zero(df), hn::Zero(df)}, hn::Zero(df)};
    for (int64_t b0 = 0; b0 < D; b0 += kQuadBlock) {
      const int64_t b1 = std::min(D, b0 + kQuadBlock);
      for (int q = 0; q < group; ++q) block(t + q, b0, b1, scratch[q]);
      if (group == 2) AddQuads<2>(df, scratch, b1 - b0, b0 == 0, sums);
      else AddQuads<1>(df, scratch, b1 - b0, b0 == 0, sums);
    }
    for (int q = 0; q < group; ++q) {
      HWY_ALIGN float lanes[2][hn::MaxLanes(DF())];
      for (int64_t v = 0; v < 16 / L; ++v) hn::Store(sums[q].pairs[v], df, lanes[v]);
      if (o.grad_h_res.present())
        for (int64_t p = 0; p < 16; ++p) o.grad_h_res.at(t + q)[p] = lanes[p / L][p % L];
      hn::Store(sums[q].post, df, lanes[0]);
      for (int64_t j = 0; j < 4; ++j) o.grad_h_post.at(t + q)[j] = lanes[0][j];
    }
  }
}

#endif  // MHC_POST_QUADS

// Any N: grad_x and grad_h_out across columns, the sums over D in the
// reference's scalar loops (common::post_sums_over_d).
template <DType T, DType GX, bool kGradX>
void BackwardTokens(const PostBackwardOperands& o, int64_t t0, int64_t t1, float* gs, bool stream) {
  const DF df;
  const PostShape& s = o.shape;
  const int64_t L = hn::Lanes(df), N = s.N, D = s.D;
  HWY_ALIGN float pad[hn::MaxLanes(DF())];
  for (int64_t t = t0; t < t1; ++t) {
    const float* h_post = o.h_post.at(t);
    const float* H = s.has_h_res ? o.h_res.at(t) : nullptr;
    for (int64_t d = 0; d < D; d += L) {
      const int64_t valid = std::min(L, D - d);
      for (int64_t j = 0; j < N; ++j)
        hn::Store(LoadColumns<T>(df, o.grad_out.data, o.grad_out.at(t, j) + d, valid, pad), df, gs + j * L);
      for (int64_t i = 0; i < N && kGradX; ++i) {
        VF acc;
        if (H != nullptr) {
          acc = hn::Mul(hn::Set(df, H[i * N]), hn::Load(df, gs));
          for (int64_t j = 1; j < N; ++j) acc = hn::Add(acc, hn::Mul(hn::Set(df, H[i * N + j]), hn::Load(df, gs + j * L)));
        } else {
          acc = hn::Load(df, gs + i * L);
        }
        StoreColumns<GX>(df, acc, o.grad_x.data, o.grad_x.at(t, i) + d, valid, stream);
      }
      VF acc = hn::Mul(hn::Set(df, h_post[0]), hn::Load(df, gs));
      for (int64_t j = 1; j < N; ++j) acc = hn::Add(acc, hn::Mul(hn::Set(df, h_post[j]), hn::Load(df, gs + j * L)));
      StoreColumns<T>(df, acc, o.grad_h_out.data, o.grad_h_out.at(t, 0) + d, valid, stream);
    }
    common::post_sums_over_d(o, t);
  }
}

template <bool kHardware>
void Backward(const PostBackwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  const PostShape& s = o.shape;
  [[maybe_unused]] const int64_t L = hn::Lanes(DF());
  float* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) / 64 * 64);
  const bool stream = Streams(s, s.grad_x_dtype, o.streaming_stores);
  const bool fp32 = s.grad_x_dtype == DType::fp32, grad_x = o.grad_x.present();
#if MHC_POST_QUADS
  if (s.N == 4 && (L == 8 || L == 16)) {
    const TokenQuads quads[2] = {{base, base + 4 * kQuadBlock, base + 8 * kQuadBlock},
                                 {base + 9 * kQuadBlock, base + 13 * kQuadBlock, base + 17 * kQuadBlock}};
    WithDType(s.x_dtype, [&]<DType T>() {
      if (!grad_x) return BackwardFour<T, T, false, kHardware>(o, t0, t1, quads, stream);
      if (fp32) return BackwardFour<T, DType::fp32, true, kHardware>(o, t0, t1, quads, stream);
      BackwardFour<T, T, true, kHardware>(o, t0, t1, quads, stream);
    });
    if (stream) hwy::FlushStream();
    return;
  }
#endif
  {
    WithDType(s.x_dtype, [&]<DType T>() {
      if (!grad_x) return BackwardTokens<T, T, false>(o, t0, t1, base, stream);
      if (fp32) return BackwardTokens<T, DType::fp32, true>(o, t0, t1, base, stream);
      BackwardTokens<T, T, true>(o, t0, t1, base, stream);
    });
  }
  if (stream) hwy::FlushStream();
}

}  // namespace

[[maybe_unused]] const PostKernels kPost = {.forward_scratch_floats = ForwardScratchFloats,
                                            .backward_scratch_floats = BackwardScratchFloats,
                                            .forward = Forward<false>,
                                            .backward = Backward<false>};
#if HWY_TARGET == HWY_AVX3
// bf16 outputs rounded by vcvtne2ps2bf16, for CPUs with AVX512_BF16: the same bits,
// the forward 7 % faster (bench/ab_builds.py --op post_forward), the backward 6 % in
// L2 (mhc-kernel-bench PostBackward/avx512/T:16), 1 % streamed.
[[maybe_unused]] const PostKernels kPostHardwareBF16 = {.forward_scratch_floats = ForwardScratchFloats,
                                                        .backward_scratch_floats = BackwardScratchFloats,
                                                        .forward = Forward<true>,
                                                        .backward = Backward<true>};
#endif

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/per_target.hpp"

namespace mhc::kernels::simd {
const PostKernels* post(Isa isa, bool hardware_bf16) {
#if HWY_TARGETS & HWY_AVX3
  if (isa == Isa::avx512 && hardware_bf16) return &N_AVX3::kPostHardwareBF16;
#endif
  return MHC_SIMD_PER_TARGET(const PostKernels*, isa, kPost);
}
const PostKernels* post(Isa isa) { return post(isa, has_avx512_bf16()); }
}  // namespace mhc::kernels::simd
#endif
