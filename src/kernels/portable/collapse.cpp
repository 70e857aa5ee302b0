// MhcCollapse's microkernels (kernels/collapse.hpp) in plain C++.
#include "kernels/collapse.hpp"

namespace mhc::kernels {
namespace {

// Elements of one dtype as fp32, the dtype chosen once per row.
template <class Fn>
void with_loader(DType dtype, Fn fn) {
  switch (dtype) {
    case DType::bf16:
      return fn([](const void* p, int64_t i) { return core::bf16_to_float(static_cast<const uint16_t*>(p)[i]); });
    case DType::fp16:
      return fn([](const void* p, int64_t i) { return core::fp16_to_float(static_cast<const uint16_t*>(p)[i]); });
    default:
      return fn([](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; });
  }
}

const void* at(const void* base, DType dtype, int64_t offset) {
  return static_cast<const char*>(base) + offset * core::element_size(dtype);
}

}  // namespace

void collapse_token(const void* x, int64_t stream_stride, DType dtype, const float* w, int64_t N, int64_t D,
                    void* h, float* acc) {
  for (int64_t j = 0; j < D; ++j) acc[j] = 0.0f;
  with_loader(dtype, [&](auto load) {
    for (int64_t n = 0; n < N; ++n) {
      const void* row = at(x, dtype, n * stream_stride);
      const float weight = w[n];
      for (int64_t j = 0; j < D; ++j) acc[j] += weight * load(row, j);
    }
  });
  for (int64_t j = 0; j < D; ++j) core::store_element(h, dtype, j, acc[j]);
}

void collapse_backward_token(const void* grad_h, const void* x, int64_t stream_stride, DType dtype,
                             const float* w, int64_t N, int64_t D, void* grad_x, int64_t grad_stream_stride,
                             float* grad_w, float* g) {
  with_loader(dtype, [&](auto load) {
    for (int64_t j = 0; j < D; ++j) g[j] = load(grad_h, j);
    for (int64_t n = 0; n < N; ++n) {
      const void* row = at(x, dtype, n * stream_stride);
      float lanes[16] = {};
      for (int64_t j = 0; j < D; ++j) lanes[j % 16] += load(row, j) * g[j];
      for (int width = 8; width >= 1; width /= 2)
        for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
      grad_w[n] = lanes[0];
      const float weight = w[n];
      for (int64_t j = 0; j < D; ++j) core::store_element(grad_x, dtype, n * grad_stream_stride + j, weight * g[j]);
    }
  });
}

}  // namespace mhc::kernels
