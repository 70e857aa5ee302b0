#include "ops/tensor_checks.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>

#include "core/dtype.hpp"

namespace mhc::ops {

// Without a stream: validation builds the expected shapes' labels on every call,
// and a stream's locale set-up costs a decode step microseconds (mhc-bench decode).
std::string dims_string(const int64_t* dims, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ',';
    s += std::to_string(dims[i]);
  }
  return s + ']';
}

std::string view_shape_string(const TensorView& v) {
  return dims_string(v.shape.data(), std::clamp(v.rank, 0, kMaxRank));
}

std::string named_dims_string(const NameList& names, const DimList& dims) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += ',';
    s += names[i];
  }
  return s + "]=" + dims_string(dims.data(), int(dims.size()));
}

ShapeOption per_token_shape(bool bsnd, const DimList& lead, std::initializer_list<const char*> names,
                            const DimList& inner) {
  ShapeOption option;
  option.dims = lead;
  option.dims.append(inner.begin(), inner.end());
  option.names = bsnd ? NameList{"B", "S"} : NameList{"T"};
  option.names.append(names.begin(), names.end());
  return option;
}

std::string ShapeOption::label() const { return names.empty() ? text : named_dims_string(names, dims); }

Status null_error(const char* name, const std::string& what) {
  return {StatusCode::null_pointer, ErrorKind::null, std::string(name) + ": " + what};
}
Status dtype_error(const char* name, const std::string& expected, DType got) {
  return {StatusCode::invalid_argument, ErrorKind::dtype,
          std::string(name) + ": expected dtype " + expected + ", got " + core::dtype_name(got)};
}
Status shape_error(const char* name, const std::string& expected, const TensorView& got) {
  return {StatusCode::invalid_argument, ErrorKind::shape,
          std::string(name) + ": expected " + expected + ", got " + view_shape_string(got)};
}
Status layout_error(const char* name, const std::string& what) {
  return {StatusCode::invalid_argument, ErrorKind::layout, std::string(name) + ": " + what};
}
Status value_error(const char* name, const std::string& what) {
  return {StatusCode::invalid_argument, ErrorKind::value, std::string(name) + ": " + what};
}

std::string rename_words(const std::string& message, const std::function<const char*(const std::string&)>& said) {
  auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  for (size_t i = 0; i < message.size();) {
    if (!is_word(message[i])) {
      out += message[i++];
      continue;
    }
    size_t end = i;
    while (end < message.size() && is_word(message[end])) ++end;
    const std::string word = message.substr(i, end - i);
    const char* renamed = said(word);
    out += renamed != nullptr ? std::string(renamed) : word;
    i = end;
  }
  return out;
}

Status check_view(const char* name, const TensorView& v) {
  if (v.rank < 0 || v.rank > kMaxRank)
    return shape_error(name, "a rank between 0 and " + std::to_string(kMaxRank),
                       TensorView{});  // rank itself is the problem
  const int32_t dt = static_cast<int32_t>(v.dtype);
  if (dt != MHC_BF16 && dt != MHC_FP16 && dt != MHC_FP32)
    return {StatusCode::invalid_argument, ErrorKind::dtype,
            std::string(name) + ": expected dtype bf16, fp16 or fp32, got dtype code " +
                std::to_string(dt)};
  int64_t numel = 1, last = 0;
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0)
      return shape_error(name, "non-negative dims", v);
    if (__builtin_mul_overflow(numel, v.shape[i], &numel))
      return layout_error(name, "element count of " + view_shape_string(v) + " overflows 64 bits");
  }
  if (numel == 0) return {};
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] == 1) continue;  // the stride of an extent-1 dim is never used
    if (v.strides[i] < 0)
      return layout_error(name, "expected non-negative strides, got " +
                                    dims_string(v.strides.data(), v.rank));
    int64_t span;
    if (__builtin_mul_overflow(v.shape[i] - 1, v.strides[i], &span) ||
        __builtin_add_overflow(last, span, &last))
      return layout_error(name, "largest element offset overflows 64 bits (shape " +
                                    view_shape_string(v) + ", strides " +
                                    dims_string(v.strides.data(), v.rank) + ")");
  }
  const int64_t esize = core::element_size(v.dtype);
  int64_t last_byte;
  if (__builtin_add_overflow(last, 1, &last_byte) || __builtin_mul_overflow(last_byte, esize, &last_byte) ||
      uint64_t(last_byte) > UINTPTR_MAX - reinterpret_cast<uintptr_t>(v.data))
    return layout_error(name, "byte extent overflows the address space");
  if (v.data == nullptr) return null_error(name, "data pointer is null");
  if (reinterpret_cast<uintptr_t>(v.data) % uintptr_t(esize) != 0)
    return layout_error(name, std::string("data pointer is not aligned to its element size (") +
                                  std::to_string(esize) + " bytes)");
  return {};
}

Status check_dtype(const char* name, const TensorView& v, DType expected) {
  if (v.dtype != expected) return dtype_error(name, core::dtype_name(expected), v.dtype);
  return {};
}

Status check_shape(const char* name, const TensorView& v, const ShapeOptions& options,
                   int* chosen) {
  for (size_t i = 0; i < options.size(); ++i) {
    const auto& dims = options[i].dims;
    if (int(dims.size()) != v.rank) continue;
    if (std::equal(dims.begin(), dims.end(), v.shape.begin())) {
      if (chosen) *chosen = int(i);
      return {};
    }
  }
  std::string expected;
  for (size_t i = 0; i < options.size(); ++i) expected += (i ? " or " : "") + options[i].label();
  return shape_error(name, expected, v);
}

Status check_no_self_overlap(const char* name, const TensorView& v) {
  std::array<std::pair<int64_t, int64_t>, kMaxRank> dims;  // (stride, extent) of dims that vary
  size_t varying = 0;
  for (int i = 0; i < std::min(v.rank, kMaxRank); ++i) {
    if (v.shape[i] == 0) return {};
    if (v.shape[i] > 1) dims[varying++] = {v.strides[i], v.shape[i]};
  }
  for (size_t i = 1; i < varying; ++i)  // insertion sort: at most kMaxRank entries
    for (size_t j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  int64_t span = 0;  // largest offset reachable by the smaller dims
  for (size_t i = 0; i < varying; ++i) {
    const auto [stride, extent] = dims[i];
    if (stride <= span)
      return layout_error(name, "output strides " + dims_string(v.strides.data(), v.rank) +
                                    " make elements of shape " + view_shape_string(v) +
                                    " overlap");
    span += stride * (extent - 1);
  }
  return {};
}

ByteSpan byte_span(const TensorView& v) {
  for (int i = 0; i < v.rank; ++i)  // first: an empty view's strides are never checked
    if (v.shape[i] == 0) return {};
  int64_t last = 0;
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] > 1) last += (v.shape[i] - 1) * v.strides[i];
  const auto lo = reinterpret_cast<uintptr_t>(v.data);
  return {lo, lo + uintptr_t((last + 1) * core::element_size(v.dtype))};
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i] || (a.shape[i] > 1 && a.strides[i] != b.strides[i]))
      return false;
  return true;
}

static int64_t stride_or_zero(const TensorView& v, int i) {
  return v.shape[i] > 1 ? v.strides[i] : 0;
}

core::Strided resolve_token_tensor(const TensorView& v, int leading, int64_t B, int64_t S) {
  core::Strided s;
  s.data = v.data;
  s.dtype = v.dtype;
  s.shape[0] = B;
  s.shape[1] = S;
  if (leading == 2) {
    s.stride[0] = stride_or_zero(v, 0);
    s.stride[1] = stride_or_zero(v, 1);
  } else {  // [T, ...]: B = 1, S = T
    s.stride[0] = 0;
    s.stride[1] = stride_or_zero(v, 0);
  }
  const int inner = v.rank - leading;
  if (inner == 1) {
    s.shape[3] = v.shape[leading];
    s.stride[3] = stride_or_zero(v, leading);
  } else if (inner == 2) {
    s.shape[2] = v.shape[leading];
    s.stride[2] = stride_or_zero(v, leading);
    s.shape[3] = v.shape[leading + 1];
    s.stride[3] = stride_or_zero(v, leading + 1);
  }
  return s;
}

core::Strided resolve_plain_tensor(const TensorView& v) {
  core::Strided s;
  s.data = v.data;
  s.dtype = v.dtype;
  // right-align into the 4 canonical dims: [F,K] -> shape[2..3], [A] -> shape[3]
  const int off = 4 - v.rank;
  for (int i = 0; i < v.rank; ++i) {
    s.shape[off + i] = v.shape[i];
    s.stride[off + i] = stride_or_zero(v, i);
  }
  return s;
}

}  // namespace mhc::ops
