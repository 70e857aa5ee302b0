// The scalar per-token steps every kernel family shares (SPEC §2-§3 in fp32):
// what follows the long sums in the forward, and what turns g_pre into the
// backward's per-token statistics. Vector kernels do the long sums their own way
// and call these, so the small formulas exist once.
#pragma once

#include <cmath>
#include <cstring>

#include "kernels/pre_backward.hpp"
#include "kernels/pre_forward.hpp"

namespace mhc::kernels::common {

inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// 16 partial sums folded by a fixed tree (the order is part of the bits).
inline float fold16(float (&acc)[16]) {
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0];
}

// Forward, token t: from sum(v^2) and m = phi.u, write h_post, h_res and the caches,
// and leave h_pre[N] for h_in. Returns r.
inline float forward_token_finish(const core::ForwardProblem& p, int64_t t, float sum_sq, const float* m,
                                  float* h_pre) {
  const core::Dims& d = p.dims;
  const float alpha_pre = p.alpha.load(p.alpha.at(0, 0));
  const float alpha_post = p.alpha.load(p.alpha.at(0, 1));
  const float alpha_res = d.two_entry_alpha ? 0.0f : p.alpha.load(p.alpha.at(0, 2));
  const float hc_eps = float(p.hc_eps);
  const float post_eps = d.two_entry_alpha ? hc_eps : 0.0f;
  const float r = 1.0f / std::sqrt(sum_sq / float(d.K) + float(p.norm_eps));
  for (int64_t n = 0; n < d.N; ++n) {
    h_pre[n] = sigmoid(alpha_pre * (r * m[n]) + p.bias.load(p.bias.at(0, n))) + hc_eps;
    const float z_post = alpha_post * (r * m[d.N + n]) + p.bias.load(p.bias.at(0, d.N + n));
    p.h_post.store(p.h_post.at(t, 0, n), 2.0f * sigmoid(z_post) + post_eps);
  }
  for (int64_t i = 0; i < d.R; ++i) {
    const float z_res = alpha_res * (r * m[2 * d.N + i]) + p.bias.load(p.bias.at(0, 2 * d.N + i));
    p.h_res.store(p.h_res.residual_at(t, i), z_res);
  }
  if (p.h_mix.present()) {
    p.inv_rms.store(p.inv_rms.at(t, 0, 0), r);
    for (int64_t f = 0; f < d.F; ++f) p.h_mix.store(p.h_mix.at(t, 0, f), m[f]);
    for (int64_t n = 0; n < d.N; ++n) p.h_pre.store(p.h_pre.at(t, 0, n), h_pre[n]);
  }
  return r;
}

// Backward, token t: from g_pre[N] (= dL/dh_pre), the token's G[F] = dL/dm,
// gz[F] = dL/dz, c and grad_alpha terms[3].
inline void backward_token_finish(const core::BackwardProblem& p, int64_t t, const float* g_pre, float* G, float* gz,
                                  float* c, float* alpha_terms_out) {
  const core::Dims& d = p.dims;
  const float alpha[3] = {p.alpha.load(p.alpha.at(0, 0)), p.alpha.load(p.alpha.at(0, 1)),
                          d.two_entry_alpha ? 0.0f : p.alpha.load(p.alpha.at(0, 2))};
  const float hc_eps = float(p.hc_eps);
  const float r = p.inv_rms.load(p.inv_rms.at(t, 0, 0));

  for (int64_t n = 0; n < d.N; ++n) {
    const float s = p.h_pre.load(p.h_pre.at(t, 0, n)) - hc_eps;  // sigma(z_pre)
    gz[n] = g_pre[n] * s * (1.0f - s);
    const float h_post = p.h_post.load(p.h_post.at(t, 0, n));
    const float grad_post = p.grad_h_post.load(p.grad_h_post.at(t, 0, n));
    if (d.two_entry_alpha) {  // h_post = 2 sigma + hc_eps
      const float sg = (h_post - hc_eps) * 0.5f;
      gz[d.N + n] = grad_post * (2.0f * sg * (1.0f - sg));
    } else {  // h_post = 2 sigma
      gz[d.N + n] = grad_post * h_post * (1.0f - h_post * 0.5f);
    }
  }
  for (int64_t i = 0; i < d.R; ++i) gz[2 * d.N + i] = p.grad_h_res.load(p.grad_h_res.residual_at(t, i));

  float g_r_lanes[16] = {}, alpha_terms[3] = {};
  for (int64_t f = 0; f < d.F; ++f) {
    const int branch = f < d.N ? 0 : f < 2 * d.N ? 1 : 2;
    const float m = p.h_mix.load(p.h_mix.at(t, 0, f));
    const float gw = alpha[branch] * gz[f];  // dL/dw
    G[f] = r * gw;                           // dL/dm
    g_r_lanes[f % 16] += gw * m;
    alpha_terms[branch] += gz[f] * (r * m);
  }
  const float g_r = fold16(g_r_lanes);  // dL/dr
  *c = -(r * r * r) * g_r / float(d.K);
  std::memcpy(alpha_terms_out, alpha_terms, sizeof alpha_terms);
}

}  // namespace mhc::kernels::common
