// The scalar ends of the backward shared by every kernel family.
#include <algorithm>

#include "kernels/kernels.hpp"

namespace mhc::kernels {

void backward_finish_columns(const BackwardArgs& args, const plan::ColumnItem& item) {
  const core::BackwardProblem& p = *args.problem;
  const core::Dims& d = p.dims;
  const int lanes = args.plan->lanes;
  for (int64_t j = item.d0; j < item.d1; ++j) {
    const int64_t k = item.n * d.D + j;
    const float gamma = p.gamma.present() ? p.gamma.load(p.gamma.at(item.n, j)) : 1.0f;
    for (int64_t f = 0; f < d.F; ++f) {  // grad_phi = P * gamma, P = sum_t G_t v_t^T (the lanes' totals, in lane order)
      float P = args.phi_total(0)[f * d.K + k];
      for (int lane = 1; lane < lanes; ++lane) P += args.phi_total(lane)[f * d.K + k];
      p.grad_phi.store(p.grad_phi.at(f, k), P * gamma);
    }
    if (p.grad_gamma.present()) {
      float total = args.gamma_total(0)[k];
      for (int lane = 1; lane < lanes; ++lane) total += args.gamma_total(lane)[k];
      p.grad_gamma.store(p.grad_gamma.at(item.n, j), total);
    }
  }
}

void backward_small_sums(const BackwardArgs& args) {
  const core::BackwardProblem& p = *args.problem;
  const core::Dims& d = p.dims;
  const float* gz_all = args.workspace + args.plan->off_gz;
  const float* alpha_all = args.workspace + args.plan->off_alpha_terms;
  // Two-level sums in token order, the same shape as the column sums.
  auto token_sum = [&](const float* base, int64_t stride) {
    float total = 0.0f;
    for (int64_t start = 0; start < d.T; start += plan::kTokensPerChunk) {
      float partial = 0.0f;
      const int64_t end = std::min(d.T, start + plan::kTokensPerChunk);
      for (int64_t t = start; t < end; ++t) partial += base[t * stride];
      total += partial;
    }
    return total;
  };
  for (int64_t f = 0; f < d.F; ++f) p.grad_bias.store(p.grad_bias.at(0, f), token_sum(gz_all + f, d.F));
  const int entries = d.two_entry_alpha ? 2 : 3;
  for (int a = 0; a < entries; ++a) p.grad_alpha.store(p.grad_alpha.at(0, a), token_sum(alpha_all + a, 3));
}

}  // namespace mhc::kernels
