// The main job: one mHC layer's operators forward and backward at T=4096, N=4,
// D=4096 in bf16, through the public C++ API: MhcPre (with gamma), MhcSinkhorn
// (20 iterations), MhcPost around a sub-layer whose output is given, then
// MhcPostBackward, MhcSinkhornBackward (recomputing from z) and MhcPreBackward
// with the post's grad_x as grad_x_post; the timings; and a check of a sample of
// tokens: the pre block against the float64 reference family (Options::isa), the
// Sinkhorn and the post against the library's float64 references of SPEC §10-§11.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "kernels/reference/post.hpp"
#include "kernels/reference/sinkhorn.hpp"
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

// fp32 sums of n terms: |error| <= n u sum|terms| (u = 2^-24), the textbook bound
// for sums in a fixed order; reports the worst error / bound.
Check summed(const char* name, const float* ours, const std::vector<double>& truth, const std::vector<double>& magnitude,
             int64_t terms) {
  Check c{name};
  for (size_t i = 0; i < truth.size(); ++i) {
    const double bound = std::max(double(terms) * std::ldexp(1.0, -24) * magnitude[i], 1e-300);
    c.worst = std::max(c.worst, std::abs(ours[i] - truth[i]) / bound);
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
  const int I = 20;  // Sinkhorn iterations
  const double eps = 1e-6;
  Rng rng{0x9e3779b97f4a7c15ull};
  // Inputs: x, the sub-layer's output h_out and the incoming gradients in bf16
  // (grad_x_next: of the layer's output; grad_h_in: what the sub-layer's backward
  // hands back), parameters in fp32.
  auto x = random_bf16(T * K, rng, 2.0);
  auto phi = random_f32(F * K, rng, 1.0 / std::sqrt(double(K)));
  std::vector<float> alpha = {0.9f, 0.6f, 0.4f};
  auto bias = random_f32(F, rng, 0.5);
  auto gamma = random_f32(K, rng, 0.5, 1.0);
  auto h_out = random_bf16(T * D, rng, 1.0);
  auto grad_x_next = random_bf16(T * K, rng, 1.0);
  auto grad_h_in = random_bf16(T * D, rng, 1.0);
  // Outputs (allocated and touched once, as a training loop would reuse them).
  std::vector<uint16_t> h_in(T * D), x_next(T * K), grad_x_post(T * K), grad_h_out(T * D), grad_x(T * K);
  std::vector<float> h_post(T * N), h_res(T * R), inv_rms(T), h_mix(T * F), h_pre(T * N), H(T * R);
  std::vector<float> grad_H(T * R), grad_h_post(T * N), grad_h_res(T * R);
  std::vector<float> grad_phi(F * K), grad_alpha(3), grad_bias(F), grad_gamma(K);

  auto sinkhorn = [&] {
    require(mhc::sinkhorn_forward({TensorView(h_res.data(), DType::fp32, {T, N, N}), eps, I},
                                  {TensorView(H.data(), DType::fp32, {T, N, N})}));
  };
  auto post = [&] {
    require(mhc::post_forward({TensorView(x.data(), DType::bf16, {T, N, D}), TensorView(H.data(), DType::fp32, {T, N, N}),
                               TensorView(h_out.data(), DType::bf16, {T, D}), TensorView(h_post.data(), DType::fp32, {T, N})},
                              {TensorView(x_next.data(), DType::bf16, {T, N, D})}));
  };
  auto post_backward = [&] {
    require(mhc::post_backward(
        {TensorView(grad_x_next.data(), DType::bf16, {T, N, D}), TensorView(x.data(), DType::bf16, {T, N, D}),
         TensorView(H.data(), DType::fp32, {T, N, N}), TensorView(h_out.data(), DType::bf16, {T, D}),
         TensorView(h_post.data(), DType::fp32, {T, N})},
        {TensorView(grad_x_post.data(), DType::bf16, {T, N, D}), TensorView(grad_H.data(), DType::fp32, {T, N, N}),
         TensorView(grad_h_out.data(), DType::bf16, {T, D}), TensorView(grad_h_post.data(), DType::fp32, {T, N})}));
  };
  auto sinkhorn_backward = [&] {  // from z alone: the forward is recomputed per token
    require(mhc::sinkhorn_backward({TensorView(grad_H.data(), DType::fp32, {T, N, N}), std::nullopt, std::nullopt,
                                    TensorView(h_res.data(), DType::fp32, {T, N, N}), eps, I},
                                   {TensorView(grad_h_res.data(), DType::fp32, {T, N, N})}));
  };
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
  std::printf("one mHC layer: T=%lld tokens, x [T,N,D]=[%lld,%lld,%lld] bf16, F=%lld (2N+N*N), gamma, "
              "%d Sinkhorn iterations\n", (long long)T, (long long)T, (long long)N, (long long)D, (long long)F, I);
  std::printf("  forward : MhcPre -> MhcSinkhorn(h_res) -> [sub-layer: h_out given] -> MhcPost\n");
  std::printf("  backward: MhcPostBackward -> MhcSinkhornBackward (from z) -> MhcPreBackward (grad_x_post = "
              "the post's grad_x)\n");
  // Warm-up in the layer's order (first touch of outputs and workspace), then each timed.
  forward(T, 0), sinkhorn(), post(), post_backward(), sinkhorn_backward(), backward(T, 0);
  const double pre_ms = median_ms([&] { forward(T, 0); }, 5), sinkhorn_ms = median_ms(sinkhorn, 5);
  const double post_ms = median_ms(post, 5), post_bwd_ms = median_ms(post_backward, 5);
  const double sinkhorn_bwd_ms = median_ms(sinkhorn_backward, 5), pre_bwd_ms = median_ms([&] { backward(T, 0); }, 5);
  const double fwd_gflop = 2.0 * T * F * K * 1e-9, bwd_gflop = 4.0 * T * F * K * 1e-9;
  const double post_gb = (2.0 * T * K * 2 + T * D * 2) * 1e-9, post_bwd_gb = (3.0 * T * K * 2 + 2.0 * T * D * 2) * 1e-9;
  std::printf("MhcPre              : %8.2f ms  (%6.1f GFLOP/s)\n", pre_ms, fwd_gflop / pre_ms * 1e3);
  std::printf("MhcSinkhorn         : %8.2f ms\n", sinkhorn_ms);
  std::printf("MhcPost             : %8.2f ms  (%6.1f GB/s)\n", post_ms, post_gb / post_ms * 1e3);
  std::printf("MhcPostBackward     : %8.2f ms  (%6.1f GB/s)\n", post_bwd_ms, post_bwd_gb / post_bwd_ms * 1e3);
  std::printf("MhcSinkhornBackward : %8.2f ms  (recomputing the forward)\n", sinkhorn_bwd_ms);
  std::printf("MhcPreBackward      : %8.2f ms  (%6.1f GFLOP/s)\n", pre_bwd_ms, bwd_gflop / pre_bwd_ms * 1e3);
  std::printf("layer forward %.2f ms, backward %.2f ms\n", pre_ms + sinkhorn_ms + post_ms,
              post_bwd_ms + sinkhorn_bwd_ms + pre_bwd_ms);

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

  // The Sinkhorn and the post on the same tokens, by the float64 references
  // (kernels/reference), on the fp32 values the library read.
  namespace ref = mhc::kernels::reference;
  auto token = [](const std::vector<float>& v, int64_t at, int64_t n) {
    return std::vector<double>(v.begin() + at * n, v.begin() + (at + 1) * n);
  };
  std::vector<float> h64f(S * R), grad_z64f(S * R);
  for (int64_t t = 0; t < S; ++t) {
    const std::vector<double> z = token(h_res, first + t, R), grad = token(grad_H, first + t, R);
    const ref::Sinkhorn64 f = ref::sinkhorn_forward(z.data(), N, I, double(float(eps)));
    const std::vector<double> grad_z = ref::sinkhorn_backward(f, grad.data());
    for (int64_t e = 0; e < R; ++e) h64f[t * R + e] = float(f.H()[e]), grad_z64f[t * R + e] = float(grad_z[e]);
  }
  std::vector<float> x_next64, grad_x_post64, grad_h_out64;
  std::vector<double> x_next_magnitude, grad_x_post_magnitude, grad_h_out_magnitude, grad_H64, grad_H_magnitude,
      grad_h_post64, grad_h_post_magnitude;
  auto append = [](auto& to, const std::vector<double>& from) { to.insert(to.end(), from.begin(), from.end()); };
  const std::vector<float> h_out32 = widened(h_out.data() + first * D, S * D);
  const std::vector<float> g32 = widened(grad_x_next.data() + first * K, S * K);
  for (int64_t t = 0; t < S; ++t) {
    const std::vector<double> xt = token(x32, t, K), Ht = token(H, first + t, R), ho = token(h_out32, t, D),
                              hp = token(h_post, first + t, N), g = token(g32, t, K);
    const ref::PostToken64 operands{N, D, xt.data(), Ht.data(), ho.data(), hp.data()};
    const ref::PostForward64 out = ref::post_forward(operands);
    const ref::PostBackward64 grads = ref::post_backward(operands, g.data());
    x_next64.insert(x_next64.end(), out.out.begin(), out.out.end());
    append(x_next_magnitude, out.out_magnitude);
    grad_x_post64.insert(grad_x_post64.end(), grads.grad_x.begin(), grads.grad_x.end());
    append(grad_x_post_magnitude, grads.grad_x_magnitude);
    grad_h_out64.insert(grad_h_out64.end(), grads.grad_h_out.begin(), grads.grad_h_out.end());
    append(grad_h_out_magnitude, grads.grad_h_out_magnitude);
    append(grad_H64, grads.grad_h_res), append(grad_H_magnitude, grads.grad_h_res_magnitude);
    append(grad_h_post64, grads.grad_h_post), append(grad_h_post_magnitude, grads.grad_h_post_magnitude);
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
      normwise("grad_gamma", grad_gamma.data(), rgrad_gamma),
      normwise("H", H.data() + first * R, h64f),
      normwise("grad_z", grad_h_res.data() + first * R, grad_z64f),
      rounded("x_next", x_next.data() + first * K, x_next64, x_next_magnitude),
      rounded("grad_x_post", grad_x_post.data() + first * K, grad_x_post64, grad_x_post_magnitude),
      summed("grad_H", grad_H.data() + first * R, grad_H64, grad_H_magnitude, D),
      rounded("grad_h_out", grad_h_out.data() + first * D, grad_h_out64, grad_h_out_magnitude),
      summed("grad_h_post", grad_h_post.data() + first * N, grad_h_post64, grad_h_post_magnitude, D)};
  bool all = true;
  std::printf("check on tokens %lld..%lld: MhcPre's outputs against the float64 reference family, the Sinkhorn's "
              "and the post's against their float64 references:\n", (long long)first, (long long)(first + S - 1));
  for (const Check& c : checks) {
    const std::string_view name = c.name;
    const bool is_rounded = name == "h_in" || name == "grad_x" || name == "x_next" || name == "grad_x_post" ||
                            name == "grad_h_out";
    const bool is_summed = name == "grad_H" || name == "grad_h_post";
    std::printf("  %-12s %s %.3g %s\n", c.name,
                is_rounded ? "worst error / allowed (1 bf16 ulp):"
                : is_summed ? "worst error / fp32 sum bound (D u sum|terms|):"
                            : "normwise relative error:",
                c.worst, c.pass ? "ok" : "FAIL");
    all = all && c.pass;
  }
  std::printf("check: %s\n", all ? "PASSED" : "FAILED");
  return all ? 0 : 1;
}
