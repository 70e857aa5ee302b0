// Reference MhcPre (SPEC §2): one token at a time, everything in float64.
#include <cmath>

#include "kernels/common/hf32.hpp"
#include "kernels/tables.hpp"
#include "kernels/reference/reference.hpp"
#include "kernels/reference/operand_io.hpp"

namespace mhc::kernels::reference {

static double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

ForwardOutputs64 forward(const ForwardInputs64& in) {
  const PreShape& d = in.dims;
  const int64_t T = d.T, N = d.N, D = d.D, K = d.K, F = d.F, R = d.R;
  ForwardOutputs64 out;
  out.h_in.resize(T * D);
  out.h_post.resize(d.head ? 0 : T * N);  // the head has no post branch
  out.h_res.resize(T * R);
  out.inv_rms.resize(T);
  out.h_mix.resize(T * F);
  out.h_pre.resize(T * N);
  out.h_in_magnitude.resize(T * D);
  const double alpha_pre = in.alpha[0], alpha_post = d.head ? 0.0 : in.alpha[1];
  const double alpha_res = d.alpha_entries() == 3 ? in.alpha[2] : 0.0;

  for (int64_t t = 0; t < T; ++t) {
    const double* v = &in.x[t * K];
    double sum_sq = 0;
    for (int64_t k = 0; k < K; ++k) sum_sq += v[k] * v[k];
    const double r = 1.0 / std::sqrt(sum_sq / double(K) + in.norm_eps);  // from raw x, not x*gamma

    double* m = &out.h_mix[t * F];  // m = phi . u, u = v * gamma; stored before scaling by r
    for (int64_t f = 0; f < F; ++f) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double gamma = in.gamma.empty() ? 1.0 : in.gamma[k];
        if (in.hf32)  // v * gamma is exact in float64, so float() is the fp32 product
          acc += double(common::round_hf32(float(in.phi[f * K + k]))) * common::round_hf32(float(v[k] * gamma));
        else
          acc += in.phi[f * K + k] * v[k] * gamma;
      }
      m[f] = acc;
    }
    for (int64_t n = 0; n < N; ++n) {
      out.h_pre[t * N + n] = sigmoid(alpha_pre * r * m[n] + in.bias[n]) + in.hc_eps;
      if (!d.head) out.h_post[t * N + n] = 2.0 * sigmoid(alpha_post * r * m[N + n] + in.bias[N + n]);
    }
    for (int64_t i = 0; i < R; ++i)
      out.h_res[t * R + i] = alpha_res * r * m[2 * N + i] + in.bias[2 * N + i];
    const double* w = in.pre_mix.empty() ? &out.h_pre[t * N] : &in.pre_mix[t * N];  // SPEC §14: the carried one
    for (int64_t j = 0; j < D; ++j) {
      double acc = 0, magnitude = 0;
      for (int64_t n = 0; n < N; ++n) {
        if (in.select_first_stream && n > 0) break;  // the first single-pass site: stream 0
        const double weight = in.select_first_stream ? 1.0 : w[n];
        acc += weight * v[n * D + j];
        magnitude += std::abs(weight * v[n * D + j]);
      }
      out.h_in[t * D + j] = acc;
      out.h_in_magnitude[t * D + j] = magnitude;
    }
    out.inv_rms[t] = r;
  }
  return out;
}

// Tokens [t0, t1) of a call, through forward(): its tokens are independent.
void pre_forward_tokens(const ForwardOperands& o, int64_t t0, int64_t t1) {
  PreShape d = o.shape;
  d.T = t1 - t0;
  ForwardInputs64 in;
  in.dims = d;
  in.norm_eps = o.norm_eps;
  in.hc_eps = o.hc_eps;
  in.hf32 = d.hf32;
  in.x = gather(o.x, d.x_dtype, t0, d.T, d.N, d.D);
  in.phi = gather(o.phi, d.F, d.K);
  in.alpha = gather(o.alpha, d.alpha_entries());
  in.bias = gather(o.bias, d.F);
  if (o.gamma.present()) in.gamma = gather(o.gamma, d.N, d.D);
  if (o.pre_mix.present()) in.pre_mix = gather(o.pre_mix, t0, d.T, d.N);
  in.select_first_stream = o.select_first_stream;
  const ForwardOutputs64 out = forward(in);
  scatter(o.h_in, d.x_dtype, out.h_in, t0, d.T, 1, d.D);
  if (!d.head) scatter(o.h_post, out.h_post, t0, d.T, d.N);
  if (o.h_res.present()) scatter(o.h_res, out.h_res, t0, d.T, d.R);
  if (o.h_mix.present()) {
    scatter(o.inv_rms, out.inv_rms, t0, d.T, 1);
    scatter(o.h_mix, out.h_mix, t0, d.T, d.F);
    scatter(o.h_pre, out.h_pre, t0, d.T, d.N);
  }
}

}  // namespace mhc::kernels::reference
