// The kernel targets compiled into this build that this CPU runs, for the
// microkernel testers: each tester runs its kind on every one, in one process.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/rng.hpp"
#include "kernels/registry.hpp"
#include "kernels/simd/microkernels.hpp"
#include "mhc/mhc.hpp"

namespace mhc_kernel_test {

using mhc::DType;
using mhc::kernels::simd::Microkernels;

// Every SIMD family of any architecture, best first (those this build lacks have no tables).
inline constexpr mhc::Isa kSimdFamilies[] = {mhc::Isa::avx512, mhc::Isa::avx2, mhc::Isa::sve2, mhc::Isa::sve,
                                             mhc::Isa::neon};

// The SIMD targets' tables this CPU runs, best first.
inline std::vector<const Microkernels*> simd_targets() {
#if defined(MHC_WITH_SIMD)
  return mhc::kernels::simd::runnable_microkernels();
#else
  return {};
#endif
}

using mhc_test::Rng;

// floats on a 64-byte boundary (the vector loads some microkernels ask for).
class AlignedFloats {
 public:
  explicit AlignedFloats(size_t n) : storage_(n + 16), data_(storage_.data()) {
    while (reinterpret_cast<uintptr_t>(data_) % 64 != 0) ++data_;
    size_ = n;
  }
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  float& operator[](size_t i) { return data_[i]; }
  const float& operator[](size_t i) const { return data_[i]; }
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  std::vector<float> copy() const { return {data_, data_ + size_}; }

 private:
  std::vector<float> storage_;
  float* data_;
  size_t size_ = 0;
};

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Runs body(target) for every SIMD target; skips (saying why) where there is none.
#define MHC_FOR_EACH_SIMD_TARGET(m)                                                         \
  const auto targets_ = ::mhc_kernel_test::simd_targets();                                  \
  if (targets_.empty()) GTEST_SKIP() << "no SIMD target compiled in or run by this CPU";   \
  for (const ::mhc_kernel_test::Microkernels* m : targets_)

}  // namespace mhc_kernel_test
