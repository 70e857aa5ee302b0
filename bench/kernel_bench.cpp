// mhc-kernel-bench: Google Benchmark cases per microkernel and target, and the
// operators per kernel family at small batches, so that a kernel experiment is
// a named case. `build/bench/mhc-kernel-bench --benchmark_filter=GemmTile` runs
// one kind; counters give flops or bytes per second.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/portable/blocked_sum.hpp"
#include "kernels/registry.hpp"
#include "kernels/simd/microkernels.hpp"
#include "mhc/mhc.hpp"
#if defined(MHC_WITH_AMX)
#include "kernels/amx/phi_parts.hpp"
#endif

namespace {

using mhc::DType;
using mhc::kernels::simd::Microkernels;

// floats on a 64-byte boundary, filled with small values.
struct Floats {
  explicit Floats(size_t n, float fill = 0.25f) : storage(n + 16, fill), data(storage.data()) {
    while (reinterpret_cast<uintptr_t>(data) % 64 != 0) ++data;
  }
  std::vector<float> storage;
  float* data;
};

std::vector<const Microkernels*> simd_targets() {
#if defined(MHC_WITH_SIMD)
  return mhc::kernels::simd::runnable_microkernels();
#else
  return {};
#endif
}

// GemmTile/<target>/<tokens>x<rows>: one tile over 128 column vectors (the SIMD forward's block loop).
void gemm_tile(benchmark::State& state, const Microkernels* m, int tokens, int rows) {
  const int64_t vectors = 128, w_stride = vectors * m->lanes + 16;
  Floats u(static_cast<size_t>(tokens * m->u_row_floats)), w(static_cast<size_t>(rows * w_stride)), acc(static_cast<size_t>(tokens * rows * m->lanes));
  for (auto _ : state) {
    m->gemm_tile(tokens, rows, u.data, w.data, w_stride, vectors, acc.data, rows * m->lanes, false);
    benchmark::DoNotOptimize(acc.data);
  }
  state.counters["flops"] = benchmark::Counter(double(2 * tokens * rows * vectors * m->lanes) * double(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

// StripBlock/<target>/rows:<R>/last:<0|1>: one strip over a 64-token chunk (the backward's column loop).
void strip_block(benchmark::State& state, const Microkernels* m, int rows, bool last) {
  const int64_t tokens = 64, F = 24, L = m->lanes;
  Floats G(static_cast<size_t>(tokens * F)), phi(static_cast<size_t>(rows * L)), gu(static_cast<size_t>(tokens * m->token_floats)), totals(static_cast<size_t>(F * L)),
      c(static_cast<size_t>(tokens)), gamma(static_cast<size_t>(L), 1.0f), gamma_total(static_cast<size_t>(L));
  std::vector<uint16_t> v(static_cast<size_t>(tokens * (L + 32)), 0x3e80);
  std::vector<const float*> phi_rows(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) phi_rows[static_cast<size_t>(r)] = phi.data + r * L;
  for (auto _ : state) {
    m->strip_block(rows, last, DType::bf16, G.data, F, tokens, 0, phi_rows.data(), v.data(), L + 32, gu.data, false, L,
                   totals.data, L, c.data, gamma.data, gamma_total.data, nullptr);
    benchmark::DoNotOptimize(gu.data);
  }
  state.counters["flops"] = benchmark::Counter(double(4 * tokens * rows * L) * double(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

// ScaleRow/<target>/bf16: u = v*gamma and its sum of squares over a row of 4096.
void scale_row(benchmark::State& state, const Microkernels* m) {
  const int64_t count = 4096;
  std::vector<uint16_t> x(static_cast<size_t>(count), 0x3f00);
  Floats gamma(static_cast<size_t>(count), 1.0f), u(static_cast<size_t>(count)), sq(static_cast<size_t>(m->lanes));
  for (auto _ : state) {
    benchmark::DoNotOptimize(m->scale_row(DType::bf16, x.data(), gamma.data, count, u.data, sq.data));
  }
  state.counters["bytes"] = benchmark::Counter(double(count * 10) * double(state.iterations()), benchmark::Counter::kIsRate);
}

// WeightedRows/<target>/bf16: h_in of one token at N = 4, D = 4096.
void weighted_rows(benchmark::State& state, const Microkernels* m) {
  const int64_t N = 4, D = 4096;
  std::vector<uint16_t> x(static_cast<size_t>(N * D), 0x3f00), out(static_cast<size_t>(D));
  const float h_pre[4] = {0.25f, 0.25f, 0.25f, 0.25f};
  for (auto _ : state) {
    m->weighted_rows(DType::bf16, x.data(), D, h_pre, N, D, out.data(), false);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes"] = benchmark::Counter(double((N + 1) * D * 2) * double(state.iterations()),
                                               benchmark::Counter::kIsRate);
}

// RoundHf32/<target>: a row of 4096 fp32 values rounded to HF32 in place.
void round_hf32(benchmark::State& state, const Microkernels* m) {
  const int64_t count = 4096;
  Floats values(static_cast<size_t>(count), 1.2345f);
  for (auto _ : state) {
    m->round_hf32(values.data, count);
    benchmark::DoNotOptimize(values.data);
  }
  state.counters["bytes"] = benchmark::Counter(double(count * 8) * double(state.iterations()), benchmark::Counter::kIsRate);
}

// PortableDot/4096: the portable family's 16-lane dot.
void portable_dot(benchmark::State& state) {
  const int64_t n = 4096;
  Floats a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (auto _ : state) benchmark::DoNotOptimize(mhc::kernels::portable::dot(a.data, b.data, 1, n));
  state.counters["flops"] = benchmark::Counter(double(2 * n) * double(state.iterations()), benchmark::Counter::kIsRate);
}

#if defined(MHC_WITH_AMX)
// AmxSplitStep: 32 values of phi.gamma into three bf16 parts (the AMX forward's packing).
void amx_split_step(benchmark::State& state) {
  Floats values(32, 0.3f);
  alignas(64) uint16_t parts[3 * 32];
  for (auto _ : state) {
    benchmark::DoNotOptimize(mhc::kernels::amx::split_step(values.data, parts));
    benchmark::ClobberMemory();
  }
  state.counters["values"] = benchmark::Counter(32.0 * double(state.iterations()), benchmark::Counter::kIsRate);
}
#endif

// PreForward/<family>/T:<T> and PreBackward/<family>/T:<T>: the operators at
// N = 4, D = 4096 (the forward also at 7168, V4's width), bf16, with gamma, 2
// threads, through Options::isa (small batches: how items are cut and what one
// call costs).
struct Operands {
  explicit Operands(int64_t T, int64_t D = 4096) : D(D), K(N * D), T(T) {
    x.assign(static_cast<size_t>(T * K), 0x3e80);
    grad_h_in.assign(static_cast<size_t>(T * D), 0x3e80);
    phi.assign(static_cast<size_t>(F * K), 0.001f);
    gamma.assign(static_cast<size_t>(K), 1.0f);
    bias.assign(static_cast<size_t>(F), 0.0f);
    h_in.assign(static_cast<size_t>(T * D), 0);
    grad_x.assign(static_cast<size_t>(T * K), 0);
    per_token_f.assign(static_cast<size_t>(T * F), 0.0f);
    h_post.assign(static_cast<size_t>(T * N), 0.0f);
    h_pre.assign(static_cast<size_t>(T * N), 0.0f);
    h_res.assign(static_cast<size_t>(T * N * N), 0.0f);
    inv_rms.assign(static_cast<size_t>(T), 0.0f);
    grad_h_post.assign(static_cast<size_t>(T * N), 0.1f);
    grad_h_res.assign(static_cast<size_t>(T * N * N), 0.1f);
    grad_phi.assign(static_cast<size_t>(F * K), 0.0f);
    grad_gamma.assign(static_cast<size_t>(K), 0.0f);
  }
  static constexpr int64_t N = 4, F = 2 * N + N * N;
  int64_t D, K, T;
  std::vector<uint16_t> x, grad_h_in, h_in, grad_x;
  std::vector<float> phi, gamma, bias, per_token_f, h_post, h_pre, h_res, inv_rms, grad_h_post, grad_h_res, grad_phi,
      grad_gamma;
  float alpha[3] = {0.8f, 0.5f, 0.3f}, grad_alpha[3] = {}, grad_bias[F] = {};

  mhc::PreForwardInputs forward_in() {
    return {mhc::TensorView(x.data(), DType::bf16, {T, N, D}), mhc::TensorView(phi.data(), DType::fp32, {F, K}),
            mhc::TensorView(alpha, DType::fp32, {3}), mhc::TensorView(bias.data(), DType::fp32, {F}),
            mhc::TensorView(gamma.data(), DType::fp32, {N, D})};
  }
  mhc::PreForwardOutputs forward_out() {
    return {mhc::TensorView(h_in.data(), DType::bf16, {T, D}), mhc::TensorView(h_post.data(), DType::fp32, {T, N}),
            mhc::TensorView(h_res.data(), DType::fp32, {T, N, N}), mhc::TensorView(inv_rms.data(), DType::fp32, {T}),
            mhc::TensorView(per_token_f.data(), DType::fp32, {T, F}), mhc::TensorView(h_pre.data(), DType::fp32, {T, N})};
  }
  mhc::PreBackwardInputs backward_in() {
    return {mhc::TensorView(x.data(), DType::bf16, {T, N, D}),      mhc::TensorView(phi.data(), DType::fp32, {F, K}),
            mhc::TensorView(alpha, DType::fp32, {3}),               mhc::TensorView(grad_h_in.data(), DType::bf16, {T, D}),
            mhc::TensorView(grad_h_post.data(), DType::fp32, {T, N}), mhc::TensorView(grad_h_res.data(), DType::fp32, {T, N, N}),
            mhc::TensorView(inv_rms.data(), DType::fp32, {T}),     mhc::TensorView(per_token_f.data(), DType::fp32, {T, F}),
            mhc::TensorView(h_pre.data(), DType::fp32, {T, N}),    mhc::TensorView(h_post.data(), DType::fp32, {T, N}),
            mhc::TensorView(gamma.data(), DType::fp32, {N, D}),    std::nullopt};
  }
  mhc::PreBackwardOutputs backward_out() {
    return {mhc::TensorView(grad_x.data(), DType::bf16, {T, N, D}), mhc::TensorView(grad_phi.data(), DType::fp32, {F, K}),
            mhc::TensorView(grad_alpha, DType::fp32, {3}), mhc::TensorView(grad_bias, DType::fp32, {F}),
            mhc::TensorView(grad_gamma.data(), DType::fp32, {N, D})};
  }
};

void pre_forward(benchmark::State& state, mhc::Isa isa, int64_t T,
                 mhc::MatmulPrecision precision = mhc::MatmulPrecision::fp32, int64_t D = 4096) {
  Operands o(T, D);
  mhc::Options options;
  options.isa = isa;
  options.num_threads = 2;
  options.matmul_precision = precision;
  for (auto _ : state)
    if (!mhc::pre_forward(o.forward_in(), o.forward_out(), options).ok()) {
      state.SkipWithError("pre_forward failed");
      break;
    }
}

void pre_backward(benchmark::State& state, mhc::Isa isa, int64_t T,
                  mhc::MatmulPrecision precision = mhc::MatmulPrecision::fp32) {
  Operands o(T);
  mhc::Options options;
  options.isa = isa;
  options.num_threads = 2;
  options.matmul_precision = precision;
  if (!mhc::pre_forward(o.forward_in(), o.forward_out(), options).ok()) {
    state.SkipWithError("pre_forward failed");
    return;
  }
  for (auto _ : state)
    if (!mhc::pre_backward(o.backward_in(), o.backward_out(), options).ok()) {
      state.SkipWithError("pre_backward failed");
      break;
    }
}

// PostBackward/<family>/T:16: MhcPostBackward at N = 4, D = 4096, bf16, with h_res,
// on 1 thread: 16 tokens' operands (1.8 MB) stay in L2, so this is the kernel's
// compute cost per token, which decides how much of the streaming it can hide.
void post_backward(benchmark::State& state, mhc::Isa isa) {
  constexpr int64_t T = 16, N = 4, D = 4096;
  std::vector<uint16_t> grad_out(T * N * D, 0x3e80), x(T * N * D, 0x3f00), h_out(T * D, 0x3e00), grad_x(T * N * D),
      grad_h_out(T * D);
  std::vector<float> h_res(T * N * N, 0.25f), h_post(T * N, 0.5f), grad_h_res(T * N * N), grad_h_post(T * N);
  const mhc::PostBackwardInputs in{mhc::TensorView(grad_out.data(), DType::bf16, {T, N, D}),
                                   mhc::TensorView(x.data(), DType::bf16, {T, N, D}),
                                   mhc::TensorView(h_res.data(), DType::fp32, {T, N, N}),
                                   mhc::TensorView(h_out.data(), DType::bf16, {T, D}),
                                   mhc::TensorView(h_post.data(), DType::fp32, {T, N})};
  const mhc::PostBackwardOutputs out{mhc::TensorView(grad_x.data(), DType::bf16, {T, N, D}),
                                     mhc::TensorView(grad_h_res.data(), DType::fp32, {T, N, N}),
                                     mhc::TensorView(grad_h_out.data(), DType::bf16, {T, D}),
                                     mhc::TensorView(grad_h_post.data(), DType::fp32, {T, N})};
  mhc::Options options;
  options.isa = isa;
  options.num_threads = 1;
  for (auto _ : state)
    if (!mhc::post_backward(in, out, options).ok()) {
      state.SkipWithError("post_backward failed");
      break;
    }
  state.counters["per_token"] =
      benchmark::Counter(double(T) * double(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

int main(int argc, char** argv) {
  for (const Microkernels* m : simd_targets()) {
    const std::string t = m->target;
    for (int tokens = 1; tokens <= m->tile_tokens; ++tokens)
      for (int rows : {1, m->tile_rows})
        benchmark::RegisterBenchmark(("GemmTile/" + t + "/" + std::to_string(tokens) + "x" + std::to_string(rows)).c_str(),
                                     gemm_tile, m, tokens, rows);
    for (int rows : {1, m->block_rows})
      for (bool last : {false, true})
        benchmark::RegisterBenchmark(
            ("StripBlock/" + t + "/rows:" + std::to_string(rows) + "/last:" + std::to_string(int(last))).c_str(),
            strip_block, m, rows, last);
    benchmark::RegisterBenchmark(("ScaleRow/" + t + "/bf16").c_str(), scale_row, m);
    benchmark::RegisterBenchmark(("WeightedRows/" + t + "/bf16").c_str(), weighted_rows, m);
    benchmark::RegisterBenchmark(("RoundHf32/" + t).c_str(), round_hf32, m);
  }
  benchmark::RegisterBenchmark("PortableDot/4096", portable_dot);
#if defined(MHC_WITH_AMX)
  if (mhc::kernels::amx::tiles_usable()) benchmark::RegisterBenchmark("AmxSplitStep", amx_split_step);
#endif
  for (mhc::Isa isa : mhc::available_isas()) {
    if (isa == mhc::Isa::reference) continue;  // the float64 oracle: not a speed to track
    for (int64_t T : {1, 16, 64, 256}) {
      const std::string suffix = std::string(mhc::isa_name(isa)) + "/T:" + std::to_string(T);
      benchmark::RegisterBenchmark(("PreForward/" + suffix).c_str(), [isa, T](benchmark::State& state) {
        pre_forward(state, isa, T);
      })->UseRealTime();
      benchmark::RegisterBenchmark(("PreBackward/" + suffix).c_str(), [isa, T](benchmark::State& state) {
        pre_backward(state, isa, T);
      })->UseRealTime();
    }
    for (int64_t T : {1, 16, 64}) {
      const std::string wide = std::string(mhc::isa_name(isa)) + "/T:" + std::to_string(T) + "/D:7168";
      benchmark::RegisterBenchmark(("PreForward/" + wide).c_str(), [isa, T](benchmark::State& state) {
        pre_forward(state, isa, T, mhc::MatmulPrecision::fp32, 7168);
      })->UseRealTime();
    }
    benchmark::RegisterBenchmark(("PostBackward/" + std::string(mhc::isa_name(isa)) + "/T:16").c_str(),
                                 [isa](benchmark::State& state) { post_backward(state, isa); });
    // HF32 products (matmul_precision hf32): the rounding's cost against the cases above.
    const std::string hf32 = std::string(mhc::isa_name(isa)) + "/T:256/hf32";
    benchmark::RegisterBenchmark(("PreForward/" + hf32).c_str(), [isa](benchmark::State& state) {
      pre_forward(state, isa, 256, mhc::MatmulPrecision::hf32);
    })->UseRealTime();
    benchmark::RegisterBenchmark(("PreBackward/" + hf32).c_str(), [isa](benchmark::State& state) {
      pre_backward(state, isa, 256, mhc::MatmulPrecision::hf32);
    })->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
