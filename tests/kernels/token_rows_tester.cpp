// The forward's row microkernels (token_rows-inl.h) against their stated order,
// bitwise: ScaleRow's u = v * gamma and its fused per-lane v*v; WeightedRows'
// fused chain over n ascending from zero, rounded once to the dtype.
#include <cmath>
#include <limits>

#include "core/dtype.hpp"
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

std::vector<uint16_t> halves(DType dtype, const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) mhc::core::store_element(out.data(), dtype, int64_t(i), values[i]);
  return out;
}

// x in `dtype` (values exactly representable), as fp32 for the models.
struct Row {
  std::vector<float> f32;
  std::vector<uint16_t> h16;
  const void* data(DType dtype) const { return dtype == DType::fp32 ? static_cast<const void*>(f32.data()) : h16.data(); }
};
Row random_row(DType dtype, int64_t n, Rng& rng) {
  Row r;
  r.f32.resize(size_t(n));
  for (float& v : r.f32) v = rng.uniform(-3, 3);
  if (dtype != DType::fp32) {
    r.h16 = halves(dtype, r.f32);
    for (int64_t i = 0; i < n; ++i) r.f32[size_t(i)] = mhc::core::load_element(r.h16.data(), dtype, i);
  }
  return r;
}

TEST(ScaleRow, ScalesByGammaAndSumsSquaresInOrder) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
      for (bool with_gamma : {false, true})
        for (int64_t count : {int64_t(m->lanes), int64_t(5 * m->lanes + 3), int64_t(2)}) {
          SCOPED_TRACE(std::string(m->target) + " " + mhc::core::dtype_name(dtype) + " count " + std::to_string(count));
          Rng rng(uint64_t(count * 7 + int(dtype) + with_gamma));
          const Row x = random_row(dtype, count, rng);
          std::vector<float> gamma(static_cast<size_t>(count)), sq(static_cast<size_t>(m->lanes)), u(static_cast<size_t>(count), -1.0f);
          for (float& g : gamma) g = rng.uniform(0.5f, 1.5f);
          for (float& s : sq) s = rng.uniform(0, 2);
          std::vector<float> want_sq = sq;
          const int64_t done = m->scale_row(dtype, x.data(dtype), with_gamma ? gamma.data() : nullptr, count, u.data(),
                                            sq.data());
          ASSERT_EQ(done, count / m->lanes * m->lanes);
          for (int64_t j = 0; j < done; ++j) {
            const float v = x.f32[size_t(j)];
            ASSERT_EQ(bits(u[size_t(j)]), bits(with_gamma ? v * gamma[size_t(j)] : v)) << "u[" << j << "]";
            want_sq[size_t(j % m->lanes)] = std::fma(v, v, want_sq[size_t(j % m->lanes)]);
          }
          for (int64_t j = done; j < count; ++j) ASSERT_EQ(u[size_t(j)], -1.0f) << "past the whole vectors";
          for (int l = 0; l < m->lanes; ++l) ASSERT_EQ(bits(sq[size_t(l)]), bits(want_sq[size_t(l)])) << "lane " << l;
        }
  }
}

TEST(WeightedRows, FusedChainOverStreamsRoundedOnce) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32})
      for (int64_t N : {1, 4, 7})
        for (int64_t vectors : {1, 2, 3, 6})  // bf16 with N = 4 goes two vectors at a time, then one
          for (bool stream : {false, true}) {
            SCOPED_TRACE(std::string(m->target) + " " + mhc::core::dtype_name(dtype) + " N " + std::to_string(N) +
                         " vectors " + std::to_string(vectors) + (stream ? " streamed" : ""));
            const int64_t count = vectors * m->lanes, n_stride = count + 5;  // rows off every vector boundary
            Rng rng(uint64_t(N * 31 + int(dtype) + vectors * 1009));
            const Row x = random_row(dtype, N * n_stride, rng);
            std::vector<float> h_pre(static_cast<size_t>(N));
            for (float& h : h_pre) h = rng.uniform(0, 1);
            // out on a whole-vector boundary (a streaming store's), 16 bytes past it when not streamed
            std::vector<uint32_t> storage(size_t(count + 64), 0xdeadbeefu);
            char* base = reinterpret_cast<char*>(storage.data());
            base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64 + (stream ? 0 : 16);
            m->weighted_rows(dtype, x.data(dtype), n_stride, h_pre.data(), N, count, base, stream);
            for (int64_t j = 0; j < count; ++j) {
              float acc = 0.0f;
              for (int64_t n = 0; n < N; ++n) acc = std::fma(h_pre[size_t(n)], x.f32[size_t(n * n_stride + j)], acc);
              uint32_t want = 0;
              mhc::core::store_element(&want, dtype, 0, acc);
              uint32_t got = 0;
              std::memcpy(&got, base + j * mhc::core::element_size(dtype), size_t(mhc::core::element_size(dtype)));
              ASSERT_EQ(got, want) << "column " << j;
            }
            uint32_t past = 0;
            std::memcpy(&past, base + count * mhc::core::element_size(dtype), sizeof past);
            ASSERT_EQ(past, 0xdeadbeefu) << "past the count";
          }
  }
}

// Sums that land exactly halfway between two bf16 values (1 + k/128 + 1/256: even
// k rounds down, odd up, k = 127 carries into the exponent), NaN and infinities, in
// even and odd columns (the two halves of a 32-bit lane where bf16 goes in pairs).
TEST(WeightedRows, RoundsTiesToEvenAndKeepsNaNInEveryColumn) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (int64_t vectors : {1, 2, 3}) {
      SCOPED_TRACE(std::string(m->target) + " vectors " + std::to_string(vectors));
      const int64_t N = 4, count = vectors * m->lanes, n_stride = count + 1;
      std::vector<float> values(size_t(N * n_stride), 0.0f);
      for (int64_t j = 0; j < count; ++j) {
        values[size_t(j)] = 1.0f + float((j * 37) % 128) / 128.0f;
        values[size_t(n_stride + j)] = 1.0f / 256.0f;
      }
      const float specials[] = {std::nanf(""), -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::infinity()};
      for (int64_t j = 0; j < std::min<int64_t>(count, 6); ++j) values[size_t(2 * n_stride + j * count / 6)] = specials[j % 3];
      const std::vector<uint16_t> x = halves(DType::bf16, values);
      const float h_pre[4] = {1.0f, 1.0f, 0.5f, 0.25f};
      std::vector<uint16_t> out(size_t(count), 0xbeefu);
      m->weighted_rows(DType::bf16, x.data(), n_stride, h_pre, N, count, out.data(), false);
      for (int64_t j = 0; j < count; ++j) {
        float acc = 0.0f;
        for (int64_t n = 0; n < N; ++n)
          acc = std::fma(h_pre[n], mhc::core::load_element(x.data(), DType::bf16, n * n_stride + j), acc);
        ASSERT_EQ(out[size_t(j)], halves(DType::bf16, {acc})[0]) << "column " << j;
      }
    }
  }
}

}  // namespace
}  // namespace mhc_kernel_test
