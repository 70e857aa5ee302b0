// The main job: a realistic MhcPre forward + MhcPreBackward at T=4096, N=4,
// D=4096 in bf16 with gamma and grad_x_post, through the public C++ API; then a
// check of a sample of tokens against the float64 reference, and the timings.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/reference/reference.hpp"
#include "mhc/mhc.hpp"

namespace {

using mhc::DType;
using mhc::TensorView;

struct Rng {  // xorshift64*, uniform in [-1, 1)
  uint64_t s;
  double next() {
    s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
    return double((s * 2685821657736338717ull) >> 11) / double(1ull << 52) - 1.0;
  }
};

std::vector<uint16_t> random_bf16(size_t n, Rng& rng, double scale) {
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = mhc::core::float_to_bf16(float(rng.next() * scale));
  return v;
}
std::vector<float> random_f32(size_t n, Rng& rng, double scale, double offset = 0) {
  std::vector<float> v(n);
  for (auto& e : v) e = float(offset + rng.next() * scale);
  return v;
}

double bf16_ulp(double truth) {
  const double a = std::max(std::abs(truth), 1e-38);
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

struct Check {
  const char* name;
  double worst = 0;  // normwise relative error, or worst |err| / allowed for rounded outputs
  bool pass = true;
};

// fp32 outputs: normwise relative error <= 1e-5.
Check normwise(const char* name, const float* ours, const std::vector<double>& truth) {
  double num = 0, den = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    num += (ours[i] - truth[i]) * (ours[i] - truth[i]);
    den += truth[i] * truth[i];
  }
  const double e = std::sqrt(num / std::max(den, 1e-300));
  return {name, e, e <= 1e-5};
}

// bf16 outputs: within one ulp, or 1e-6 x the sum of the terms' magnitudes where they cancel.
Check rounded(const char* name, const uint16_t* ours, const std::vector<double>& truth,
              const std::vector<double>& magnitude) {
  Check c{name};
  for (size_t i = 0; i < truth.size(); ++i) {
    const double allowed = std::max(bf16_ulp(truth[i]), 1e-6 * magnitude[i]);
    const double ratio = std::abs(mhc::core::bf16_to_float(ours[i]) - truth[i]) / allowed;
    c.worst = std::max(c.worst, ratio);
  }
  c.pass = c.worst <= 1.0;
  return c;
}

template <class Fn>
double median_ms(Fn fn, int runs) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void require(const mhc::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "mhc error: %s\n", s.message().c_str());
    std::exit(1);
  }
}

}  // namespace

int main() {
  const int64_t T = 4096, N = 4, D = 4096, K = N * D, F = 2 * N + N * N, R = N * N;
  Rng rng{0x9e3779b97f4a7c15ull};
  // Inputs: x and the incoming gradients in bf16, parameters in fp32.
  auto x = random_bf16(T * K, rng, 2.0);
  auto phi = random_f32(F * K, rng, 1.0 / std::sqrt(double(K)));
  std::vector<float> alpha = {0.9f, 0.6f, 0.4f};
  auto bias = random_f32(F, rng, 0.5);
  auto gamma = random_f32(K, rng, 0.5, 1.0);
  auto grad_h_in = random_bf16(T * D, rng, 1.0);
  auto grad_h_post = random_f32(T * N, rng, 1.0);
  auto grad_h_res = random_f32(T * R, rng, 1.0);
  auto grad_x_post = random_bf16(T * K, rng, 0.5);
  // Outputs (allocated and touched once, as a training loop would reuse them).
  std::vector<uint16_t> h_in(T * D), grad_x(T * K);
  std::vector<float> h_post(T * N), h_res(T * R), inv_rms(T), h_mix(T * F), h_pre(T * N);
  std::vector<float> grad_phi(F * K), grad_alpha(3), grad_bias(F), grad_gamma(K);

  auto forward = [&](int64_t tokens, int64_t first) {
    const mhc::PreForwardInputs in{
        TensorView(x.data() + first * K, DType::bf16, {tokens, N, D}),
        TensorView(phi.data(), DType::fp32, {F, K}), TensorView(alpha.data(), DType::fp32, {3}),
        TensorView(bias.data(), DType::fp32, {F}), TensorView(gamma.data(), DType::fp32, {N, D})};
    const mhc::PreForwardOutputs out{
        TensorView(h_in.data() + first * D, DType::bf16, {tokens, D}),
        TensorView(h_post.data() + first * N, DType::fp32, {tokens, N}),
        TensorView(h_res.data() + first * R, DType::fp32, {tokens, N, N}),
        TensorView(inv_rms.data() + first, DType::fp32, {tokens}),
        TensorView(h_mix.data() + first * F, DType::fp32, {tokens, F}),
        TensorView(h_pre.data() + first * N, DType::fp32, {tokens, N})};
    require(mhc::pre_forward(in, out));
  };
  auto backward = [&](int64_t tokens, int64_t first) {
    const mhc::PreBackwardInputs in{
        TensorView(x.data() + first * K, DType::bf16, {tokens, N, D}),
        TensorView(phi.data(), DType::fp32, {F, K}), TensorView(alpha.data(), DType::fp32, {3}),
        TensorView(grad_h_in.data() + first * D, DType::bf16, {tokens, D}),
        TensorView(grad_h_post.data() + first * N, DType::fp32, {tokens, N}),
        TensorView(grad_h_res.data() + first * R, DType::fp32, {tokens, N, N}),
        TensorView(inv_rms.data() + first, DType::fp32, {tokens}),
        TensorView(h_mix.data() + first * F, DType::fp32, {tokens, F}),
        TensorView(h_pre.data() + first * N, DType::fp32, {tokens, N}),
        TensorView(h_post.data() + first * N, DType::fp32, {tokens, N}),
        TensorView(gamma.data(), DType::fp32, {N, D}),
        TensorView(grad_x_post.data() + first * K, DType::bf16, {tokens, N, D})};
    const mhc::PreBackwardOutputs out{
        TensorView(grad_x.data() + first * K, DType::bf16, {tokens, N, D}),
        TensorView(grad_phi.data(), DType::fp32, {F, K}), TensorView(grad_alpha.data(), DType::fp32, {3}),
        TensorView(grad_bias.data(), DType::fp32, {F}), TensorView(grad_gamma.data(), DType::fp32, {N, D})};
    require(mhc::pre_backward(in, out));
  };

  std::printf("mhc %s, kernels: %s\n", mhc_version(), mhc::isa());
  std::printf("MhcPre + MhcPreBackward: T=%lld tokens [T,N,D]=[%lld,%lld,%lld] bf16, F=%lld (2N+N*N), "
              "gamma, grad_x_post\n", (long long)T, (long long)T, (long long)N, (long long)D, (long long)F);
  forward(T, 0);  // warm-up (first touch of the outputs and workspace)
  backward(T, 0);
  const double fwd_ms = median_ms([&] { forward(T, 0); }, 5);
  const double bwd_ms = median_ms([&] { backward(T, 0); }, 5);
  const double fwd_gflop = 2.0 * T * F * K * 1e-9, bwd_gflop = 4.0 * T * F * K * 1e-9;
  std::printf("forward : %8.2f ms  (%6.1f GFLOP/s)\n", fwd_ms, fwd_gflop / fwd_ms * 1e3);
  std::printf("backward: %8.2f ms  (%6.1f GFLOP/s)\n", bwd_ms, bwd_gflop / bwd_ms * 1e3);

  // Check: a sample of 64 tokens spread over the batch against the float64
  // reference. Per-token outputs come from the full run (batch invariance makes
  // them comparable); the sums over tokens from a backward over the sample alone.
  const int64_t S = 64, first = 1237;  // a contiguous sample inside the batch
  mhc::kernels::reference::ForwardInputs64 fin;
  fin.dims = {1, S, S, N, D, K, R, F, false, false};
  for (int64_t i = 0; i < S * K; ++i) fin.x.push_back(mhc::core::bf16_to_float(x[first * K + i]));
  fin.phi.assign(phi.begin(), phi.end());
  fin.alpha.assign(alpha.begin(), alpha.end());
  fin.bias.assign(bias.begin(), bias.end());
  fin.gamma.assign(gamma.begin(), gamma.end());
  const auto fref = mhc::kernels::reference::forward(fin);

  backward(S, first);  // sums over the sample only
  mhc::kernels::reference::BackwardInputs64 bin;
  bin.dims = fin.dims;
  bin.x = fin.x; bin.phi = fin.phi; bin.alpha = fin.alpha; bin.gamma = fin.gamma;
  for (int64_t i = 0; i < S * D; ++i) bin.grad_h_in.push_back(mhc::core::bf16_to_float(grad_h_in[first * D + i]));
  for (int64_t i = 0; i < S * K; ++i) bin.grad_x_post.push_back(mhc::core::bf16_to_float(grad_x_post[first * K + i]));
  bin.grad_h_post.assign(grad_h_post.begin() + first * N, grad_h_post.begin() + (first + S) * N);
  bin.grad_h_res.assign(grad_h_res.begin() + first * R, grad_h_res.begin() + (first + S) * R);
  bin.inv_rms.assign(inv_rms.begin() + first, inv_rms.begin() + first + S);  // our caches, as a user passes them
  bin.h_mix.assign(h_mix.begin() + first * F, h_mix.begin() + (first + S) * F);
  bin.h_pre.assign(h_pre.begin() + first * N, h_pre.begin() + (first + S) * N);
  bin.h_post.assign(h_post.begin() + first * N, h_post.begin() + (first + S) * N);
  const auto bref = mhc::kernels::reference::backward(bin);

  const Check checks[] = {
      rounded("h_in", h_in.data() + first * D, fref.h_in, fref.h_in_magnitude),
      normwise("h_post", h_post.data() + first * N, fref.h_post),
      normwise("h_res", h_res.data() + first * R, fref.h_res),
      normwise("inv_rms", inv_rms.data() + first, fref.inv_rms),
      normwise("h_mix", h_mix.data() + first * F, fref.h_mix),
      normwise("h_pre", h_pre.data() + first * N, fref.h_pre),
      rounded("grad_x", grad_x.data() + first * K, bref.grad_x, bref.grad_x_magnitude),
      normwise("grad_phi", grad_phi.data(), bref.grad_phi),
      normwise("grad_alpha", grad_alpha.data(), bref.grad_alpha),
      normwise("grad_bias", grad_bias.data(), bref.grad_bias),
      normwise("grad_gamma", grad_gamma.data(), bref.grad_gamma)};
  bool all = true;
  std::printf("check vs float64 reference on tokens %lld..%lld:\n", (long long)first, (long long)(first + S - 1));
  for (const Check& c : checks) {
    const bool is_rounded = c.name == std::string_view("h_in") || c.name == std::string_view("grad_x");
    std::printf("  %-10s %s %.3g %s\n", c.name, is_rounded ? "worst error / allowed (1 bf16 ulp):" : "normwise relative error:",
                c.worst, c.pass ? "ok" : "FAIL");
    all = all && c.pass;
  }
  std::printf("check: %s\n", all ? "PASSED" : "FAILED");
  return all ? 0 : 1;
}
