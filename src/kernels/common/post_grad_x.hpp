// MhcPostBackward's grad_x of one element (SPEC §11), in fp32: sum_j H[i, j] *
// g[j, d] from the first term, each product and each sum rounded, j ascending
// (H absent: g[i, d]). The fp32 families' post backward writes it, and the site
// backward's finish forms it again in MhcPreBackward's rows instead of reading
// it (kernels/pre_backward.hpp): one form for both keeps their bits equal.
#pragma once

#include <cstdint>

namespace mhc::kernels::common {

// g(j): element d of row j of the token's grad_out, as fp32.
template <class Row>
inline float post_grad_x(const float* H, int64_t N, int64_t i, Row&& g) {
  if (H == nullptr) return g(i);
  float acc = H[i * N] * g(0);
  for (int64_t j = 1; j < N; ++j) acc = acc + H[i * N + j] * g(j);
  return acc;
}

}  // namespace mhc::kernels::common
