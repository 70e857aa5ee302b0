// Reference MhcPreBackward (SPEC §3): one token at a time, everything in
// float64, sums over tokens in token order.
#include <cmath>

#include "kernels/common/hf32.hpp"
#include "kernels/common/post_grad_x.hpp"
#include "kernels/tables.hpp"
#include "kernels/reference/reference.hpp"
#include "kernels/reference/operand_io.hpp"

namespace mhc::kernels::reference {

BackwardOutputs64 backward(const BackwardInputs64& in) {
  const PreShape& d = in.dims;
  const int64_t T = d.T, N = d.N, D = d.D, K = d.K, F = d.F, R = d.R;
  const int entries = d.alpha_entries();
  const double alpha[3] = {in.alpha[0], entries > 1 ? in.alpha[1] : 0.0, entries > 2 ? in.alpha[2] : 0.0};
  auto gamma = [&](int64_t k) { return in.gamma.empty() ? 1.0 : in.gamma[k]; };
  auto branch_of = [&](int64_t f) { return f < N ? 0 : f < 2 * N ? 1 : 2; };

  BackwardOutputs64 out;
  out.grad_x.assign(T * K, 0.0);
  out.grad_x_magnitude.assign(T * K, 0.0);
  out.grad_phi.assign(F * K, 0.0);  // sum_t G_t v_t^T, times gamma at the end (HF32: of the rounded operands)
  out.grad_alpha.assign(size_t(entries), 0.0);
  out.grad_alpha_magnitude.assign(size_t(entries), 0.0);
  out.grad_bias.assign(F, 0.0);
  out.grad_gamma.assign(K, 0.0);
  const bool single_pass = !in.grad_h_pre.empty();
  if (single_pass) out.grad_pre_mix.assign(T * N, 0.0);
  std::vector<double> gz(F), G(F), gu(K);
  // The products' operands: phi, G and u = v * gamma, HF32-rounded for an HF32 call.
  auto hf32 = [&](double value) { return in.hf32 ? double(common::round_hf32(float(value))) : value; };
  std::vector<double> phi_operand(in.phi), G_operand(F), u_operand(K);
  for (double& w : phi_operand) w = hf32(w);

  for (int64_t t = 0; t < T; ++t) {
    const double* v = &in.x[t * K];
    const double* grad_h_in = &in.grad_h_in[t * D];
    const double* m = &in.h_mix[t * F];
    const double r = in.inv_rms[t];

    for (int64_t n = 0; n < N; ++n) {
      double g_pre = 0;  // dL/dh_pre
      for (int64_t j = 0; j < D; ++j) g_pre += v[n * D + j] * grad_h_in[j];
      if (single_pass) {  // SPEC §14: the sums are dL/dpre_mix; h_pre's gradient comes in
        out.grad_pre_mix[t * N + n] = g_pre;
        g_pre = in.grad_h_pre_adds ? g_pre + in.grad_h_pre[t * N + n] : in.grad_h_pre[t * N + n];
      }
      const double s = in.h_pre[t * N + n] - in.hc_eps;  // sigma(z_pre)
      gz[n] = g_pre * s * (1.0 - s);
      if (d.head) continue;  // no post branch
      const double h_post = in.h_post[t * N + n], grad_post = in.grad_h_post[t * N + n];
      gz[N + n] = grad_post * h_post * (1.0 - h_post / 2.0);  // h_post = 2 sigma, with either alpha
    }
    for (int64_t i = 0; i < R; ++i) gz[2 * N + i] = in.grad_h_res[t * R + i];

    double g_r = 0;  // dL/dr
    for (int64_t f = 0; f < F; ++f) {
      const double gw = alpha[branch_of(f)] * gz[f];  // dL/dw
      G[f] = r * gw;                                   // dL/dm
      g_r += gw * m[f];
      out.grad_bias[f] += gz[f];
      out.grad_alpha[branch_of(f)] += gz[f] * r * m[f];
      out.grad_alpha_magnitude[branch_of(f)] += std::abs(gz[f] * r * m[f]);
    }
    const double c = -r * r * r * g_r / double(K);

    for (int64_t f = 0; f < F; ++f) G_operand[f] = hf32(G[f]);
    for (int64_t k = 0; k < K; ++k) u_operand[k] = in.hf32 ? hf32(v[k] * gamma(k)) : v[k];
    for (int64_t k = 0; k < K; ++k) {
      double acc = 0;  // dL/du = phi^T G
      for (int64_t f = 0; f < F; ++f) acc += phi_operand[f * K + k] * G_operand[f];
      gu[k] = acc;
    }
    const double* w = in.pre_mix.empty() ? &in.h_pre[t * N] : &in.pre_mix[t * N];  // the collapse's weights
    for (int64_t k = 0; k < K; ++k) {
      const int64_t n = k / D, j = k % D;
      const double terms[4] = {w[n] * grad_h_in[j], gamma(k) * gu[k], c * v[k],
                               in.grad_x_post.empty() ? 0.0 : in.grad_x_post[t * K + k]};
      out.grad_x[t * K + k] = terms[0] + terms[1] + terms[2] + terms[3];
      out.grad_x_magnitude[t * K + k] =
          std::abs(terms[0]) + std::abs(terms[1]) + std::abs(terms[2]) + std::abs(terms[3]);
      out.grad_gamma[k] += v[k] * gu[k];
      for (int64_t f = 0; f < F; ++f) out.grad_phi[f * K + k] += G_operand[f] * u_operand[k];
    }
  }
  if (!in.hf32)  // sum_t G_t (v_t * gamma)^T: gamma taken out of the sum
    for (int64_t f = 0; f < F; ++f)
      for (int64_t k = 0; k < K; ++k) out.grad_phi[f * K + k] *= gamma(k);
  return out;
}

void pre_backward(const BackwardOperands& o) {
  const PreShape& d = o.shape;
  BackwardInputs64 in;
  in.dims = d;
  in.hc_eps = o.hc_eps;
  in.hf32 = d.hf32;
  in.x = gather(o.x, d.x_dtype, 0, d.T, d.N, d.D);
  in.phi = gather(o.phi, d.F, d.K);
  in.alpha = gather(o.alpha, d.alpha_entries());
  if (o.gamma.present()) in.gamma = gather(o.gamma, d.N, d.D);
  in.grad_h_in = gather(o.grad_h_in, d.x_dtype, 0, d.T, 1, d.D);
  if (!d.head) in.grad_h_post = gather(o.grad_h_post, 0, d.T, d.N);
  if (o.grad_h_res.present()) in.grad_h_res = gather(o.grad_h_res, 0, d.T, d.R);
  in.inv_rms = gather(o.inv_rms, 0, d.T, 1);
  in.h_mix = gather(o.h_mix, 0, d.T, d.F);
  in.h_pre = gather(o.h_pre, 0, d.T, d.N);
  if (!d.head) in.h_post = gather(o.h_post, 0, d.T, d.N);
  if (o.grad_x_post.present()) in.grad_x_post = gather(o.grad_x_post, o.grad_x_post_dtype, 0, d.T, d.N, d.D);
  if (o.post_grad_out.present()) {  // the site backward's finish: the post's fp32 grad_x, as its family forms it
    in.grad_x_post.resize(size_t(d.T * d.K));
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t n = 0; n < d.N; ++n)
        for (int64_t j = 0; j < d.D; ++j)
          in.grad_x_post[size_t(t * d.K + n * d.D + j)] = common::post_grad_x(o.post_h_res.at(t), d.N, n, [&](int64_t row) {
            return core::load_element(o.post_grad_out.data, d.x_dtype, o.post_grad_out.at(t, row) + j);
          });
  }
  if (o.pre_mix.present()) in.pre_mix = gather(o.pre_mix, 0, d.T, d.N);
  if (o.grad_h_pre.present()) in.grad_h_pre = gather(o.grad_h_pre, 0, d.T, d.N);
  in.grad_h_pre_adds = o.grad_h_pre_adds;
  const BackwardOutputs64 out = backward(in);
  if (o.grad_pre_mix.present()) scatter(o.grad_pre_mix, out.grad_pre_mix, 0, d.T, d.N);
  scatter(o.grad_x, d.x_dtype, out.grad_x, 0, d.T, d.N, d.D);
  scatter(o.grad_phi, out.grad_phi, d.F, d.K);
  scatter(o.grad_alpha, out.grad_alpha);
  scatter(o.grad_bias, out.grad_bias);
  if (o.grad_gamma.present()) scatter(o.grad_gamma, out.grad_gamma, d.N, d.D);
}

}  // namespace mhc::kernels::reference
