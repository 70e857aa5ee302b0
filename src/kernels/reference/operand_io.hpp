// A call's operands gathered into contiguous float64 arrays and the results
// stored back (the reference's only contact with dtypes and strides). Stores
// round float64 to fp32 first, then to bf16/fp16 (a double rounding that can
// differ from a direct rounding by one unit in rare ties; tests allow one ulp).
#pragma once

#include <vector>

#include "kernels/operands.hpp"

namespace mhc::kernels::reference {

// Tokens [t0, t0 + T) of rows in x's dtype, `streams` rows of J a token.
inline std::vector<double> gather(const StreamRows<const void>& rows, DType dtype, int64_t t0, int64_t T,
                                  int64_t streams, int64_t J) {
  std::vector<double> out(size_t(T * streams * J));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < streams; ++n)
      for (int64_t j = 0; j < J; ++j)
        out[size_t((t * streams + n) * J + j)] = core::load_element(rows.data, dtype, rows.at(t0 + t, n) + j);
  return out;
}
inline void scatter(const StreamRows<void>& rows, DType dtype, const std::vector<double>& v, int64_t t0, int64_t T,
                    int64_t streams, int64_t J) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < streams; ++n)
      for (int64_t j = 0; j < J; ++j)
        core::store_element(rows.data, dtype, rows.at(t0 + t, n) + j, float(v[size_t((t * streams + n) * J + j)]));
}
// Tokens [t0, t0 + T) of fp32 rows of J.
inline std::vector<double> gather(const TokenRows<const float>& rows, int64_t t0, int64_t T, int64_t J) {
  std::vector<double> out(size_t(T * J));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < J; ++j) out[size_t(t * J + j)] = rows.at(t0 + t)[j];
  return out;
}
inline void scatter(const TokenRows<float>& rows, const std::vector<double>& v, int64_t t0, int64_t T, int64_t J) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < J; ++j) rows.at(t0 + t)[j] = float(v[size_t(t * J + j)]);
}
// I rows of J fp32.
inline std::vector<double> gather(const Matrix<const float>& m, int64_t I, int64_t J) {
  std::vector<double> out(size_t(I * J));
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j) out[size_t(i * J + j)] = m.row(i)[j];
  return out;
}
inline void scatter(const Matrix<float>& m, const std::vector<double>& v, int64_t I, int64_t J) {
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j) m.row(i)[j] = float(v[size_t(i * J + j)]);
}
inline std::vector<double> gather(const float* values, int64_t count) { return std::vector<double>(values, values + count); }
inline void scatter(float* values, const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i) values[i] = float(v[i]);
}

}  // namespace mhc::kernels::reference
