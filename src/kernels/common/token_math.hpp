// The scalar per-token steps every kernel family shares (SPEC §2-§3 in fp32):
// what follows the long sums in the forward, and what turns g_pre into the
// backward's per-token statistics. Vector kernels do the long sums their own way
// and call these, so the small formulas exist once.
#pragma once

#include <cmath>
#include <cstring>

#include "kernels/common/hf32.hpp"
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
inline float forward_token_finish(const ForwardOperands& o, int64_t t, float sum_sq, const float* m,
                                  float* h_pre) {
  const PreShape& d = o.shape;
  const float alpha_pre = o.alpha[0];
  const float alpha_res = d.alpha_entries() == 3 ? o.alpha[2] : 0.0f;
  const float hc_eps = float(o.hc_eps);
  const float r = 1.0f / std::sqrt(sum_sq / float(d.K) + float(o.norm_eps));
  for (int64_t n = 0; n < d.N; ++n) h_pre[n] = sigmoid(alpha_pre * (r * m[n]) + o.bias[n]) + hc_eps;
  if (!d.head) {  // the head has no post branch
    const float alpha_post = o.alpha[1];
    float* h_post = o.h_post.at(t);
    for (int64_t n = 0; n < d.N; ++n) {
      const float z_post = alpha_post * (r * m[d.N + n]) + o.bias[d.N + n];
      h_post[n] = 2.0f * sigmoid(z_post);  // with either alpha (SPEC §6)
    }
  }
  if (d.R > 0) {
    float* h_res = o.h_res.at(t);
    for (int64_t i = 0; i < d.R; ++i) h_res[i] = alpha_res * (r * m[2 * d.N + i]) + o.bias[2 * d.N + i];
  }
  if (o.h_mix.present()) {
    *o.inv_rms.at(t) = r;
    std::memcpy(o.h_mix.at(t), m, size_t(d.F) * sizeof(float));
    std::memcpy(o.h_pre.at(t), h_pre, size_t(d.N) * sizeof(float));
  }
  return r;
}

// The weights h_in collapses token t's streams with: the carried pre-mix, or h_pre.
inline const float* collapse_weights(const ForwardOperands& o, int64_t t, const float* h_pre) {
  return o.pre_mix.present() ? o.pre_mix.at(t) : h_pre;
}
// The same for grad_x's collapse term.
inline const float* collapse_weights(const BackwardOperands& o, int64_t t) {
  return o.pre_mix.present() ? o.pre_mix.at(t) : o.h_pre.at(t);
}

// Backward, token t: from g_pre[N] (= dL/dh_pre), the token's G[F] = dL/dm
// (HF32-rounded for an HF32 call: G is only an operand of the products),
// gz[F] = dL/dz, c and grad_alpha terms[3].
inline void backward_token_finish(const BackwardOperands& o, int64_t t, const float* g_pre, float* G, float* gz,
                                  float* c, float* alpha_terms_out) {
  const PreShape& d = o.shape;
  const int entries = d.alpha_entries();
  const float alpha[3] = {o.alpha[0], entries > 1 ? o.alpha[1] : 0.0f, entries > 2 ? o.alpha[2] : 0.0f};
  const float hc_eps = float(o.hc_eps);
  const float r = *o.inv_rms.at(t);
  const float* h_pre = o.h_pre.at(t);
  const float* h_mix = o.h_mix.at(t);
  // dL/dh_pre: the sums (MhcPre), grad_h_pre (single pass, SPEC §14: the sums are
  // dL/dpre_mix), or both (V4's h_pre as an output, SPEC §15).
  const float* grad_h_pre = o.grad_h_pre.present() ? o.grad_h_pre.at(t) : nullptr;
  if (grad_h_pre && o.grad_pre_mix.present()) std::memcpy(o.grad_pre_mix.at(t), g_pre, size_t(d.N) * sizeof(float));
  for (int64_t n = 0; n < d.N; ++n) {
    const float s = h_pre[n] - hc_eps;  // sigma(z_pre)
    const float g = !grad_h_pre ? g_pre[n] : o.grad_h_pre_adds ? g_pre[n] + grad_h_pre[n] : grad_h_pre[n];
    gz[n] = g * s * (1.0f - s);
  }
  if (!d.head) {  // h_post = 2 sigma(z_post)
    const float *h_post = o.h_post.at(t), *grad_h_post = o.grad_h_post.at(t);
    for (int64_t n = 0; n < d.N; ++n) gz[d.N + n] = grad_h_post[n] * h_post[n] * (1.0f - h_post[n] * 0.5f);
  }
  if (d.R > 0) std::memcpy(gz + 2 * d.N, o.grad_h_res.at(t), size_t(d.R) * sizeof(float));

  float g_r_lanes[16] = {}, alpha_terms[3] = {};
  for (int64_t f = 0; f < d.F; ++f) {
    const int branch = f < d.N ? 0 : f < 2 * d.N ? 1 : 2;
    const float m = h_mix[f];
    const float gw = alpha[branch] * gz[f];  // dL/dw
    G[f] = d.hf32 ? round_hf32(r * gw) : r * gw;  // dL/dm
    g_r_lanes[f % 16] += gw * m;
    alpha_terms[branch] += gz[f] * (r * m);
  }
  const float g_r = fold16(g_r_lanes);  // dL/dr
  *c = -(r * r * r) * g_r / float(d.K);
  std::memcpy(alpha_terms_out, alpha_terms, sizeof alpha_terms);
}

}  // namespace mhc::kernels::common
