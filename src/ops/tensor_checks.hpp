// Checks of one tensor view against what the operator expects, and its
// resolution into the canonical Strided form. Every message names the tensor,
// says what was expected and what was given.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <functional>
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "mhc/mhc.hpp"

namespace mhc::ops {

std::string dims_string(const int64_t* dims, int rank);
std::string view_shape_string(const TensorView& v);

Status null_error(const char* name, const std::string& what);
Status dtype_error(const char* name, const std::string& expected, DType got);
Status shape_error(const char* name, const std::string& expected, const TensorView& got);
Status layout_error(const char* name, const std::string& what);
Status value_error(const char* name, const std::string& what);
// A message in another operator's words: each whole word (letters, digits, '_')
// for which `said` gives a name is replaced by it (nullptr: kept).
std::string rename_words(const std::string& message, const std::function<const char*(const std::string&)>& said);

// Up to Capacity values held in place (more are dropped: the checks' own shapes
// have at most five dims, their lists of tensors at most a dozen). Every call
// builds such lists, so they allocate nothing.
template <class T, size_t Capacity = size_t(kMaxRank)>
class InlineList {
 public:
  InlineList() = default;
  InlineList(std::initializer_list<T> values) { append(values.begin(), values.end()); }
  template <class It>
  InlineList(It first, It last) { append(first, last); }
  InlineList(const std::vector<T>& values) { append(values.begin(), values.end()); }  // NOLINT: a list as the checks take it
  template <class It>
  void append(It first, It last) {
    for (; first != last && count_ < items_.size(); ++first) items_[count_++] = *first;
  }
  void push_back(T value) { append(&value, &value + 1); }
  const T* begin() const { return items_.data(); }
  const T* end() const { return items_.data() + count_; }
  const T* data() const { return items_.data(); }
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  const T& operator[](size_t i) const { return items_[i]; }

 private:
  std::array<T, Capacity> items_{};
  size_t count_ = 0;
};
using DimList = InlineList<int64_t>;
using NameList = InlineList<const char*>;
// "[T,N,N]=[1024,4,4]": dims under their names, as every shape message prints them.
std::string named_dims_string(const NameList& names, const DimList& dims);

// A shape the tensor may take: its dims and their names. A message prints it as
// "[T,N,N]=[1024,4,4]" (label()); the text is built only for a message, since
// every call checks its tensors against such shapes.
struct ShapeOption {
  DimList dims;
  NameList names;
  std::string text = {};  // the label as given, when there are no names
  std::string label() const;
};
// A per-token shape: the token dims `lead` (named B,S when `bsnd`, else T), then
// `inner` named `names`.
ShapeOption per_token_shape(bool bsnd, const DimList& lead, std::initializer_list<const char*> names,
                            const DimList& inner);
// The shapes a tensor may take (at most two anywhere: h_res's).
using ShapeOptions = InlineList<ShapeOption, 4>;

// Rank, non-negative strides, null data, alignment and offset overflow; then the
// dtype and the shape (which must equal one of `options`; returns its index).
Status check_view(const char* name, const TensorView& v);
Status check_dtype(const char* name, const TensorView& v, DType expected);
Status check_shape(const char* name, const TensorView& v, const ShapeOptions& options,
                   int* chosen);

// An output must not write one element twice (sufficient test: sorted strides
// each exceed the span of the smaller dims).
Status check_no_self_overlap(const char* name, const TensorView& v);

// Byte range [lo, hi) a view touches; empty (lo == hi) for zero elements.
struct ByteSpan {
  uintptr_t lo = 0, hi = 0;
};
ByteSpan byte_span(const TensorView& v);
bool same_view(const TensorView& a, const TensorView& b);

// The canonical form. `leading` is the number of token dims the view has
// (2 for [B,S,..], 1 for [T,..], 0 for a non-token tensor); its trailing dims
// become the canonical [i, j] (up to 2, padded with extent 1).
core::Strided resolve_token_tensor(const TensorView& v, int leading, int64_t B, int64_t S);
core::Strided resolve_plain_tensor(const TensorView& v);

}  // namespace mhc::ops
