// The engines' RMSNorm microkernel (kernels/rms_norm.hpp) in plain C++, one
// instance per (x dtype, weight dtype) so that the loops hold no dtype switch.
#include "kernels/rms_norm.hpp"

#include <cmath>

namespace mhc::kernels {
namespace {

template <DType X, DType W>
void rms_norm_row(const void* h, const void* weight, float eps, int64_t D, void* y) {
  float lanes[16] = {};
  for (int64_t j = 0; j < D; ++j) {
    const float v = core::load_element(h, X, j);
    lanes[j % 16] += v * v;
  }
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  const float ms = lanes[0] / float(D);
  const float inv = 1.0f / std::sqrt(ms + eps);
  for (int64_t j = 0; j < D; ++j)
    core::store_element(y, X, j, (core::load_element(h, X, j) * inv) * core::load_element(weight, W, j));
}

template <DType X>
void rms_norm_row(const void* h, const void* weight, DType weight_dtype, float eps, int64_t D, void* y) {
  if (weight_dtype == DType::fp32) return rms_norm_row<X, DType::fp32>(h, weight, eps, D, y);
  return rms_norm_row<X, X>(h, weight, eps, D, y);
}

}  // namespace

void rms_norm_token(const void* h, DType dtype, const void* weight, DType weight_dtype, float eps, int64_t D,
                    void* y) {
  switch (dtype) {
    case DType::bf16: return rms_norm_row<DType::bf16>(h, weight, weight_dtype, eps, D, y);
    case DType::fp16: return rms_norm_row<DType::fp16>(h, weight, weight_dtype, eps, D, y);
    case DType::fp32: return rms_norm_row<DType::fp32>(h, weight, weight_dtype, eps, D, y);
  }
}

}  // namespace mhc::kernels
