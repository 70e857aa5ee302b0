// A program using the C++ API of an installed mhc (find_package(mhc), mhc::mhc or
// mhc::mhc_static): a tiny forward and backward, checked for finite outputs.
#include <cmath>
#include <cstdio>
#include <vector>

#include <mhc/mhc.hpp>

int main() {
  const int64_t T = 3, N = 4, D = 8, K = N * D, F = 2 * N + N * N;
  std::vector<float> x(T * K), phi(F * K), alpha = {0.5f, 0.5f, 0.5f}, bias(F, 0.1f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i));
  for (size_t i = 0; i < phi.size(); ++i) phi[i] = 0.05f * std::cos(0.11f * float(i));
  std::vector<float> h_in(T * D), h_post(T * N), h_res(T * N * N), inv_rms(T), h_mix(T * F), h_pre(T * N);
  using mhc::DType;
  using mhc::TensorView;
  const mhc::Status forward = mhc::pre_forward(
      {TensorView(x.data(), DType::fp32, {T, N, D}), TensorView(phi.data(), DType::fp32, {F, K}),
       TensorView(alpha.data(), DType::fp32, {3}), TensorView(bias.data(), DType::fp32, {F}), std::nullopt},
      {TensorView(h_in.data(), DType::fp32, {T, D}), TensorView(h_post.data(), DType::fp32, {T, N}),
       TensorView(h_res.data(), DType::fp32, {T, N, N}), TensorView(inv_rms.data(), DType::fp32, {T}),
       TensorView(h_mix.data(), DType::fp32, {T, F}), TensorView(h_pre.data(), DType::fp32, {T, N})});
  if (!forward.ok()) { std::fprintf(stderr, "%s\n", forward.message().c_str()); return 1; }
  std::vector<float> ones_d(T * D, 1.0f), ones_n(T * N, 1.0f), ones_r(T * N * N, 1.0f);
  std::vector<float> grad_x(T * K), grad_phi(F * K), grad_alpha(3), grad_bias(F);
  const mhc::Status backward = mhc::pre_backward(
      {TensorView(x.data(), DType::fp32, {T, N, D}), TensorView(phi.data(), DType::fp32, {F, K}),
       TensorView(alpha.data(), DType::fp32, {3}), TensorView(ones_d.data(), DType::fp32, {T, D}),
       TensorView(ones_n.data(), DType::fp32, {T, N}), TensorView(ones_r.data(), DType::fp32, {T, N, N}),
       TensorView(inv_rms.data(), DType::fp32, {T}), TensorView(h_mix.data(), DType::fp32, {T, F}),
       TensorView(h_pre.data(), DType::fp32, {T, N}), TensorView(h_post.data(), DType::fp32, {T, N}),
       std::nullopt, std::nullopt},
      {TensorView(grad_x.data(), DType::fp32, {T, N, D}), TensorView(grad_phi.data(), DType::fp32, {F, K}),
       TensorView(grad_alpha.data(), DType::fp32, {3}), TensorView(grad_bias.data(), DType::fp32, {F}),
       std::nullopt});
  if (!backward.ok()) { std::fprintf(stderr, "%s\n", backward.message().c_str()); return 1; }
  for (float g : grad_x)
    if (!std::isfinite(g)) return 1;
  std::printf("mhc %s (%s): h_in[0]=%g grad_x[0]=%g grad_alpha=[%g %g %g]\n", mhc_version(), mhc::isa(),
              h_in[0], grad_x[0], grad_alpha[0], grad_alpha[1], grad_alpha[2]);
  return 0;
}
