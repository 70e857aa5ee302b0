// How the kernels see a call's tensors: counts, and pointers with element
// strides. The drivers (ops/) resolve layouts, ranks and optional shapes and
// stage whatever does not fit these forms (ops/staging.hpp), so a kernel never
// sees a problem descriptor: every row it reads or writes is unit-stride, and
// token t's row starts t * token_stride elements from the first.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace mhc::kernels {


// The counts of one MhcPre / MhcPreBackward call (SPEC §2-§4).
struct PreShape {
  int64_t T = 0;  // tokens
  int64_t N = 0, D = 0, K = 0;  // streams, columns, K = N * D
  int64_t F = 0, R = 0;         // rows of phi (2N + R; N for the head), residual logits (0 unless 3 alpha entries)
  bool two_entry_alpha = false;  // alpha has 2 entries: no residual branch
  bool head = false;             // alpha has 1 entry, F = N: the pre branch only (SPEC §6)
  DType x_dtype = DType::fp32;   // x, h_in, grad_h_in, grad_x_post, grad_x
  // The products take HF32 operands (SPEC §7): phi comes rounded (the driver's
  // preparation); the kernels round u = v * gamma and G as they form them.
  bool hf32 = false;
  int alpha_entries() const { return head ? 1 : two_entry_alpha ? 2 : 3; }
  bool operator==(const PreShape&) const = default;
};

// A per-token tensor of fp32 values: token t's row of unit-stride values at
// data + t * token_stride (absent: data == nullptr).
template <class Float>
struct TokenRows {
  Float* data = nullptr;
  int64_t token_stride = 0;
  bool present() const { return data != nullptr; }
  Float* at(int64_t t) const { return data + t * token_stride; }
};

// A per-token tensor in x's dtype whose token has N streams: element (t, n, j) at
// t * token_stride + n * stream_stride + j elements from data (absent: nullptr).
template <class Void>
struct StreamRows {
  Void* data = nullptr;
  int64_t token_stride = 0, stream_stride = 0;
  bool present() const { return data != nullptr; }
  int64_t at(int64_t t, int64_t n) const { return t * token_stride + n * stream_stride; }
};

// A matrix of fp32 with unit-stride rows: element (i, j) at data[i * row_stride + j]
// (absent: nullptr).
template <class Float>
struct Matrix {
  Float* data = nullptr;
  int64_t row_stride = 0;
  bool present() const { return data != nullptr; }
  Float* row(int64_t i) const { return data + i * row_stride; }
};

}  // namespace mhc::kernels
