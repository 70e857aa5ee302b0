// The MhcSinkhorn tables (kernels/sinkhorn.hpp, SPEC §10) of every registry entry
// this build has and this CPU runs, and of every SIMD target directly, against the
// fp32 steps' table (kernels/fp32_steps/sinkhorn.cpp), bitwise: h_res, both caches
// (the pitch padding written as 0), grad_z from the caches and from z. N 1..8 and
// 13, I 1, 2 and 20, token counts that are not multiples of the lanes, ranges
// split where the driver never splits them (and ranges of 1 to 8 tokens, as decode
// calls make), rows farther apart than N*N, and scratch off the vector boundary
// (each table aligns its own).
#include <algorithm>
#include <functional>

#include "kernels/registry.hpp"
#include "kernels/sinkhorn.hpp"
#include "kernels/tables.hpp"
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

using mhc::kernels::SinkhornBackwardOperands;
using mhc::kernels::SinkhornCaches;
using mhc::kernels::SinkhornForwardOperands;
using mhc::kernels::SinkhornKernels;
using mhc::kernels::SinkhornShape;

struct Table {
  std::string name;
  const SinkhornKernels* k;
};

// Every table to hold against the reference: the registry's entries this CPU runs
// (amx, avx512, avx2 or sve2, sve, neon; portable, reference) and the SIMD targets' own tables.
std::vector<Table> tables() {
  std::vector<Table> out;
  for (const mhc::kernels::Implementation& impl : mhc::kernels::implementations())
    if (impl.available() && impl.sinkhorn != nullptr) out.push_back({std::string("entry ") + impl.name, impl.sinkhorn});
#if defined(MHC_WITH_SIMD)
  for (mhc::Isa isa : kSimdFamilies)
    if (mhc::kernels::simd::runs(isa) && mhc::kernels::simd::sinkhorn(isa) != nullptr)
      out.push_back({std::string("simd ") + mhc::isa_name(isa), mhc::kernels::simd::sinkhorn(isa)});
#endif
  return out;
}

const SinkhornKernels& reference_table() { return mhc::kernels::fp32_steps::kSinkhorn; }

constexpr float kSentinel = -777.0f;  // cache and output floats before a call

// One problem's inputs, laid out with `row_stride` floats between tokens.
struct Problem {
  SinkhornShape shape;
  int64_t row_stride = 0;
  std::vector<float> z, grad;  // [T][row_stride]
};

Problem make_problem(int64_t T, int64_t N, int64_t I, int64_t pitch, int64_t row_pad, uint64_t seed, float scale) {
  Problem p;
  p.shape = {.T = T, .N = N, .I = I, .eps = 1e-6f, .pitch = pitch};
  p.row_stride = N * N + row_pad;
  Rng rng(seed);
  p.z.assign(size_t(T * p.row_stride), 1e30f);  // the padding is never read as data
  p.grad.assign(size_t(T * p.row_stride), 1e30f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < N * N; ++e) {
      p.z[size_t(t * p.row_stride + e)] = float(rng.normal() * scale);
      p.grad[size_t(t * p.row_stride + e)] = float(rng.normal());
    }
  // A few tokens with ties and large spreads (the max, exp underflow to 0).
  if (T > 2) {
    for (int64_t e = 0; e < N * N; ++e) p.z[size_t(1 * p.row_stride + e)] = 0.5f;
    for (int64_t e = 0; e < N * N; ++e) p.z[size_t(2 * p.row_stride + e)] = float(e % 3) * 40.0f - 40.0f;
  }
  return p;
}

struct Outputs {
  std::vector<float> h_res, norm, sum;
};

// The table's forward over [0, T) in pieces of `piece` tokens.
Outputs forward(const SinkhornKernels& k, const Problem& p, bool caches, int64_t piece, int64_t scratch_offset) {
  const SinkhornShape& s = p.shape;
  Outputs o;
  o.h_res.assign(p.z.size(), kSentinel);
  if (caches) {
    o.norm.assign(size_t(s.steps() * s.T * s.N * s.pitch), kSentinel);
    o.sum.assign(size_t(s.steps() * s.T * s.pitch), kSentinel);
  }
  SinkhornForwardOperands op;
  op.shape = s;
  op.z = {p.z.data(), p.row_stride};
  op.h_res = {o.h_res.data(), p.row_stride};
  op.caches = caches ? SinkhornCaches{o.norm.data(), o.sum.data()} : SinkhornCaches{};
  AlignedFloats scratch(size_t(k.scratch_floats(s) + scratch_offset));
  for (int64_t t0 = 0; t0 < s.T; t0 += piece)
    k.forward(op, scratch.data() + scratch_offset, t0, std::min(s.T, t0 + piece));
  return o;
}

// The table's backward, from `caches` (reference-made) or from z when null.
std::vector<float> backward(const SinkhornKernels& k, const Problem& p, const Outputs* caches, int64_t piece,
                            int64_t scratch_offset) {
  const SinkhornShape& s = p.shape;
  std::vector<float> grad_z(p.z.size(), kSentinel);
  SinkhornBackwardOperands op;
  op.shape = s;
  op.grad_h_res = {p.grad.data(), p.row_stride};
  if (caches) op.caches = {const_cast<float*>(caches->norm.data()), const_cast<float*>(caches->sum.data())};
  else op.z = {p.z.data(), p.row_stride};
  op.grad_z = {grad_z.data(), p.row_stride};
  AlignedFloats scratch(size_t(k.scratch_floats(s) + scratch_offset));
  for (int64_t t0 = 0; t0 < s.T; t0 += piece)
    k.backward(op, scratch.data() + scratch_offset, t0, std::min(s.T, t0 + piece));
  return grad_z;
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < got.size(); ++i)
    if (bits(got[i]) != bits(want[i]))
      return ::testing::AssertionFailure() << what << " differs at float " << i << ": " << got[i] << " vs reference "
                                           << want[i];
  return ::testing::AssertionSuccess();
}

struct Sweep {
  int64_t N, I, T;
};
std::vector<Sweep> sweep() {
  std::vector<Sweep> out;
  for (int64_t N : {1, 2, 3, 4, 5, 6, 7, 8, 13})
    for (int64_t I : {1, 2, 20}) out.push_back({N, I, N == 13 && I == 20 ? int64_t(19) : int64_t(37)});
  out.push_back({4, 20, 1});
  out.push_back({4, 20, 7});
  out.push_back({4, 20, 16});
  out.push_back({4, 20, 64 + 5});
  return out;
}

TEST(SinkhornTables, EveryTableHasBothKernelsAndItemsAMultipleOfItsLanes) {
  for (const Table& t : tables()) {
    SCOPED_TRACE(t.name);
    ASSERT_NE(t.k->forward, nullptr);
    ASSERT_NE(t.k->backward, nullptr);
    ASSERT_NE(t.k->scratch_floats, nullptr);
    EXPECT_GT(t.k->item_tokens, 0);
    EXPECT_EQ(t.k->item_tokens % 16, 0) << "items of a multiple of every family's lanes";
  }
  EXPECT_GE(tables().size(), size_t(2)) << "portable and reference at least";
}

TEST(SinkhornTables, ForwardAndCachesBitwiseEqualTheReference) {
  const std::vector<Table> all = tables();
  for (const Sweep& w : sweep())
    for (int64_t pitch : {w.N, 8 * ((w.N + 7) / 8)})
      for (int64_t row_pad : {int64_t(0), int64_t(3)}) {
        const Problem p = make_problem(w.T, w.N, w.I, pitch, row_pad, uint64_t(w.N * 1000 + w.I * 10 + row_pad), 2.0f);
        const Outputs want = forward(reference_table(), p, true, p.shape.T, 0);
        const Outputs want_plain = forward(reference_table(), p, false, p.shape.T, 0);
        ASSERT_TRUE(same_bits(want_plain.h_res, want.h_res, "reference h_res without caches"));
        for (const Table& t : all)
          for (int64_t piece : {int64_t(64), int64_t(5), int64_t(2)}) {
            SCOPED_TRACE(t.name + " N " + std::to_string(w.N) + " I " + std::to_string(w.I) + " T " +
                         std::to_string(w.T) + " pitch " + std::to_string(pitch) + " row_pad " +
                         std::to_string(row_pad) + " piece " + std::to_string(piece));
            const Outputs got = forward(*t.k, p, true, piece, piece == 5 ? 1 : 0);
            ASSERT_TRUE(same_bits(got.h_res, want.h_res, "h_res"));
            ASSERT_TRUE(same_bits(got.norm, want.norm, "norm_out"));
            ASSERT_TRUE(same_bits(got.sum, want.sum, "sum_out"));
            const Outputs plain = forward(*t.k, p, false, piece, 0);
            ASSERT_TRUE(same_bits(plain.h_res, want.h_res, "h_res without caches"));
          }
        // The layout mhc.hpp states: slot 0 p (rows summing to 1), padding 0.
        const int64_t N = w.N, T = w.T, S = p.shape.steps();
        for (int64_t k = 0; k < S; ++k)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < N; ++i) {
              for (int64_t j = N; j < pitch; ++j)
                ASSERT_EQ(bits(want.norm[size_t(((k * T + t) * N + i) * pitch + j)]), 0u) << "norm_out padding";
              if (k == S - 1) {
                for (int64_t j = 0; j < N; ++j)
                  ASSERT_EQ(bits(want.norm[size_t(((k * T + t) * N + i) * pitch + j)]),
                            bits(want.h_res[size_t(t * p.row_stride + i * N + j)]))
                      << "the last slot is H";
              }
            }
        for (int64_t k = 0; k < S; ++k)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t i = N; i < pitch; ++i) ASSERT_EQ(bits(want.sum[size_t((k * T + t) * pitch + i)]), 0u);
        // The row padding of h_res is never written.
        for (int64_t t = 0; t < T; ++t)
          for (int64_t e = N * N; e < p.row_stride; ++e) ASSERT_EQ(want.h_res[size_t(t * p.row_stride + e)], kSentinel);
      }
}

TEST(SinkhornTables, BackwardFromCachesAndFromZBitwiseEqualTheReference) {
  const std::vector<Table> all = tables();
  for (const Sweep& w : sweep())
    for (int64_t pitch : {w.N, 8 * ((w.N + 7) / 8)}) {
      const int64_t row_pad = w.N % 2;
      const Problem p = make_problem(w.T, w.N, w.I, pitch, row_pad, uint64_t(w.N * 7 + w.I * 131 + pitch), 1.5f);
      const Outputs caches = forward(reference_table(), p, true, p.shape.T, 0);
      const std::vector<float> want = backward(reference_table(), p, &caches, p.shape.T, 0);
      ASSERT_TRUE(same_bits(backward(reference_table(), p, nullptr, p.shape.T, 0), want,
                            "reference grad_z from z vs from the caches"));
      for (int64_t t = 0; t < w.T; ++t)
        for (int64_t e = w.N * w.N; e < p.row_stride; ++e) ASSERT_EQ(want[size_t(t * p.row_stride + e)], kSentinel);
      for (const Table& t : all)
        for (int64_t piece : {int64_t(64), int64_t(3)}) {
          SCOPED_TRACE(t.name + " N " + std::to_string(w.N) + " I " + std::to_string(w.I) + " T " +
                       std::to_string(w.T) + " pitch " + std::to_string(pitch) + " piece " + std::to_string(piece));
          // The table's own caches equal the reference's (the forward test), so reading
          // the reference's is reading its own.
          ASSERT_TRUE(same_bits(backward(*t.k, p, &caches, piece, piece == 3 ? 1 : 0), want, "grad_z from caches"));
          ASSERT_TRUE(same_bits(backward(*t.k, p, nullptr, piece, piece == 3 ? 1 : 0), want, "grad_z from z"));
        }
    }
}

// Non-finite and extreme logits: NaN rows, +-Inf, eps 0 and large; the same bits.
TEST(SinkhornTables, NonFiniteLogitsAndOtherEpsGiveTheReferenceBits) {
  const std::vector<Table> all = tables();
  for (float eps : {0.0f, 1e-6f, 0.25f})
    for (int64_t N : {3, 4, 8}) {
      Problem p = make_problem(21, N, 3, N, 0, uint64_t(N + 99), 3.0f);
      p.shape.eps = eps;
      p.z[size_t(3 * p.row_stride)] = NAN;
      p.z[size_t(4 * p.row_stride + 1)] = INFINITY;
      p.z[size_t(5 * p.row_stride + 2)] = -INFINITY;
      for (int64_t e = 0; e < N; ++e) p.z[size_t(6 * p.row_stride + e)] = -INFINITY;  // a row of -Inf
      p.z[size_t(7 * p.row_stride)] = 1e30f;
      p.grad[size_t(8 * p.row_stride + 1)] = INFINITY;
      const Outputs want = forward(reference_table(), p, true, p.shape.T, 0);
      const std::vector<float> want_grad = backward(reference_table(), p, &want, p.shape.T, 0);
      for (const Table& t : all) {
        SCOPED_TRACE(t.name + " eps " + std::to_string(eps) + " N " + std::to_string(N));
        const Outputs got = forward(*t.k, p, true, 64, 0);
        // NaN payloads may differ by instruction; compare NaN-ness, else bits.
        auto same = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
          for (size_t i = 0; i < a.size(); ++i) {
            if (std::isnan(a[i]) && std::isnan(b[i])) continue;
            if (bits(a[i]) != bits(b[i]))
              return ::testing::AssertionFailure() << what << " at " << i << ": " << a[i] << " vs " << b[i];
          }
          return ::testing::AssertionSuccess();
        };
        ASSERT_TRUE(same(got.h_res, want.h_res, "h_res"));
        for (int64_t piece : {int64_t(1), int64_t(3), int64_t(8), int64_t(64)})  // decode-sized calls too
          ASSERT_TRUE(same(forward(*t.k, p, false, piece, 0).h_res, want.h_res, "h_res without caches"));
        ASSERT_TRUE(same(got.norm, want.norm, "norm_out"));
        ASSERT_TRUE(same(got.sum, want.sum, "sum_out"));
        ASSERT_TRUE(same(backward(*t.k, p, &want, 64, 0), want_grad, "grad_z from caches"));
        ASSERT_TRUE(same(backward(*t.k, p, nullptr, 7, 0), want_grad, "grad_z from z"));
      }
    }
}

}  // namespace
}  // namespace mhc_kernel_test
