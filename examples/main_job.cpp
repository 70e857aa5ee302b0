// The main job: a realistic MhcPre forward + MhcPreBackward at T=4096, N=4,
// D=4096 in bf16 with gamma and grad_x_post, through the public C++ API; then a
// check of a sample of tokens against the float64 reference (the `reference`
// family, asked for with Options::isa, on the same tokens in fp32), and the timings.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "mhc/mhc.h"
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

float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_bf16(float f) {  // round to nearest even (finite values)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

std::vector<uint16_t> random_bf16(size_t n, Rng& rng, double scale) {
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = float_to_bf16(float(rng.next() * scale));
  return v;
}
std::vector<float> widened(const uint16_t* bf16, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bf16_to_float(bf16[i]);
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
Check normwise(const char* name, const float* ours, const std::vector<float>& truth) {
  double num = 0, den = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    num += (ours[i] - truth[i]) * (ours[i] - truth[i]);
    den += truth[i] * truth[i];
  }
  const double e = std::sqrt(num / std::max(den, 1e-300));
  return {name, e, e <= 1e-5};
}

// bf16 outputs: within one ulp, or 1e-6 x the sum of the terms' magnitudes where they cancel.
Check rounded(const char* name, const uint16_t* ours, const std::vector<float>& truth,
              const std::vector<double>& magnitude) {
  Check c{name};
  for (size_t i = 0; i < truth.size(); ++i) {
    const double allowed = std::max(bf16_ulp(truth[i]), 1e-6 * magnitude[i]);
    const double ratio = std::abs(bf16_to_float(ours[i]) - double(truth[i])) / allowed;
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

  // Check: a sample of 64 tokens inside the batch against the float64 reference
  // family on the same tokens, widened to fp32 (exactly), its outputs rounded once
  // to fp32. Per-token outputs come from the full run (batch invariance makes them
  // comparable); the sums over tokens from a backward over the sample alone.
  const int64_t S = 64, first = 1237;  // a contiguous sample inside the batch
  mhc::Options reference;
  reference.isa = mhc::Isa::reference;
  const std::vector<float> x32 = widened(x.data() + first * K, S * K);
  const std::vector<float> grad_h_in32 = widened(grad_h_in.data() + first * D, S * D);
  const std::vector<float> grad_x_post32 = widened(grad_x_post.data() + first * K, S * K);
  std::vector<float> rh_in(S * D), rh_post(S * N), rh_res(S * R), rinv_rms(S), rh_mix(S * F), rh_pre(S * N);
  require(mhc::pre_forward(
      {TensorView(x32.data(), DType::fp32, {S, N, D}), TensorView(phi.data(), DType::fp32, {F, K}),
       TensorView(alpha.data(), DType::fp32, {3}), TensorView(bias.data(), DType::fp32, {F}),
       TensorView(gamma.data(), DType::fp32, {N, D})},
      {TensorView(rh_in.data(), DType::fp32, {S, D}), TensorView(rh_post.data(), DType::fp32, {S, N}),
       TensorView(rh_res.data(), DType::fp32, {S, N, N}), TensorView(rinv_rms.data(), DType::fp32, {S}),
       TensorView(rh_mix.data(), DType::fp32, {S, F}), TensorView(rh_pre.data(), DType::fp32, {S, N})},
      reference));

  backward(S, first);  // sums over the sample only
  std::vector<float> rgrad_x(S * K), rgrad_phi(F * K), rgrad_alpha(3), rgrad_bias(F), rgrad_gamma(K);
  require(mhc::pre_backward(
      {TensorView(x32.data(), DType::fp32, {S, N, D}), TensorView(phi.data(), DType::fp32, {F, K}),
       TensorView(alpha.data(), DType::fp32, {3}), TensorView(grad_h_in32.data(), DType::fp32, {S, D}),
       TensorView(grad_h_post.data() + first * N, DType::fp32, {S, N}),
       TensorView(grad_h_res.data() + first * R, DType::fp32, {S, N, N}),
       // our caches, as a user passes them
       TensorView(inv_rms.data() + first, DType::fp32, {S}), TensorView(h_mix.data() + first * F, DType::fp32, {S, F}),
       TensorView(h_pre.data() + first * N, DType::fp32, {S, N}), TensorView(h_post.data() + first * N, DType::fp32, {S, N}),
       TensorView(gamma.data(), DType::fp32, {N, D}), TensorView(grad_x_post32.data(), DType::fp32, {S, N, D})},
      {TensorView(rgrad_x.data(), DType::fp32, {S, N, D}), TensorView(rgrad_phi.data(), DType::fp32, {F, K}),
       TensorView(rgrad_alpha.data(), DType::fp32, {3}), TensorView(rgrad_bias.data(), DType::fp32, {F}),
       TensorView(rgrad_gamma.data(), DType::fp32, {N, D})},
      reference));

  // The scale of each bf16 output's rounding where its terms cancel: h_in's
  // sum_n |h_pre x|; grad_x's |h_pre grad_h_in| + |grad_x_post| + |the rest|.
  std::vector<double> h_in_magnitude(S * D, 0.0), grad_x_magnitude(S * K);
  for (int64_t t = 0; t < S; ++t)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        const double h = h_pre[(first + t) * N + n];
        h_in_magnitude[t * D + d] += std::abs(h * x32[(t * N + n) * D + d]);
        const double from_h_in = h * grad_h_in32[t * D + d], post = grad_x_post32[(t * N + n) * D + d];
        grad_x_magnitude[(t * N + n) * D + d] =
            std::abs(from_h_in) + std::abs(post) + std::abs(rgrad_x[(t * N + n) * D + d] - from_h_in - post);
      }

  const Check checks[] = {
      rounded("h_in", h_in.data() + first * D, rh_in, h_in_magnitude),
      normwise("h_post", h_post.data() + first * N, rh_post),
      normwise("h_res", h_res.data() + first * R, rh_res),
      normwise("inv_rms", inv_rms.data() + first, rinv_rms),
      normwise("h_mix", h_mix.data() + first * F, rh_mix),
      normwise("h_pre", h_pre.data() + first * N, rh_pre),
      rounded("grad_x", grad_x.data() + first * K, rgrad_x, grad_x_magnitude),
      normwise("grad_phi", grad_phi.data(), rgrad_phi),
      normwise("grad_alpha", grad_alpha.data(), rgrad_alpha),
      normwise("grad_bias", grad_bias.data(), rgrad_bias),
      normwise("grad_gamma", grad_gamma.data(), rgrad_gamma)};
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
