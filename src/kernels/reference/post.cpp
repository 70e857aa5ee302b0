#include "kernels/reference/post.hpp"

#include <cmath>

namespace mhc::kernels::reference {

PostForward64 post_forward(const PostToken64& t) {
  const int64_t N = t.N, D = t.D;
  PostForward64 r;
  r.out.assign(size_t(N * D), 0.0);
  r.out_magnitude.assign(size_t(N * D), 0.0);
  for (int64_t j = 0; j < N; ++j)
    for (int64_t d = 0; d < D; ++d) {
      double acc = t.h_post[j] * t.h_out[d], mag = std::fabs(acc);
      if (t.H != nullptr) {
        for (int64_t i = 0; i < N; ++i) {
          const double term = t.H[i * N + j] * t.x[i * D + d];  // H enters transposed
          acc += term, mag += std::fabs(term);
        }
      } else {
        acc += t.x[j * D + d], mag += std::fabs(t.x[j * D + d]);
      }
      r.out[size_t(j * D + d)] = acc;
      r.out_magnitude[size_t(j * D + d)] = mag;
    }
  return r;
}

PostBackward64 post_backward(const PostToken64& t, const double* g) {
  const int64_t N = t.N, D = t.D;
  PostBackward64 r;
  r.grad_x.assign(size_t(N * D), 0.0);
  r.grad_x_magnitude.assign(size_t(N * D), 0.0);
  r.grad_h_res.assign(size_t(N * N), 0.0);
  r.grad_h_res_magnitude.assign(size_t(N * N), 0.0);
  r.grad_h_out.assign(size_t(D), 0.0);
  r.grad_h_out_magnitude.assign(size_t(D), 0.0);
  r.grad_h_post.assign(size_t(N), 0.0);
  r.grad_h_post_magnitude.assign(size_t(N), 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0, mag = 0;
      if (t.H != nullptr) {
        for (int64_t j = 0; j < N; ++j) {
          const double term = t.H[i * N + j] * g[j * D + d];
          acc += term, mag += std::fabs(term);
        }
      } else {
        acc = g[i * D + d], mag = std::fabs(acc);
      }
      r.grad_x[size_t(i * D + d)] = acc;
      r.grad_x_magnitude[size_t(i * D + d)] = mag;
    }
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t d = 0; d < D; ++d) {
        const double term = t.x[i * D + d] * g[j * D + d];
        r.grad_h_res[size_t(i * N + j)] += term, r.grad_h_res_magnitude[size_t(i * N + j)] += std::fabs(term);
      }
  for (int64_t d = 0; d < D; ++d)
    for (int64_t j = 0; j < N; ++j) {
      const double term = t.h_post[j] * g[j * D + d];
      r.grad_h_out[size_t(d)] += term, r.grad_h_out_magnitude[size_t(d)] += std::fabs(term);
    }
  for (int64_t j = 0; j < N; ++j)
    for (int64_t d = 0; d < D; ++d) {
      const double term = t.h_out[d] * g[j * D + d];
      r.grad_h_post[size_t(j)] += term, r.grad_h_post_magnitude[size_t(j)] += std::fabs(term);
    }
  return r;
}

}  // namespace mhc::kernels::reference
