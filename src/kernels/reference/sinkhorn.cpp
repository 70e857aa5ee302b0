#include "kernels/reference/sinkhorn.hpp"

#include <algorithm>
#include <cmath>

namespace mhc::kernels::reference {

Sinkhorn64 sinkhorn_forward(const double* z, int64_t N, int64_t I, double eps) {
  Sinkhorn64 f;
  f.N = N, f.I = I;
  std::vector<double> P(static_cast<size_t>(N * N)), d(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    double top = z[i * N];
    for (int64_t j = 1; j < N; ++j) top = std::max(top, z[i * N + j]);
    double sum = 0;
    for (int64_t j = 0; j < N; ++j) sum += std::exp(z[i * N + j] - top);
    for (int64_t j = 0; j < N; ++j) P[size_t(i * N + j)] = std::exp(z[i * N + j] - top) / sum;
    d[size_t(i)] = sum;
  }
  f.P.push_back(P);
  f.div.push_back(d);
  for (double& e : P) e += eps;
  for (int64_t k = 1; k < 2 * I; ++k) {
    const bool columns = k % 2 == 1;
    for (int64_t a = 0; a < N; ++a) {  // column a, or row a
      double sum = 0;
      for (int64_t b = 0; b < N; ++b) sum += columns ? P[size_t(b * N + a)] : P[size_t(a * N + b)];
      d[size_t(a)] = sum + eps;
    }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) P[size_t(i * N + j)] /= d[size_t(columns ? j : i)];
    f.P.push_back(P);
    f.div.push_back(d);
  }
  return f;
}

std::vector<double> sinkhorn_backward(const Sinkhorn64& f, const double* grad_H) {
  const int64_t N = f.N;
  std::vector<double> G(grad_H, grad_H + N * N);
  for (int64_t k = 2 * f.I - 1; k >= 1; --k) {
    const bool columns = k % 2 == 1;
    const std::vector<double>& Y = f.P[size_t(k)];
    const std::vector<double>& s = f.div[size_t(k)];
    for (int64_t a = 0; a < N; ++a) {
      auto at = [&](int64_t b) { return size_t(columns ? b * N + a : a * N + b); };
      double d = 0;
      for (int64_t b = 0; b < N; ++b) d += G[at(b)] * Y[at(b)];
      for (int64_t b = 0; b < N; ++b) G[at(b)] = (G[at(b)] - d) / s[size_t(a)];
    }
  }
  const std::vector<double>& p = f.P[0];
  std::vector<double> gz(size_t(N * N));
  for (int64_t i = 0; i < N; ++i) {
    double d = 0;
    for (int64_t j = 0; j < N; ++j) d += G[size_t(i * N + j)] * p[size_t(i * N + j)];
    for (int64_t j = 0; j < N; ++j) gz[size_t(i * N + j)] = (G[size_t(i * N + j)] - d) * p[size_t(i * N + j)];
  }
  return gz;
}

}  // namespace mhc::kernels::reference
