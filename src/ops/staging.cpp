// The staged copies of non-unit-stride operands (staging.hpp).
#include "ops/staging.hpp"

#include <cstring>

#include "kernels/common/hf32.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops {
namespace {

int64_t elements(const core::Strided& s) { return s.shape[0] * s.shape[1] * s.shape[2] * s.shape[3]; }

// Row-major strides of the same shape.
core::Strided contiguous(const core::Strided& s, void* data) {
  core::Strided c = s;
  c.data = data;
  c.stride[3] = 1;
  c.stride[2] = s.shape[3];
  c.stride[1] = s.shape[2] * s.shape[3];
  c.stride[0] = s.shape[1] * c.stride[1];
  return c;
}

// Every element of `from` copied to `to` (same shape), outer rows split over the
// threads; fp32 values rounded on the way when asked.
void copy(const core::Strided& from, const core::Strided& to, int threads, Rounding rounding = Rounding::none) {
  const int64_t rows = from.shape[0] * from.shape[1] * from.shape[2], size = core::element_size(from.dtype);
  const char* src = static_cast<const char*>(from.data);
  char* dst = static_cast<char*>(to.data);
  runtime::parallel_for(rows, threads, [&](int64_t row, int) {
    const int64_t i2 = row % from.shape[2], i1 = (row / from.shape[2]) % from.shape[1],
                  i0 = row / (from.shape[2] * from.shape[1]);
    const int64_t src_row = i0 * from.stride[0] + i1 * from.stride[1] + i2 * from.stride[2];
    const int64_t dst_row = i0 * to.stride[0] + i1 * to.stride[1] + i2 * to.stride[2];
    for (int64_t i3 = 0; i3 < from.shape[3]; ++i3)
      std::memcpy(dst + (dst_row + i3 * to.stride[3]) * size, src + (src_row + i3 * from.stride[3]) * size,
                  size_t(size));
    if (rounding == Rounding::hf32)
      kernels::common::round_hf32(reinterpret_cast<float*>(dst) + dst_row, from.shape[3]);
  });
}

}  // namespace

void Staging::add(core::Strided* tensor, View view, bool output, Rounding rounding) {
  if (!tensor->present() || (fits(*tensor, view) && rounding == Rounding::none)) return;
  entries_.push_back({tensor, *tensor, output, rounding, bytes_});
  const size_t size = size_t(elements(*tensor)) * size_t(core::element_size(tensor->dtype));
  bytes_ += (size + 63) / 64 * 64;
}

void Staging::gather(void* workspace, size_t plan_bytes, int threads) {
  if (bytes_ == 0) return;  // nothing staged, or only empty tensors
  char* base = static_cast<char*>(workspace) + copies_offset(plan_bytes);
  for (Entry& e : entries_) {
    *e.tensor = contiguous(e.original, base + e.offset);
    if (!e.output) copy(e.original, *e.tensor, threads, e.rounding);
  }
}

void Staging::scatter(int threads) const {
  for (const Entry& e : entries_)
    if (e.output) copy(*e.tensor, e.original, threads);
}

}  // namespace mhc::ops
