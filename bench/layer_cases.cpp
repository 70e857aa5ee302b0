// The layer operators' benchmark cases (layer_cases.hpp).
#include "layer_cases.hpp"

#include <cstdlib>
#include <memory>

namespace mhc_bench {
namespace {

using mhc::DType;
using mhc::TensorView;

struct Buffer {
  void* data = nullptr;
  explicit Buffer(size_t bytes) : data(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64))) {
    if (data == nullptr) std::exit(1);
    zero(data, int64_t(bytes));
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

template <class Call>
LayerCase timed(const char* name, const char* op, const std::string& shape, OperatorCost cost, int threads, int runs,
                double min_seconds, Call call) {
  LayerCase c{name, op, shape, cost, {}, {}};
  c.main_timing = time_calls([&] { call(threads); }, runs, min_seconds, 1000);
  if (threads > 1) c.one_thread_timing = time_calls([&] { call(1); }, runs, min_seconds, 1000);
  return c;
}

std::vector<LayerCase> post_cases(int threads, int runs, double min_seconds) {
  const int64_t T = 4096, N = 4, D = 4096;
  const double e = 2;  // bf16
  Buffer x(T * N * D * 2), h_res(T * N * N * 4), h_out(T * D * 2), h_post(T * N * 4), out(T * N * D * 2);
  Buffer grad_out(T * N * D * 2), grad_x(T * N * D * 2), grad_h_res(T * N * N * 4), grad_h_out(T * D * 2),
      grad_h_post(T * N * 4);
  fill_activation(x.data, DType::bf16, T * N * D, 1, 1.0f);
  fill_activation(h_out.data, DType::bf16, T * D, 2, 1.0f);
  fill_activation(grad_out.data, DType::bf16, T * N * D, 3, 1.0f);
  fill_f32(h_res.data, T * N * N, 4, 0.5f, 0.25f);
  fill_f32(h_post.data, T * N, 5, 1.0f, 1.0f);
  const mhc::PostForwardInputs in{TensorView(x.data, DType::bf16, {T, N, D}),
                                  TensorView(h_res.data, DType::fp32, {T, N, N}),
                                  TensorView(h_out.data, DType::bf16, {T, D}),
                                  TensorView(h_post.data, DType::fp32, {T, N})};
  const mhc::PostForwardOutputs fwd_out{TensorView(out.data, DType::bf16, {T, N, D})};
  const mhc::PostBackwardInputs bwd_in{TensorView(grad_out.data, DType::bf16, {T, N, D}), in.x, in.h_res, in.h_out,
                                       in.h_post};
  const mhc::PostBackwardOutputs bwd_out{TensorView(grad_x.data, DType::bf16, {T, N, D}),
                                         TensorView(grad_h_res.data, DType::fp32, {T, N, N}),
                                         TensorView(grad_h_out.data, DType::bf16, {T, D}),
                                         TensorView(grad_h_post.data, DType::fp32, {T, N})};
  const double small = T * N * N * 4.0 + T * N * 4.0;  // h_res, h_post
  OperatorCost fwd{double(T * N * D) * (2 * N + 2), 2 * T * N * D * e + T * D * e + small};
  OperatorCost bwd{double(T * N * D) * (2 * N + 2 * N + 2) + double(T * D) * 2 * N,
                   3 * T * N * D * e + 2 * T * D * e + 2 * small};
  const std::string shape = "T=4096 N=4 D=4096 bf16";
  std::vector<LayerCase> cases;
  cases.push_back(timed("post", "forward", shape, fwd, threads, runs, min_seconds, [&](int n) {
    mhc::Options o;
    o.num_threads = n;
    require(mhc::post_forward(in, fwd_out, o), "post forward");
  }));
  cases.push_back(timed("post", "backward", shape, bwd, threads, runs, min_seconds, [&](int n) {
    mhc::Options o;
    o.num_threads = n;
    require(mhc::post_backward(bwd_in, bwd_out, o), "post backward");
  }));
  return cases;
}

std::vector<LayerCase> sinkhorn_cases(int threads, int runs, double min_seconds) {
  const int64_t T = 65536, N = 4, I = 20, P = 8;
  Buffer z(T * N * N * 4), h(T * N * N * 4), grad_h(T * N * N * 4), grad_z(T * N * N * 4);
  Buffer norm_out(2 * I * T * N * P * 4), sum_out(2 * I * T * P * 4);
  fill_f32(z.data, T * N * N, 6, 4.0f, -2.0f);
  fill_f32(grad_h.data, T * N * N, 7, 2.0f, -1.0f);
  const TensorView zv(z.data, DType::fp32, {T, N, N}), hv(h.data, DType::fp32, {T, N, N});
  const TensorView norm(norm_out.data, DType::fp32, {2 * I, T, N, P}), sum(sum_out.data, DType::fp32, {2 * I, T, P});
  const TensorView gh(grad_h.data, DType::fp32, {T, N, N}), gz(grad_z.data, DType::fp32, {T, N, N});
  const double matrix = T * N * N * 4.0, caches = 2.0 * I * T * (N * P + P) * 4;
  // flops: the softmax (an exp taken as 12 operations, a max, an add, a division per
  // entry) and 2I-1 normalisations of an add and a division per entry; the backward
  // twice that per normalisation.
  const double fwd_flops = double(T * N * N) * (15 + 2 * (2 * I - 1));
  const double bwd_flops = double(T * N * N) * (4 + 4 * (2 * I - 1));
  const std::string shape = "T=65536 N=4 I=20";
  auto options = [](int n) { mhc::Options o; o.num_threads = n; return o; };
  std::vector<LayerCase> cases;
  cases.push_back(timed("sinkhorn", "forward", shape + " caches", {fwd_flops, 2 * matrix + caches}, threads, runs,
                        min_seconds, [&](int n) {
                          require(mhc::sinkhorn_forward({zv, 1e-6, I}, {hv, norm, sum}, options(n)), "sinkhorn forward");
                        }));
  cases.push_back(timed("sinkhorn", "backward", shape + " caches", {bwd_flops, 2 * matrix + caches}, threads, runs,
                        min_seconds, [&](int n) {
                          require(mhc::sinkhorn_backward({gh, norm, sum, std::nullopt}, {gz}, options(n)),
                                  "sinkhorn backward");
                        }));
  cases.push_back(timed("sinkhorn", "fwd+bwd", shape + " recompute", {2 * fwd_flops + bwd_flops, 5 * matrix}, threads,
                        runs, min_seconds, [&](int n) {
                          require(mhc::sinkhorn_forward({zv, 1e-6, I}, {hv, std::nullopt, std::nullopt}, options(n)),
                                  "sinkhorn forward");
                          require(mhc::sinkhorn_backward({gh, std::nullopt, std::nullopt, zv, 1e-6, I}, {gz},
                                                         options(n)),
                                  "sinkhorn backward");
                        }));
  return cases;
}

}  // namespace

bool is_layer_case(const std::string& name) { return name == "post" || name == "sinkhorn"; }

std::vector<LayerCase> run_layer_cases(const std::string& name, int threads, int runs, double min_seconds) {
  if (name == "post") return post_cases(threads, runs, min_seconds);
  return sinkhorn_cases(threads, runs, min_seconds);
}

}  // namespace mhc_bench
