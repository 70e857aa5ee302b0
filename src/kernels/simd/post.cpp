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

#include "hwy/highway.h"
#include "kernels/simd/vec-inl.h"
#include "kernels/tables.hpp"

HWY_BEFORE_NAMESPACE();
namespace mhc::kernels::simd::HWY_NAMESPACE {
namespace {

constexpr int64_t kQuadBlock = 256;  // columns per transposed block of the backward's pair sums

// Lanes elements of row `row` at column d (a full vector), or the valid ones of a
// partial vector zero-padded through `pad` (raw elements).
template <DType T>
HWY_INLINE VF LoadColumns(DF df, const void* base, int64_t offset, int64_t valid, void* pad) {
  if (valid == int64_t(hn::Lanes(df))) return LoadT<T>(df, base, offset);
  CopyRow<T>(df, base, offset, 1, valid, pad, 0);
  return LoadT<T>(df, pad, 0);
}
HWY_INLINE void StoreColumns(DF df, VF v, void* base, DType type, int64_t offset, int64_t valid) {
  if (valid == int64_t(hn::Lanes(df))) return StoreAs(df, v, base, type, offset);
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(v, df, lanes);
  for (int64_t i = 0; i < valid; ++i) core::store_element(base, type, offset + i, lanes[i]);
}

int64_t ForwardScratchFloats(const PostShape& s) { return s.N * int64_t(hn::Lanes(DF())) + 64; }

void Forward(const PostForwardOperands& o, float* scratch, int64_t t0, int64_t t1, int64_t d0, int64_t d1) {
  const DF df;
  const PostShape& s = o.shape;
  const int64_t L = hn::Lanes(df), N = s.N;
  float* xs = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) / 64 * 64);  // [N][L]
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
          StoreColumns(df, acc, o.out.data, T, o.out.at(t, j) + d, valid);
        }
      }
    }
  });
}

// Per worker: g [N][L], the quads of x and g [kQuadBlock][4] each, h_out [kQuadBlock].
int64_t BackwardScratchFloats(const PostShape& s) {
  return s.N * int64_t(hn::Lanes(DF())) + 9 * kQuadBlock + 64;
}

// grad_h_res and grad_h_post of one token, N = 4, from its quads of columns
// [0, count): acc_pairs[v] lane l is pair (i, j) = (v * L/4 + l/4, l%4); acc_post
// lanes 0..3 are j (the other lanes repeat them).
struct PairSums {
  VF pairs[4];
  VF post;
};
HWY_INLINE void AddQuads(DF df, const float* x_quads, const float* g_quads, const float* h_out, int64_t count,
                         PairSums* sums) {
  const int64_t L = hn::Lanes(df), vectors = 16 / L;
  using TI = hn::TFromD<hn::RebindToSigned<DF>>;
  HWY_ALIGN TI index[4][hn::MaxLanes(DF())];
  for (int64_t v = 0; v < vectors; ++v)
    for (int64_t l = 0; l < L; ++l) index[v][l] = TI((v * L / 4 + l / 4) % 4);
  const auto idx0 = hn::SetTableIndices(df, index[0]);
  if (vectors == 1) {
    VF acc = sums->pairs[0], post = sums->post;
    for (int64_t d = 0; d < count; ++d) {
      const VF x = hn::LoadDup128(df, x_quads + 4 * d), g = hn::LoadDup128(df, g_quads + 4 * d);
      acc = hn::Add(acc, hn::Mul(hn::TableLookupLanes(x, idx0), g));
      post = hn::Add(post, hn::Mul(hn::Set(df, h_out[d]), g));
    }
    sums->pairs[0] = acc, sums->post = post;
    return;
  }
  const auto idx1 = hn::SetTableIndices(df, index[1]);
  VF acc0 = sums->pairs[0], acc1 = sums->pairs[1], post = sums->post;
  if (vectors == 2) {
    for (int64_t d = 0; d < count; ++d) {
      const VF x = hn::LoadDup128(df, x_quads + 4 * d), g = hn::LoadDup128(df, g_quads + 4 * d);
      acc0 = hn::Add(acc0, hn::Mul(hn::TableLookupLanes(x, idx0), g));
      acc1 = hn::Add(acc1, hn::Mul(hn::TableLookupLanes(x, idx1), g));
      post = hn::Add(post, hn::Mul(hn::Set(df, h_out[d]), g));
    }
    sums->pairs[0] = acc0, sums->pairs[1] = acc1, sums->post = post;
  }
}

void Backward(const PostBackwardOperands& o, float* scratch, int64_t t0, int64_t t1) {
  const DF df;
  const PostShape& s = o.shape;
  const int64_t L = hn::Lanes(df), N = s.N, D = s.D;
  float* gs = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) / 64 * 64);  // [N][L]
  float* x_quads = gs + N * L;                // [kQuadBlock][4]
  float* g_quads = x_quads + 4 * kQuadBlock;  // [kQuadBlock][4]
  float* h_block = g_quads + 4 * kQuadBlock;  // [kQuadBlock]
  const bool quads = N == 4 && (L == 8 || L == 16);
  WithDType(s.x_dtype, [&]<DType T>() {
    HWY_ALIGN float pad[hn::MaxLanes(DF())];
    for (int64_t t = t0; t < t1; ++t) {
      const float* h_post = o.h_post.at(t);
      const float* H = s.has_h_res ? o.h_res.at(t) : nullptr;
      PairSums sums{{hn::Zero(df), hn::Zero(df), hn::Zero(df), hn::Zero(df)}, hn::Zero(df)};
      for (int64_t b0 = 0; b0 < D; b0 += kQuadBlock) {
        const int64_t b1 = std::min(D, b0 + kQuadBlock);
        for (int64_t d = b0; d < b1; d += L) {
          const int64_t valid = std::min(L, b1 - d);
          for (int64_t j = 0; j < N; ++j)
            hn::Store(LoadColumns<T>(df, o.grad_out.data, o.grad_out.at(t, j) + d, valid, pad), df, gs + j * L);
          for (int64_t i = 0; i < N; ++i) {
            VF acc;
            if (H != nullptr) {
              acc = hn::Zero(df);
              for (int64_t j = 0; j < N; ++j) acc = hn::Add(acc, hn::Mul(hn::Set(df, H[i * N + j]), hn::Load(df, gs + j * L)));
            } else {
              acc = hn::Load(df, gs + i * L);
            }
            StoreColumns(df, acc, o.grad_x.data, s.grad_x_dtype, o.grad_x.at(t, i) + d, valid);
          }
          VF acc = hn::Zero(df);
          for (int64_t j = 0; j < N; ++j) acc = hn::Add(acc, hn::Mul(hn::Set(df, h_post[j]), hn::Load(df, gs + j * L)));
          StoreColumns(df, acc, o.grad_h_out.data, T, o.grad_h_out.at(t, 0) + d, valid);
          if (quads) {  // this vector's columns as quads, for the pair sums
            const VF h = LoadColumns<T>(df, o.h_out.data, o.h_out.at(t, 0) + d, valid, pad);
            hn::StoreU(h, df, h_block + (d - b0));
            const VF x0 = LoadColumns<T>(df, o.x.data, o.x.at(t, 0) + d, valid, pad);
            const VF x1 = LoadColumns<T>(df, o.x.data, o.x.at(t, 1) + d, valid, pad);
            const VF x2 = LoadColumns<T>(df, o.x.data, o.x.at(t, 2) + d, valid, pad);
            const VF x3 = LoadColumns<T>(df, o.x.data, o.x.at(t, 3) + d, valid, pad);
            hn::StoreInterleaved4(x0, x1, x2, x3, df, x_quads + 4 * (d - b0));
            hn::StoreInterleaved4(hn::Load(df, gs), hn::Load(df, gs + L), hn::Load(df, gs + 2 * L),
                                  hn::Load(df, gs + 3 * L), df, g_quads + 4 * (d - b0));
          }
        }
        if (quads) AddQuads(df, x_quads, g_quads, h_block, b1 - b0, &sums);
      }
      if (quads) {
        HWY_ALIGN float lanes[4][hn::MaxLanes(DF())];
        for (int64_t v = 0; v < 16 / L; ++v) hn::Store(sums.pairs[v], df, lanes[v]);
        if (o.grad_h_res.present())
          for (int64_t p = 0; p < 16; ++p) o.grad_h_res.at(t)[p] = lanes[p / L][p % L];
        hn::Store(sums.post, df, lanes[0]);
        for (int64_t j = 0; j < 4; ++j) o.grad_h_post.at(t)[j] = lanes[0][j];
        continue;
      }
      // Other N: the reference's scalar sums in d order.
      auto g = [&](int64_t j, int64_t d) { return core::load_element(o.grad_out.data, T, o.grad_out.at(t, j) + d); };
      if (o.grad_h_res.present())
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < N; ++j) {
            float acc = 0.0f;
            for (int64_t d = 0; d < D; ++d) acc = acc + core::load_element(o.x.data, T, o.x.at(t, i) + d) * g(j, d);
            o.grad_h_res.at(t)[i * N + j] = acc;
          }
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0.0f;
        for (int64_t d = 0; d < D; ++d) acc = acc + core::load_element(o.h_out.data, T, o.h_out.at(t, 0) + d) * g(j, d);
        o.grad_h_post.at(t)[j] = acc;
      }
    }
  });
}

}  // namespace

[[maybe_unused]] const PostKernels kPost = {.forward_scratch_floats = ForwardScratchFloats,
                                            .backward_scratch_floats = BackwardScratchFloats,
                                            .forward = Forward,
                                            .backward = Backward};

}  // namespace mhc::kernels::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mhc::kernels::simd {
const PostKernels* post(Isa isa) {
#if HWY_TARGETS & HWY_AVX3
  if (isa == Isa::avx512) return &N_AVX3::kPost;
#endif
#if HWY_TARGETS & HWY_AVX2
  if (isa == Isa::avx2) return &N_AVX2::kPost;
#endif
  return nullptr;
}
}  // namespace mhc::kernels::simd
#endif
