// MhcPostBackward's sums over D of one token (SPEC §11), in d order from the
// first term: grad_h_res (when given) and grad_h_post. The reference family's
// loops, and the SIMD family's for N other than 4, whose bits must be these.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"
#include "kernels/post.hpp"

namespace mhc::kernels::common {

inline void post_sums_over_d(const PostBackwardOperands& o, int64_t t) {
  const PostShape& s = o.shape;
  const DType dt = s.x_dtype;
  const int64_t N = s.N, D = s.D;
  auto g = [&](int64_t j, int64_t d) { return core::load_element(o.grad_out.data, dt, o.grad_out.at(t, j) + d); };
  auto x = [&](int64_t i, int64_t d) { return core::load_element(o.x.data, dt, o.x.at(t, i) + d); };
  auto h_out = [&](int64_t d) { return core::load_element(o.h_out.data, dt, o.h_out.at(t, 0) + d); };
  if (o.grad_h_res.present())
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = x(i, 0) * g(j, 0);
        for (int64_t d = 1; d < D; ++d) acc = acc + x(i, d) * g(j, d);
        o.grad_h_res.at(t)[i * N + j] = acc;
      }
  for (int64_t j = 0; j < N; ++j) {
    float acc = h_out(0) * g(j, 0);
    for (int64_t d = 1; d < D; ++d) acc = acc + h_out(d) * g(j, d);
    o.grad_h_post.at(t)[j] = acc;
  }
}

}  // namespace mhc::kernels::common
