// A validated problem's strided tensors gathered into contiguous float64 arrays,
// for the fuzzers' tolerance bounds.
#pragma once

#include <vector>

#include "core/problem.hpp"

namespace mhc_fuzz {

// Per-token [T, I, J] (I*J elements a token; [T,N,D] for x, [T,1,D] for h_in ...).
// Tokens [t0, t0 + T).
inline std::vector<double> gather_tokens(const mhc::core::Strided& s, int64_t T, int64_t I, int64_t J, int64_t t0 = 0) {
  std::vector<double> out(size_t(T * I * J));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t j = 0; j < J; ++j) out[(t * I + i) * J + j] = s.load(s.at(t0 + t, i, j));
  return out;
}
inline std::vector<double> gather_residual(const mhc::core::Strided& s, int64_t T, int64_t R, int64_t t0 = 0) {
  std::vector<double> out(size_t(T * R));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < R; ++r) out[t * R + r] = s.load(s.residual_at(t0 + t, r));
  return out;
}
inline std::vector<double> gather_plain(const mhc::core::Strided& s, int64_t I, int64_t J) {
  std::vector<double> out(size_t(I * J));
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j) out[i * J + j] = s.load(s.at(i, j));
  return out;
}
}  // namespace mhc_fuzz
