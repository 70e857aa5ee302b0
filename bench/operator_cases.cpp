// Shapes, cost model, buffers and timed calls (see operator_cases.hpp).
#include "operator_cases.hpp"

#include "core/dtype.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace mhc_bench {

using mhc::DType;
using mhc::TensorView;

const char* ShapeSpec::dtype_name() const {
  return dtype == DType::bf16 ? "bf16" : dtype == DType::fp16 ? "fp16" : "fp32";
}

std::vector<ShapeSpec> canonical_shapes() {
  return {
      {"a", 4096, 4, 4096, DType::bf16, true, true, true, "training, DeepSeek-V4 D=4096"},
      {"b", 16384, 4, 7168, DType::bf16, true, true, true, "large training micro-batch, D=7168"},
      {"c", 2048, 8, 2048, DType::fp16, false, false, true, "N=8, fp16, no gamma"},
      {"d", 1024, 4, 512, DType::bf16, true, true, true, "CANN's sample"},
      {"e", 1, 4, 7168, DType::bf16, true, false, false, "decode latency (forward only)"},
  };
}

// ---- cost model (docs/performance.md, "What is counted") -----------------------
OperatorCost forward_cost(const ShapeSpec& s) {
  const double T = double(s.T), N = double(s.N), D = double(s.D), K = double(s.K());
  const double F = double(s.F()), R = double(s.R()), e = double(s.element_bytes()), g = s.gamma;
  OperatorCost c;
  // per token: phi.u (2FK), sum of squares (2K), v*gamma (K), h_in (2K: N*D mul+add),
  // r*m, alpha*w + bias (3F)
  c.flops = T * (2 * F * K + 2 * K + g * K + 2 * K + 3 * F);
  c.bytes = T * K * e                      // x
            + F * K * 4 + 3 * 4 + F * 4    // phi, alpha, bias
            + g * K * 4                    // gamma
            + T * D * e                    // h_in
            + T * N * 4 + T * R * 4        // h_post, h_res
            + T * 4 + T * F * 4 + T * N * 4;  // caches inv_rms, h_mix, h_pre
  return c;
}

OperatorCost backward_cost(const ShapeSpec& s) {
  const double T = double(s.T), N = double(s.N), D = double(s.D), K = double(s.K());
  const double F = double(s.F()), R = double(s.R()), e = double(s.element_bytes());
  const double g = s.gamma, p = s.grad_x_post;
  OperatorCost c;
  // per token: gu = phi^T G (2FK), grad_phi accumulation G v^T (2FK), g_pre (2K),
  // grad_x = h_pre*g_h_in + gamma*gu + c*v (+ grad_x_post): (4 + g + p) K,
  // grad_gamma accumulation v*gu (2K with gamma), G, g_r and the small sums (~6F)
  c.flops = T * (4 * F * K + 2 * K + (4 + g + p) * K + 2 * g * K + 6 * F);
  c.bytes = T * K * e                                  // x
            + F * K * 4 + 3 * 4                        // phi, alpha
            + T * D * e                                // grad_h_in
            + T * N * 4 + T * R * 4                    // grad_h_post, grad_h_res
            + T * 4 + T * F * 4 + T * N * 4 + T * N * 4  // inv_rms, h_mix, h_pre, h_post
            + g * K * 4                                // gamma
            + p * T * K * e                            // grad_x_post
            + T * K * e                                // grad_x
            + F * K * 4 + 3 * 4 + F * 4                // grad_phi, grad_alpha, grad_bias
            + g * K * 4;                               // grad_gamma
  return c;
}

// ---- buffers --------------------------------------------------------------------
namespace {

// Deterministic uniform [-1, 1) from an index (splitmix64), so the fill can be split
// over threads and gives the same data whatever the split.
inline float uniform_at(uint64_t seed, uint64_t i) {
  uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(double(z >> 11) / double(1ull << 52) - 1.0);
}

inline uint16_t to_bf16(float f) {  // round to nearest, ties to even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline uint16_t to_fp16(float f) { return mhc::core::float_to_fp16(f); }  // any compiler

template <class Fn>
void parallel_indices(int64_t n, Fn fn) {
  const int workers = std::max(1, std::min<int>(int(std::thread::hardware_concurrency()), 8));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([=] { for (int64_t i = n * w / workers; i < n * (w + 1) / workers; ++i) fn(i); });
  for (auto& t : pool) t.join();
}

}  // namespace

void fill_activation(void* p, DType t, int64_t n, uint64_t seed, float scale) {
  if (t == DType::fp32) {
    auto* f = static_cast<float*>(p);
    parallel_indices(n, [=](int64_t i) { f[i] = scale * uniform_at(seed, i); });
  } else {
    auto* h = static_cast<uint16_t*>(p);
    const bool bf = t == DType::bf16;
    parallel_indices(n, [=](int64_t i) {
      const float v = scale * uniform_at(seed, i);
      h[i] = bf ? to_bf16(v) : to_fp16(v);
    });
  }
}

void fill_f32(void* p, int64_t n, uint64_t seed, float scale, float offset) {
  auto* f = static_cast<float*>(p);
  parallel_indices(n, [=](int64_t i) { f[i] = offset + scale * uniform_at(seed, i); });
}

void zero(void* p, int64_t bytes) {
  auto* c = static_cast<char*>(p);
  parallel_indices((bytes + 4095) / 4096, [=](int64_t page) {
    const int64_t lo = page * 4096;
    std::memset(c + lo, 0, size_t(std::min<int64_t>(4096, bytes - lo)));
  });
}

void require(const mhc::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "mhc-bench: %s failed: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

void* ShapeBuffers::allocate(size_t bytes) {
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  if (!p) {
    std::fprintf(stderr, "mhc-bench: cannot allocate %zu bytes for shape %s\n", bytes, s_.name.c_str());
    std::exit(1);
  }
  blocks_.push_back(p);
  total_bytes_ += int64_t(rounded);
  zero(p, int64_t(rounded));  // touch every page now, never inside a timed call
  return p;
}

ShapeBuffers::ShapeBuffers(const ShapeSpec& spec) : s_(spec) {
  const int64_t T = s_.T, N = s_.N, D = s_.D, K = s_.K(), F = s_.F(), R = s_.R();
  const int64_t e = s_.element_bytes();
  x_ = allocate(T * K * e);
  phi_ = allocate(F * K * 4);
  alpha_ = allocate(3 * 4);
  bias_ = allocate(F * 4);
  gamma_ = s_.gamma ? allocate(K * 4) : nullptr;
  grad_h_in_ = allocate(T * D * e);
  grad_h_post_ = allocate(T * N * 4);
  grad_h_res_ = allocate(T * R * 4);
  grad_x_post_ = s_.grad_x_post ? allocate(T * K * e) : nullptr;
  h_in_ = allocate(T * D * e);
  h_post_ = allocate(T * N * 4);
  h_res_ = allocate(T * R * 4);
  inv_rms_ = allocate(T * 4);
  h_mix_ = allocate(T * F * 4);
  h_pre_ = allocate(T * N * 4);
  grad_x_ = allocate(T * K * e);
  grad_phi_ = allocate(F * K * 4);
  grad_alpha_ = allocate(3 * 4);
  grad_bias_ = allocate(F * 4);
  grad_gamma_ = s_.gamma ? allocate(K * 4) : nullptr;

  fill_activation(x_, s_.dtype, T * K, 1, 2.0f);
  fill_f32(phi_, F * K, 2, float(1.0 / std::sqrt(double(K))));
  const float alpha[3] = {0.9f, 0.6f, 0.4f};
  std::memcpy(alpha_, alpha, sizeof alpha);
  fill_f32(bias_, F, 3, 0.5f);
  if (gamma_) fill_f32(gamma_, K, 4, 0.5f, 1.0f);
  fill_activation(grad_h_in_, s_.dtype, T * D, 5, 1.0f);
  fill_f32(grad_h_post_, T * N, 6, 1.0f);
  fill_f32(grad_h_res_, T * R, 7, 1.0f);
  if (grad_x_post_) fill_activation(grad_x_post_, s_.dtype, T * K, 8, 0.5f);
  // The backward's caches and h_post: from one forward call.
  require(mhc::pre_forward(forward_inputs(), forward_outputs()), "forward (caches)");
}

ShapeBuffers::~ShapeBuffers() {
  for (void* p : blocks_) std::free(p);
}

mhc::PreForwardInputs ShapeBuffers::forward_inputs() const {
  const int64_t N = s_.N, D = s_.D, K = s_.K(), F = s_.F(), T = s_.T;
  mhc::PreForwardInputs in{TensorView(x_, s_.dtype, {T, N, D}), TensorView(phi_, DType::fp32, {F, K}),
                           TensorView(alpha_, DType::fp32, {3}), TensorView(bias_, DType::fp32, {F}),
                           std::nullopt};
  if (gamma_) in.gamma = TensorView(gamma_, DType::fp32, {N, D});
  return in;
}

mhc::PreForwardOutputs ShapeBuffers::forward_outputs() const {
  const int64_t N = s_.N, D = s_.D, F = s_.F(), T = s_.T;
  return {TensorView(h_in_, s_.dtype, {T, D}), TensorView(h_post_, DType::fp32, {T, N}),
          TensorView(h_res_, DType::fp32, {T, N, N}), TensorView(inv_rms_, DType::fp32, {T}),
          TensorView(h_mix_, DType::fp32, {T, F}), TensorView(h_pre_, DType::fp32, {T, N})};
}

mhc::PreBackwardInputs ShapeBuffers::backward_inputs() const {
  const int64_t N = s_.N, D = s_.D, K = s_.K(), F = s_.F(), T = s_.T;
  mhc::PreBackwardInputs in{TensorView(x_, s_.dtype, {T, N, D}),
                            TensorView(phi_, DType::fp32, {F, K}),
                            TensorView(alpha_, DType::fp32, {3}),
                            TensorView(grad_h_in_, s_.dtype, {T, D}),
                            TensorView(grad_h_post_, DType::fp32, {T, N}),
                            TensorView(grad_h_res_, DType::fp32, {T, N, N}),
                            TensorView(inv_rms_, DType::fp32, {T}),
                            TensorView(h_mix_, DType::fp32, {T, F}),
                            TensorView(h_pre_, DType::fp32, {T, N}),
                            TensorView(h_post_, DType::fp32, {T, N}),
                            std::nullopt,
                            std::nullopt};
  if (gamma_) in.gamma = TensorView(gamma_, DType::fp32, {N, D});
  if (grad_x_post_) in.grad_x_post = TensorView(grad_x_post_, s_.dtype, {T, N, D});
  return in;
}

mhc::PreBackwardOutputs ShapeBuffers::backward_outputs() const {
  const int64_t N = s_.N, D = s_.D, K = s_.K(), F = s_.F(), T = s_.T;
  mhc::PreBackwardOutputs out{TensorView(grad_x_, s_.dtype, {T, N, D}),
                              TensorView(grad_phi_, DType::fp32, {F, K}),
                              TensorView(grad_alpha_, DType::fp32, {3}),
                              TensorView(grad_bias_, DType::fp32, {F}), std::nullopt};
  if (grad_gamma_) out.grad_gamma = TensorView(grad_gamma_, DType::fp32, {N, D});
  return out;
}

// ---- timing ---------------------------------------------------------------------
double Timing::median() const {
  const size_t n = ms.size();
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}


Timing time_forward(const ShapeBuffers& b, int threads, int min_runs, double min_seconds, int max_runs) {
  const auto in = b.forward_inputs();
  const auto out = b.forward_outputs();
  mhc::Options options;
  options.num_threads = threads;
  return time_calls([&] { require(mhc::pre_forward(in, out, options), "forward"); }, min_runs,
                    min_seconds, max_runs);
}

Timing time_backward(const ShapeBuffers& b, int threads, int min_runs, double min_seconds, int max_runs) {
  const auto in = b.backward_inputs();
  const auto out = b.backward_outputs();
  mhc::Options options;
  options.num_threads = threads;
  return time_calls([&] { require(mhc::pre_backward(in, out, options), "backward"); }, min_runs,
                    min_seconds, max_runs);
}

}  // namespace mhc_bench
