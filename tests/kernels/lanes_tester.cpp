// Lane folds and rounding stores (vec-inl.h) on every SIMD target, and the
// portable family's 16-lane dot (portable/blocked_sum.hpp), against their
// stated orders, bitwise.
#include "core/dtype.hpp"
#include "kernels/portable/blocked_sum.hpp"
#include "targets.hpp"

namespace mhc_kernel_test {
namespace {

// Upper half onto lower half until one lane is left (fold16's tree for 16 lanes).
float fold_by_halves(std::vector<float> lanes) {
  for (size_t width = lanes.size() / 2; width >= 1; width /= 2)
    for (size_t l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
}

TEST(FoldLanes, UpperHalfOntoLowerHalf) {
  MHC_FOR_EACH_SIMD_TARGET(m) {
    Rng rng(3);
    for (int round = 0; round < 200; ++round) {
      std::vector<float> lanes(size_t(m->lanes));
      for (float& v : lanes) v = rng.uniform(-1e4f, 1e4f) * (round % 2 ? 1e-4f : 1.0f);
      ASSERT_EQ(bits(m->fold_lanes(lanes.data())), bits(fold_by_halves(lanes))) << m->target << " round " << round;
    }
  }
}

// Values around every rounding case: ties, carries into the exponent, the
// largest finite values, subnormals, Inf and NaN (signalling and quiet).
std::vector<float> rounding_cases() {
  std::vector<float> out;
  const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f7fffffu, 0x7f7fffffu, 0x477ff000u,
                               0x477fefffu, 0x00000001u, 0x00400000u, 0x38800000u, 0x387fe000u, 0x33000000u,
                               0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa00000u, 0x80000000u,
                               0x00000000u, 0x3f801000u, 0x3f802000u, 0x3f803000u, 0x33800001u, 0x477fe000u};
  for (uint32_t p : patterns) {
    float f;
    std::memcpy(&f, &p, 4);
    out.push_back(f);
  }
  Rng rng(11);
  while (out.size() % 16 != 0 || out.size() < 256) {
    const uint32_t p = uint32_t(rng.next());
    float f;
    std::memcpy(&f, &p, 4);
    out.push_back(f);
  }
  return out;
}

TEST(StoreRounded, MatchesTheScalarConversionsBitForBit) {
  const std::vector<float> in = rounding_cases();
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      std::vector<uint32_t> got(in.size()), want(in.size());
      m->store_rounded(dtype, in.data(), int64_t(in.size()), got.data());
      for (size_t i = 0; i < in.size(); ++i) mhc::core::store_element(want.data(), dtype, int64_t(i), in[i]);
      ASSERT_EQ(got, want) << m->target << " " << mhc::core::dtype_name(dtype);
    }
  }
}

// StoreBF16Pair's integer steps and, where the CPU has AVX512_BF16, its
// vcvtne2ps2bf16 form (which flushes subnormal inputs, so their pairs take the
// steps): the scalar conversion's bits for every rounding case, each case also
// alone among ordinary values (a pair with one subnormal lane).
TEST(StoreBF16Pair, MatchesTheScalarConversionBitForBit) {
  std::vector<float> in = rounding_cases();
  for (size_t i = 0; i < 64; ++i) {
    in.push_back(in[i]);
    for (int k = 1; k < 64; ++k) in.push_back(1.0f + float(k) / 64);
  }
  std::vector<uint16_t> want(in.size());
  for (size_t i = 0; i < in.size(); ++i) mhc::core::store_element(want.data(), DType::bf16, int64_t(i), in[i]);
  MHC_FOR_EACH_SIMD_TARGET(m) {
    for (auto [name, store] : {std::pair{"integer steps", m->store_bf16_pairs},
                               std::pair{"vcvtne2ps2bf16", m->store_bf16_pairs_hardware}}) {
      if (store == nullptr) continue;
      const size_t whole = in.size() / size_t(2 * m->lanes) * size_t(2 * m->lanes);
      std::vector<uint16_t> got(whole);
      store(in.data(), int64_t(whole), got.data());
      ASSERT_EQ(got, std::vector<uint16_t>(want.begin(), want.begin() + std::ptrdiff_t(whole)))
          << m->target << " " << name;
    }
  }
}

TEST(PortableDot, SixteenLanesInOrderThenTheFoldTree) {
  Rng rng(5);
  for (int64_t n : {0, 1, 15, 16, 17, 100, 1031}) {
    for (int64_t stride : {1, 3}) {
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n * stride + 1));
      for (float& v : a) v = rng.uniform(-1, 1);
      for (float& v : b) v = rng.uniform(-1, 1);
      float lanes[16] = {};
      for (int64_t i = 0; i < n; ++i) lanes[i % 16] += a[size_t(i)] * b[size_t(i * stride)];  // unfused
      const float want = mhc::kernels::common::fold16(lanes);
      ASSERT_EQ(bits(mhc::kernels::portable::dot(a.data(), b.data(), stride, n)), bits(want)) << "n " << n;
    }
  }
}

}  // namespace
}  // namespace mhc_kernel_test
