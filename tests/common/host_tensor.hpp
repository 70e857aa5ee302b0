// Host-side test data, without a test framework (the operators' test drivers and
// mhc-bench's check mode use it as the gtest suites do): host tensors of any dtype
// with arbitrary strides, named bags of them, their conversion to the C API's
// arguments, ulps and error measures.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/rng.hpp"
#include "core/dtype.hpp"
#include "mhc/mhc.h"
#include "mhc/mhc.hpp"

namespace mhc_test {

using mhc::DType;
using mhc::TensorView;
using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------- random numbers


// ---------------------------------------------------------------- dtypes

inline int64_t element_bytes(DType t) { return mhc::core::element_size(t); }
inline const char* dtype_name(DType t) { return mhc::core::dtype_name(t); }

// Spacing of the dtype's representable numbers at magnitude |v| (the ulp of the
// binade |v| is in; the smallest subnormal spacing below the normal range).
inline double ulp_of(DType t, double v) {
  const int mantissa_bits = t == DType::fp32 ? 23 : t == DType::fp16 ? 10 : 7;
  const int min_exponent = t == DType::fp16 ? -14 : -126;
  const double a = std::fabs(v);
  int e = a > 0 && std::isfinite(a) ? std::ilogb(a) : min_exponent;
  if (e < min_exponent) e = min_exponent;
  return std::ldexp(1.0, e - mantissa_bits);
}

// ---------------------------------------------------------------- host tensors

// Storage of a tensor: 4-byte aligned words, filled with a byte pattern.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, int64_t elements, uint8_t fill)
      : dtype_(dtype), elements_(elements),
        words_(size_t((elements * element_bytes(dtype) + 3) / 4 + 1)) {
    std::memset(words_.data(), fill, words_.size() * 4);
  }
  DType dtype() const { return dtype_; }
  int64_t elements() const { return elements_; }
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(words_.data()); }
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(words_.data()); }
  size_t byte_size() const { return words_.size() * 4; }
  double get(int64_t i) const { return mhc::core::load_element(bytes(), dtype_, i); }
  void set(int64_t i, double v) { mhc::core::store_element(bytes(), dtype_, i, float(v)); }
  uint32_t bits(int64_t i) const {
    if (dtype_ == DType::fp32) { uint32_t u; std::memcpy(&u, bytes() + 4 * i, 4); return u; }
    uint16_t h; std::memcpy(&h, bytes() + 2 * i, 2); return h;
  }
  std::vector<uint8_t> snapshot() const { return {bytes(), bytes() + byte_size()}; }

 private:
  DType dtype_ = DType::fp32;
  int64_t elements_ = 0;
  std::vector<uint32_t> words_;
};

// A strided view into its own Buffer. An empty Tensor (present() false) stands
// for an absent optional tensor.
struct Tensor {
  Buffer buffer;
  Shape shape, strides;  // strides in elements
  int64_t offset = 0;    // element offset of the view's first element in the buffer
  bool exists = false;

  bool present() const { return exists; }
  int rank() const { return int(shape.size()); }
  int64_t numel() const {  // 0 for an absent tensor
    if (!exists) return 0;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  DType dtype() const { return buffer.dtype(); }
  // Storage index of the element at row-major position `linear`.
  int64_t index(int64_t linear) const {
    int64_t at = offset;
    for (int i = rank() - 1; i >= 0; --i) {
      at += (linear % shape[i]) * strides[i];
      linear /= shape[i];
    }
    return at;
  }
  double get(int64_t linear) const { return buffer.get(index(linear)); }
  void set(int64_t linear, double v) { buffer.set(index(linear), v); }
  uint32_t bits(int64_t linear) const { return buffer.bits(index(linear)); }
  std::vector<double> values() const {  // row-major, upcast to float64
    std::vector<double> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[i] = get(i);
    return out;
  }
  std::vector<uint32_t> raw() const {  // row-major raw bits
    std::vector<uint32_t> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[i] = bits(i);
    return out;
  }
  void* data() { return buffer.bytes() + offset * element_bytes(dtype()); }
  TensorView view() {
    TensorView v;
    v.data = data();
    v.dtype = dtype();
    v.rank = rank();
    for (int i = 0; i < rank(); ++i) { v.shape[i] = shape[i]; v.strides[i] = strides[i]; }
    return v;
  }
  std::optional<TensorView> optional_view() {
    return present() ? std::optional<TensorView>(view()) : std::nullopt;
  }
};

inline Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t stride = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) { s[i] = stride; stride *= shape[i]; }
  return s;
}

inline int64_t span_elements(const Shape& shape, const Shape& strides, int64_t offset) {
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return offset;
    last += (shape[i] - 1) * strides[i];
  }
  return last + 1;
}

inline Tensor make_tensor(DType dtype, Shape shape, uint8_t fill = 0) {
  Tensor t;
  t.exists = true;
  t.strides = contiguous_strides(shape);
  t.shape = std::move(shape);
  t.buffer = Buffer(dtype, t.numel(), fill);
  return t;
}

// Non-contiguous layouts of the same logical tensor.
enum class Layout {
  contiguous,
  every_other,  // contiguous strides doubled: one unused element after each
  padded_rows,  // innermost dim contiguous, every outer stride padded by a few elements
  permuted,     // dims stored in a random physical order, with padding and a leading offset
};
// A tensor of `shape` laid out as `layout`; the bytes outside the view keep `fill`.
inline Tensor make_laid_out(DType dtype, const Shape& shape, Layout layout, Rng& rng, uint8_t fill) {
  Tensor t;
  t.shape = shape;
  t.exists = true;
  const int rank = int(shape.size());
  std::vector<int> order(rank);  // physical order, outermost first
  for (int i = 0; i < rank; ++i) order[i] = i;
  int64_t inner_step = 1, pad = 0;
  switch (layout) {
    case Layout::contiguous: break;
    case Layout::every_other: inner_step = 2; break;
    case Layout::padded_rows: pad = 1 + rng.below(5); break;
    case Layout::permuted:
      for (int i = rank - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
      pad = rng.below(3);
      t.offset = 1 + rng.below(7);
      break;
  }
  t.strides.assign(rank, 0);
  int64_t stride = inner_step;
  for (int i = rank - 1; i >= 0; --i) {
    t.strides[order[i]] = stride;
    stride = stride * shape[order[i]] + (layout == Layout::every_other ? 0 : pad);
  }
  t.buffer = Buffer(dtype, span_elements(shape, t.strides, t.offset) + 3, fill);
  return t;
}

// The same values as `src`, in another layout (bytes outside the view keep `fill`).
inline Tensor relaid(const Tensor& src, Layout layout, Rng& rng, uint8_t fill = 0x5a) {
  if (!src.present()) return {};
  Tensor t = make_laid_out(src.dtype(), src.shape, layout, rng, fill);
  for (int64_t i = 0; i < src.numel(); ++i) {
    const int64_t from = src.index(i), to = t.index(i);
    std::memcpy(t.buffer.bytes() + to * element_bytes(t.dtype()),
                src.buffer.bytes() + from * element_bytes(src.dtype()), size_t(element_bytes(t.dtype())));
  }
  return t;
}

inline constexpr uint8_t kOutputFill = 0xa5;  // byte pattern of unwritten outputs

// ---------------------------------------------------------------- error measures

// ||got - want||_2 / ||want||_2 (0 when both are zero; inf when only want is).
inline double normwise_relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  if (norm == 0) return diff == 0 ? 0.0 : INFINITY;
  return std::sqrt(diff / norm);
}

// Raw bytes of several buffers, to show that a failed call wrote nothing.
inline std::vector<std::vector<uint8_t>> snapshot_all(const std::vector<const Tensor*>& tensors) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor* t : tensors) out.push_back(t->buffer.snapshot());
  return out;
}

inline double max_abs_error(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < want.size(); ++i) e = std::max(e, std::fabs(got[i] - want[i]));
  return e;
}

constexpr double kU = 0x1.0p-24;  // fp32's unit roundoff

// ---------------------------------------------------------------- named tensors

// Named host tensors of one call, and extra ones a rule puts in place of others;
// snapshot() is every byte of all of them (a rejected call changes none).
struct Bag {
  std::map<std::string, Tensor> t;
  std::deque<Tensor> extra;
  Tensor& operator[](const std::string& name) { return t[name]; }
  TensorView add(DType dtype, const Shape& shape) {
    extra.push_back(make_tensor(dtype, shape, kOutputFill));
    return extra.back().view();
  }
  std::vector<std::vector<uint8_t>> snapshot() const {
    std::vector<const Tensor*> all;
    for (const auto& [name, tensor] : t) all.push_back(&tensor);
    for (const Tensor& e : extra) all.push_back(&e);
    return snapshot_all(all);
  }
};

inline void fill_normal(Tensor& t, Rng& rng, double scale) {
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.normal() * scale);
}
inline void fill_uniform(Tensor& t, Rng& rng, double lo, double hi) {
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(lo, hi));
}

// ---------------------------------------------------------------- the C API's arguments

inline mhc_tensor to_c(const TensorView& v) {
  mhc_tensor t{};
  t.data = v.data;
  t.dtype = static_cast<int32_t>(v.dtype);
  t.rank = v.rank;
  for (int i = 0; i < MHC_MAX_RANK; ++i) { t.shape[i] = v.shape[i]; t.strides[i] = v.strides[i]; }
  return t;
}

inline mhc_options to_c(const mhc::Options& o) {
  mhc_options c = mhc_default_options();
  c.norm_eps = o.norm_eps;
  c.hc_eps = o.hc_eps;
  c.num_threads = o.num_threads;
  c.isa = int32_t(o.isa);
  c.matmul_precision = int32_t(o.matmul_precision);
  return c;
}

// A C tensor for a view, and for an optional view (nullptr when absent).
struct CTensor {
  mhc_tensor t{};
  const mhc_tensor* ptr = nullptr;
  CTensor() = default;
  explicit CTensor(const TensorView& v) : t(to_c(v)), ptr(&t) {}
  explicit CTensor(const std::optional<TensorView>& v) {
    if (v) { t = to_c(*v); ptr = &t; }
  }
  CTensor(const CTensor& o) : t(o.t), ptr(o.ptr ? &t : nullptr) {}
  CTensor& operator=(const CTensor&) = delete;
};

// The per-token shape of a layout: [B,S,inner...] or [T,inner...].
inline Shape token_shape(bool bsnd, int64_t B, int64_t S, std::initializer_list<int64_t> inner) {
  Shape s = bsnd ? Shape{B, S} : Shape{B * S};
  s.insert(s.end(), inner.begin(), inner.end());
  return s;
}

// Options that run one family (Options::isa) on `threads` threads (0: the default).
inline mhc::Options options_for(mhc::Isa isa, int threads = 0) {
  mhc::Options o;
  o.isa = isa;
  o.num_threads = threads;
  return o;
}

}  // namespace mhc_test
