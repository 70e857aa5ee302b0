// Portable MhcPre: plain C++ in fp32 (SPEC §2), any architecture.
#include <cmath>

#include "kernels/kernels.hpp"
#include "kernels/portable/blocked_sum.hpp"

namespace mhc::kernels::portable {

static float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

void forward_tokens(const ForwardArgs& args, int64_t t0, int64_t t1, int worker) {
  const core::ForwardProblem& p = *args.problem;
  const core::Dims& d = p.dims;
  float* v = args.scratch(worker);                                    // [K] token as fp32
  float* u = v + plan::align16(d.K);                                        // [K] v * gamma
  float* m = u + plan::align16(d.K);                                        // [F] h_mix
  float* h_pre = m + plan::align16(d.F);                                    // [N]
  const float* phi = static_cast<const float*>(p.phi.data);
  const float alpha_pre = p.alpha.load(p.alpha.at(0, 0));
  const float alpha_post = p.alpha.load(p.alpha.at(0, 1));
  const float alpha_res = d.two_entry_alpha ? 0.0f : p.alpha.load(p.alpha.at(0, 2));
  const float norm_eps = float(p.norm_eps), hc_eps = float(p.hc_eps);
  const float post_eps = d.two_entry_alpha ? hc_eps : 0.0f;

  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t j = 0; j < d.D; ++j) v[n * d.D + j] = p.x.load(p.x.at(t, n, j));
    const float r = 1.0f / std::sqrt(sum_of_squares(v, d.K) / float(d.K) + norm_eps);
    const float* gamma_applied = v;
    if (p.gamma.present()) {
      for (int64_t k = 0; k < d.K; ++k) u[k] = v[k] * p.gamma.load(p.gamma.at(k / d.D, k % d.D));
      gamma_applied = u;
    }
    for (int64_t f = 0; f < d.F; ++f)
      m[f] = dot(gamma_applied, phi + f * p.phi.stride[2], p.phi.stride[3], d.K);

    for (int64_t n = 0; n < d.N; ++n) {
      h_pre[n] = sigmoid(alpha_pre * (r * m[n]) + p.bias.load(p.bias.at(0, n))) + hc_eps;
      const float z_post = alpha_post * (r * m[d.N + n]) + p.bias.load(p.bias.at(0, d.N + n));
      p.h_post.store(p.h_post.at(t, 0, n), 2.0f * sigmoid(z_post) + post_eps);
    }
    for (int64_t i = 0; i < d.R; ++i) {
      const float z_res = alpha_res * (r * m[2 * d.N + i]) + p.bias.load(p.bias.at(0, 2 * d.N + i));
      p.h_res.store(p.h_res.residual_at(t, i), z_res);
    }
    for (int64_t j = 0; j < d.D; ++j) {
      float acc = 0.0f;  // n ascending, in fp32 (SPEC §2)
      for (int64_t n = 0; n < d.N; ++n) acc += h_pre[n] * v[n * d.D + j];
      p.h_in.store(p.h_in.at(t, 0, j), acc);
    }
    if (p.h_mix.present()) {
      p.inv_rms.store(p.inv_rms.at(t, 0, 0), r);
      for (int64_t f = 0; f < d.F; ++f) p.h_mix.store(p.h_mix.at(t, 0, f), m[f]);
      for (int64_t n = 0; n < d.N; ++n) p.h_pre.store(p.h_pre.at(t, 0, n), h_pre[n]);
    }
  }
}

}  // namespace mhc::kernels::portable
