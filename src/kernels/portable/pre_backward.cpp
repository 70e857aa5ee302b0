// Portable MhcPreBackward: plain C++ in fp32 (SPEC §3), any architecture.
// Phase 1 (per token): G = dL/dm, c, gz and the grad_alpha terms into the workspace.
// Phase 2 (per column block, tokens in order): grad_x, and the token sums of
//          P = sum G v^T and sum v*gu, two-level (chunks of kTokensPerChunk).
// Phase 3 (serial): grad_bias, grad_alpha, two-level in token order.
#include <algorithm>
#include <cstring>

#include "kernels/kernels.hpp"
#include "kernels/portable/blocked_sum.hpp"

namespace mhc::kernels::portable {

void backward_token_stats(const BackwardArgs& args, int64_t t0, int64_t t1, int worker) {
  const core::BackwardProblem& p = *args.problem;
  const plan::BackwardPlan& plan = *args.plan;
  const core::Dims& d = p.dims;
  float* v = args.workspace + plan.off_scratch + worker * plan.scratch_per_worker;  // [K]
  float* grad_h_in = v + plan::align16(d.K);                                        // [D]
  float* G_all = args.workspace + plan.off_G;
  float* gz_all = args.workspace + plan.off_gz;
  const float alpha[3] = {p.alpha.load(p.alpha.at(0, 0)), p.alpha.load(p.alpha.at(0, 1)),
                          d.two_entry_alpha ? 0.0f : p.alpha.load(p.alpha.at(0, 2))};
  const float hc_eps = float(p.hc_eps);

  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t j = 0; j < d.D; ++j) v[n * d.D + j] = p.x.load(p.x.at(t, n, j));
    for (int64_t j = 0; j < d.D; ++j) grad_h_in[j] = p.grad_h_in.load(p.grad_h_in.at(t, 0, j));
    const float r = p.inv_rms.load(p.inv_rms.at(t, 0, 0));
    float* gz = gz_all + t * d.F;
    float* G = G_all + t * d.F;

    for (int64_t n = 0; n < d.N; ++n) {
      const float g_pre = dot(v + n * d.D, grad_h_in, 1, d.D);
      const float s = p.h_pre.load(p.h_pre.at(t, 0, n)) - hc_eps;  // sigma(z_pre)
      gz[n] = g_pre * s * (1.0f - s);
      const float h_post = p.h_post.load(p.h_post.at(t, 0, n));
      const float grad_post = p.grad_h_post.load(p.grad_h_post.at(t, 0, n));
      if (d.two_entry_alpha) {
        const float sg = (h_post - hc_eps) * 0.5f;
        gz[d.N + n] = grad_post * (2.0f * sg * (1.0f - sg));
      } else {
        gz[d.N + n] = grad_post * h_post * (1.0f - h_post * 0.5f);
      }
    }
    for (int64_t i = 0; i < d.R; ++i) gz[2 * d.N + i] = p.grad_h_res.load(p.grad_h_res.residual_at(t, i));

    float g_r_acc[kLanes] = {}, alpha_terms[3] = {};
    for (int64_t f = 0; f < d.F; ++f) {
      const int branch = f < d.N ? 0 : f < 2 * d.N ? 1 : 2;
      const float m = p.h_mix.load(p.h_mix.at(t, 0, f));
      const float gw = alpha[branch] * gz[f];
      G[f] = r * gw;
      g_r_acc[f % kLanes] += gw * m;
      alpha_terms[branch] += gz[f] * (r * m);
    }
    const float g_r = fold_lanes(g_r_acc);
    args.workspace[plan.off_c + t] = -(r * r * r) * g_r / float(d.K);
    std::memcpy(args.workspace + plan.off_alpha_terms + 3 * t, alpha_terms, sizeof alpha_terms);
  }
}

void backward_columns(const BackwardArgs& args, int64_t k0, int64_t k1) {
  const core::BackwardProblem& p = *args.problem;
  const plan::BackwardPlan& plan = *args.plan;
  const core::Dims& d = p.dims;
  const int64_t width = k1 - k0;  // <= kColumnsPerItem
  const float* G_all = args.workspace + plan.off_G;
  const float* c_all = args.workspace + plan.off_c;
  // Token sums live in this item's own columns of the [F, K] / [K] regions.
  float* phi_partial = args.workspace + plan.off_phi_partial;
  float* phi_total = args.workspace + plan.off_phi_total;
  float* gamma_partial = args.workspace + plan.off_gamma_partial;
  float* gamma_total = args.workspace + plan.off_gamma_total;
  const float* phi = static_cast<const float*>(p.phi.data);
  const bool has_gamma = p.gamma.present();

  float v[plan::kColumnsPerItem], gu[plan::kColumnsPerItem], gamma[plan::kColumnsPerItem];
  for (int64_t k = k0; k < k1; ++k)
    gamma[k - k0] = has_gamma ? p.gamma.load(p.gamma.at(k / d.D, k % d.D)) : 1.0f;
  for (int64_t f = 0; f < d.F; ++f) std::fill_n(phi_total + f * d.K + k0, width, 0.0f);
  std::fill_n(gamma_total + k0, width, 0.0f);

  for (int64_t chunk_start = 0; chunk_start < d.T; chunk_start += plan::kTokensPerChunk) {
    const int64_t chunk_end = std::min(d.T, chunk_start + plan::kTokensPerChunk);
    for (int64_t f = 0; f < d.F; ++f) std::fill_n(phi_partial + f * d.K + k0, width, 0.0f);
    std::fill_n(gamma_partial + k0, width, 0.0f);

    for (int64_t t = chunk_start; t < chunk_end; ++t) {
      const float* G = G_all + t * d.F;
      for (int64_t k = k0; k < k1; ++k) v[k - k0] = p.x.load(p.x.at(t, k / d.D, k % d.D));
      std::fill_n(gu, width, 0.0f);
      for (int64_t f = 0; f < d.F; ++f) {
        const float g = G[f];
        const float* phi_row = phi + f * p.phi.stride[2];
        float* partial_row = phi_partial + f * d.K + k0;
        for (int64_t i = 0; i < width; ++i) {
          gu[i] += phi_row[(k0 + i) * p.phi.stride[3]] * g;
          partial_row[i] += g * v[i];
        }
      }
      const float c = c_all[t];
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t n = k / d.D, j = k % d.D, i = k - k0;
        float gx = p.h_pre.load(p.h_pre.at(t, 0, n)) * p.grad_h_in.load(p.grad_h_in.at(t, 0, j));
        gx += gamma[i] * gu[i];
        gx += c * v[i];
        if (p.grad_x_post.present()) gx += p.grad_x_post.load(p.grad_x_post.at(t, n, j));
        p.grad_x.store(p.grad_x.at(t, n, j), gx);
        gamma_partial[k] += v[i] * gu[i];
      }
    }
    for (int64_t f = 0; f < d.F; ++f)
      for (int64_t k = k0; k < k1; ++k) phi_total[f * d.K + k] += phi_partial[f * d.K + k];
    for (int64_t k = k0; k < k1; ++k) gamma_total[k] += gamma_partial[k];
  }

  for (int64_t f = 0; f < d.F; ++f)  // grad_phi = P * gamma (gamma broadcast over rows)
    for (int64_t k = k0; k < k1; ++k)
      p.grad_phi.store(p.grad_phi.at(f, k), phi_total[f * d.K + k] * gamma[k - k0]);
  if (p.grad_gamma.present())
    for (int64_t k = k0; k < k1; ++k) p.grad_gamma.store(p.grad_gamma.at(k / d.D, k % d.D), gamma_total[k]);
}

void backward_small_sums(const BackwardArgs& args) {
  const core::BackwardProblem& p = *args.problem;
  const plan::BackwardPlan& plan = *args.plan;
  const core::Dims& d = p.dims;
  const float* gz_all = args.workspace + plan.off_gz;
  const float* alpha_all = args.workspace + plan.off_alpha_terms;
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

}  // namespace mhc::kernels::portable
