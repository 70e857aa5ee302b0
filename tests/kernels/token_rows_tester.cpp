// The forward's row microkernels (token_rows-inl.h) against their stated order,
// bitwise: ScaleRow's u = v * gamma and its fused per-lane v*v; WeightedRows'
// fused chain over n ascending from zero, rounded once to the dtype.
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
      for (int64_t N : {1, 4, 7}) {
        SCOPED_TRACE(std::string(m->target) + " " + mhc::core::dtype_name(dtype) + " N " + std::to_string(N));
        const int64_t count = 3 * m->lanes, n_stride = count + 5;
        Rng rng(uint64_t(N * 31 + int(dtype)));
        const Row x = random_row(dtype, N * n_stride, rng);
        std::vector<float> h_pre(static_cast<size_t>(N));
        for (float& h : h_pre) h = rng.uniform(0, 1);
        std::vector<uint32_t> out(size_t(count), 0xdeadbeefu);
        m->weighted_rows(dtype, x.data(dtype), n_stride, h_pre.data(), N, count, out.data());
        for (int64_t j = 0; j < count; ++j) {
          float acc = 0.0f;
          for (int64_t n = 0; n < N; ++n) acc = std::fma(h_pre[size_t(n)], x.f32[size_t(n * n_stride + j)], acc);
          uint32_t want = 0;
          mhc::core::store_element(&want, dtype, 0, acc);
          uint32_t got = 0;
          std::memcpy(&got, reinterpret_cast<const char*>(out.data()) + j * mhc::core::element_size(dtype),
                      size_t(mhc::core::element_size(dtype)));
          ASSERT_EQ(got, want) << "column " << j;
        }
      }
  }
}

}  // namespace
}  // namespace mhc_kernel_test
