// A problem's tensors as the kernels see them (kernels/operands.hpp), and
// whether a tensor already fits that view; a tensor that does not is staged
// first (staging.hpp).
#pragma once

#include "core/problem.hpp"
#include "kernels/operands.hpp"

namespace mhc::ops {

enum class View {
  stream_rows,  // per-token, in x's dtype: unit-stride rows, tokens at a uniform stride
  token_rows,   // per-token fp32: as stream_rows, and a token's values in one run
  matrix,       // fp32 [rows][columns] with unit-stride rows (a vector: one row)
};

// Token t of a per-token tensor starts t * token_stride(s) elements from the first.
inline int64_t token_stride(const core::Strided& s) { return s.shape[1] > 1 ? s.stride[1] : s.stride[0]; }

inline bool fits(const core::Strided& s, View view) {
  const bool unit_rows = s.shape[3] <= 1 || s.stride[3] == 1;
  if (view == View::matrix) return unit_rows;
  const bool uniform_tokens = s.shape[0] <= 1 || s.shape[1] <= 1 || s.stride[0] == s.shape[1] * s.stride[1];
  const bool one_run = s.shape[2] <= 1 || s.stride[2] == s.shape[3];
  return unit_rows && uniform_tokens && (view == View::stream_rows || one_run);
}

template <class Void>
kernels::StreamRows<Void> stream_rows(const core::Strided& s) {
  return {static_cast<Void*>(s.data), token_stride(s), s.stride[2]};
}
template <class Float>
kernels::TokenRows<Float> token_rows(const core::Strided& s) {
  return {static_cast<Float*>(s.data), token_stride(s)};
}
template <class Float>
kernels::Matrix<Float> matrix(const core::Strided& s) {
  return {static_cast<Float*>(s.data), s.stride[2]};
}

inline kernels::PreShape shape_of(const core::Dims& d, DType x_dtype, bool hf32) {
  return {.T = d.T, .N = d.N, .D = d.D, .K = d.K, .F = d.F, .R = d.R,
          .two_entry_alpha = d.two_entry_alpha, .head = d.head, .x_dtype = x_dtype, .hf32 = hf32};
}

}  // namespace mhc::ops
