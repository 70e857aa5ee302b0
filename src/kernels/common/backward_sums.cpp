// The scalar ends of the backward shared by every kernel family.
#include <algorithm>

#include "kernels/pre_backward.hpp"

namespace mhc::kernels::common {

void finish_columns_scalar(const BackwardStep& step, const ColumnItem& item) {
  const BackwardOperands& o = *step.operands;
  const PreShape& d = o.shape;
  const BackwardBuffers& b = *step.buffers;
  const int lanes = b.lanes;
  for (int64_t j = item.d0; j < item.d1; ++j) {
    const int64_t k = item.n * d.D + j;
    // grad_phi = P * gamma, P = sum_t G_t v_t^T (the lanes' totals, in lane order);
    // HF32 calls: P, whose sums took u = v * gamma.
    const float gamma = o.gamma.present() && !d.hf32 ? o.gamma.row(item.n)[j] : 1.0f;
    for (int64_t f = 0; f < d.F; ++f) {
      float P = b.phi_total[0][f * d.K + k];
      for (int lane = 1; lane < lanes; ++lane) P += b.phi_total[lane][f * d.K + k];
      o.grad_phi.row(f)[k] = P * gamma;
    }
    if (o.grad_gamma.present()) {
      float total = b.gamma_total[0][k];
      for (int lane = 1; lane < lanes; ++lane) total += b.gamma_total[lane][k];
      o.grad_gamma.row(item.n)[j] = total;
    }
  }
}

void finish_sums_scalar(const BackwardStep& step) {
  const BackwardOperands& o = *step.operands;
  const PreShape& d = o.shape;
  const float* gz_all = step.buffers->gz;
  const float* alpha_all = step.buffers->alpha_terms;
  // Two-level sums in token order, the same shape as the column sums.
  auto token_sum = [&](const float* base, int64_t stride) {
    float total = 0.0f;
    for (int64_t start = 0; start < d.T; start += kTokensPerChunk) {
      float partial = 0.0f;
      const int64_t end = std::min(d.T, start + kTokensPerChunk);
      for (int64_t t = start; t < end; ++t) partial += base[t * stride];
      total += partial;
    }
    return total;
  };
  for (int64_t f = 0; f < d.F; ++f) o.grad_bias[f] = token_sum(gz_all + f, d.F);
  const int entries = d.alpha_entries();
  for (int a = 0; a < entries; ++a) o.grad_alpha[a] = token_sum(alpha_all + a, 3);
}

}  // namespace mhc::kernels::common
