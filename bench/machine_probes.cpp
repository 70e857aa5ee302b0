// The FMA-peak and triad-bandwidth probes (see machine_probes.hpp).
#include "machine_probes.hpp"
#include "operator_cases.hpp"  // amx_tiles_usable, amx_tile_chains (library_internals.cpp)

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

namespace mhc_bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs body(worker) on `threads` threads, each pinned to CPU (worker % cpus),
// released together; returns the wall time of the slowest worker.
template <class Body>
double run_on_threads(int threads, Body body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> elapsed(threads, 0.0);
  auto worker = [&](int w) {
    const int cpus = std::max(1, int(std::thread::hardware_concurrency()));
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w % cpus, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) {}
    const auto t0 = Clock::now();
    body(w);
    elapsed[w] = seconds_since(t0);
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w) pool.emplace_back(worker, w);
  while (ready.load() < threads - 1) {}
  go.store(true, std::memory_order_release);
  // Worker 0 runs on the calling thread; restore its affinity afterwards.
  cpu_set_t saved;
  sched_getaffinity(0, sizeof saved, &saved);
  ready.fetch_add(1);
  worker(0);
  sched_setaffinity(0, sizeof saved, &saved);
  for (auto& t : pool) t.join();
  return *std::max_element(elapsed.begin(), elapsed.end());
}

// ---- FMA peak: independent dependency chains, all in registers ----------------
// acc = acc * a + b with a slightly below 1 keeps every value finite and normal.
// 16 chains of 16 lanes (AVX-512, 32 zmm registers) and 12 chains of 8 lanes
// (AVX2, 16 ymm registers) hide the 4-cycle FMA latency on two FMA ports.
constexpr int kAvx512Chains = 16, kAvx2Chains = 12;

__attribute__((target("avx512f"), noinline)) float fma_chains_avx512(int64_t iterations) {
  __m512 acc[kAvx512Chains];
  for (int j = 0; j < kAvx512Chains; ++j) acc[j] = _mm512_set1_ps(0.001f * float(j + 1));
  const __m512 a = _mm512_set1_ps(0.99999994f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAvx512Chains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  __m512 sum = acc[0];
  for (int j = 1; j < kAvx512Chains; ++j) sum = _mm512_add_ps(sum, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float f : lanes) total += f;
  return total;
}

__attribute__((target("avx2,fma"), noinline)) float fma_chains_avx2(int64_t iterations) {
  __m256 acc[kAvx2Chains];
  for (int j = 0; j < kAvx2Chains; ++j) acc[j] = _mm256_set1_ps(0.001f * float(j + 1));
  const __m256 a = _mm256_set1_ps(0.99999994f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAvx2Chains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 sum = acc[0];
  for (int j = 1; j < kAvx2Chains; ++j) sum = _mm256_add_ps(sum, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float f : lanes) total += f;
  return total;
}

struct FmaKernel {
  const char* isa;
  float (*run)(int64_t);
  double flops_per_iteration;
};

double measure_fma_gflops(const FmaKernel& k, int threads) {
  std::atomic<float> sink{0};
  // Calibrate to about 0.2 s per repetition on one thread.
  int64_t iterations = 1 << 20;
  for (;;) {
    const auto t0 = Clock::now();
    sink = sink + k.run(iterations);
    const double s = seconds_since(t0);
    if (s > 0.05) { iterations = int64_t(double(iterations) * 0.2 / s); break; }
    iterations *= 4;
  }
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double s = run_on_threads(threads, [&](int) { sink = sink + k.run(iterations); });
    best = std::max(best, k.flops_per_iteration * double(iterations) * threads / s * 1e-9);
  }
  if (sink.load() == 12345.0f) std::fprintf(stderr, " ");  // keep the result alive
  return best;
}

// ---- Triad bandwidth -----------------------------------------------------------
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using FloatArray = std::unique_ptr<float[], FreeDeleter>;

FloatArray allocate_floats(int64_t count) {
  const size_t bytes = (size_t(count) * 4 + 4095) / 4096 * 4096;
  auto* p = static_cast<float*>(std::aligned_alloc(4096, bytes));
  if (!p) { std::fprintf(stderr, "mhc-bench: cannot allocate %zu bytes\n", bytes); std::exit(1); }
  return FloatArray(p);
}

__attribute__((target("avx2"))) void triad_avx2(float* a, const float* b, const float* c, float s,
                                                int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + s * c[i];
}
void triad_plain(float* a, const float* b, const float* c, float s, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + s * c[i];
}

std::string read_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

int64_t read_llc_bytes() {
  long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v <= 0) v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return v > 0 ? v : 0;
}

}  // namespace

std::optional<double> MachineLimits::peak_gflops(const std::string& isa, int threads) const {
  for (const auto& p : fma_peaks)
    if (p.isa == isa && p.threads == threads) return p.gflops;
  return std::nullopt;
}

std::optional<double> MachineLimits::bandwidth_gbs(int threads) const {
  for (const auto& b : bandwidths)
    if (b.threads == threads) return b.gbytes_per_s;
  return std::nullopt;
}

std::string MachineLimits::widest_isa() const {
  return has_avx512 ? "avx512" : has_avx2_fma ? "avx2" : "";
}

MachineLimits probe_machine(int threads, int64_t array_mib) {
  MachineLimits m;
  m.cpu_model = read_cpu_model();
  m.hardware_threads = std::max(1, int(std::thread::hardware_concurrency()));
  m.llc_bytes = read_llc_bytes();
  __builtin_cpu_init();
  m.has_avx512 = __builtin_cpu_supports("avx512f");
  m.has_avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");

  std::vector<int> thread_counts{1};
  if (threads > 1) thread_counts.push_back(threads);

  std::vector<FmaKernel> kernels;
  if (m.has_avx512) kernels.push_back({"avx512", fma_chains_avx512, 2.0 * kAvx512Chains * 16});
  if (m.has_avx2_fma) kernels.push_back({"avx2", fma_chains_avx2, 2.0 * kAvx2Chains * 8});
  m.has_amx_bf16 = amx_tiles_usable();
  if (m.has_amx_bf16) kernels.push_back({"amx-bf16", amx_tile_chains, kAmxChainFlops});
  for (const auto& k : kernels)
    for (int t : thread_counts) m.fma_peaks.push_back({k.isa, t, measure_fma_gflops(k, t)});

  // Triad arrays: each at least 256 MiB and at least the LLC, so the three
  // together are >= 3x the LLC and no repetition finds its data in cache.
  const int64_t mib = array_mib > 0 ? array_mib
                                    : std::max<int64_t>(256, (m.llc_bytes + (1 << 20) - 1) >> 20);
  const int64_t n = mib << 18;  // floats
  m.triad_array_bytes = n * 4;
  FloatArray a = allocate_floats(n), b = allocate_floats(n), c = allocate_floats(n);
  {  // Pre-touch on one thread, timed: the first-touch cost per 4 KiB page.
    const auto t0 = Clock::now();
    for (float* p : {a.get(), b.get(), c.get()})
      for (int64_t i = 0; i < n; i += 1024) p[i] = 0.0f;
    m.first_touch_us_per_page = seconds_since(t0) * 1e6 / (3.0 * double(n) / 1024.0);
    std::fill(b.get(), b.get() + n, 1.0f);
    std::fill(c.get(), c.get() + n, 2.0f);
    std::fill(a.get(), a.get() + n, 0.0f);
  }
  auto* triad = __builtin_cpu_supports("avx2") ? triad_avx2 : triad_plain;
  for (int t : thread_counts) {
    double best = 0;
    for (int rep = 0; rep < 6; ++rep) {
      const double s = run_on_threads(t, [&](int w) {
        const int64_t lo = n * w / t, hi = n * (w + 1) / t;
        triad(a.get(), b.get(), c.get(), 3.0f, lo, hi);
      });
      if (rep > 0) best = std::max(best, 3.0 * double(n) * 4.0 / s * 1e-9);  // rep 0 warms up
    }
    m.bandwidths.push_back({t, best});
  }
  if (a[n / 2] != 7.0f) {  // b + 3 c = 1 + 3 * 2
    std::fprintf(stderr, "mhc-bench: triad check failed\n");
  }
  return m;
}

RooflinePeak roofline_peak_for(const MachineLimits& m, const std::string& kernel_isa, int threads) {
  std::string isa = kernel_isa;
  if (isa != "avx512" && isa != "avx2") isa = m.widest_isa();
  if (auto p = m.peak_gflops(isa, threads)) return {isa, *p};
  return {isa.empty() ? "none" : isa, 0.0};
}

}  // namespace mhc_bench
