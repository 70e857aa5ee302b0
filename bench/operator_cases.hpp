// The benchmarked shapes, their cost model (flops and minimum bytes), the
// buffers of one shape (allocated and touched once), and the timed calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mhc/mhc.hpp"

namespace mhc_bench {

struct ShapeSpec {
  std::string name;  // "a".."e"
  int64_t T = 0, N = 0, D = 0;
  mhc::DType dtype = mhc::DType::bf16;
  bool gamma = true;
  bool grad_x_post = true;
  bool backward = true;  // false: forward only (decode)
  std::string note;

  int64_t K() const { return N * D; }
  int64_t R() const { return N * N; }
  int64_t F() const { return 2 * N + N * N; }
  int64_t element_bytes() const { return dtype == mhc::DType::fp32 ? 4 : 2; }
  const char* dtype_name() const;
};

// The canonical shapes of the benchmark (issue 4): a..e.
std::vector<ShapeSpec> canonical_shapes();

// Nominal work of one call (see docs/performance.md for the formulas).
struct OperatorCost {
  double flops = 0;  // fp32 multiply and add each count 1 (an FMA counts 2)
  double bytes = 0;  // minimum traffic: every input read once, every output written once
};
OperatorCost forward_cost(const ShapeSpec& s);
OperatorCost backward_cost(const ShapeSpec& s);

// Every input and output of forward and backward for one shape, allocated with
// 64-byte alignment, filled (inputs) or zeroed (outputs), so every page is
// touched before any timing; the backward's caches come from a forward call.
class ShapeBuffers {
 public:
  explicit ShapeBuffers(const ShapeSpec& spec);
  ~ShapeBuffers();
  ShapeBuffers(const ShapeBuffers&) = delete;
  ShapeBuffers& operator=(const ShapeBuffers&) = delete;

  mhc::PreForwardInputs forward_inputs() const;
  mhc::PreForwardOutputs forward_outputs() const;
  mhc::PreBackwardInputs backward_inputs() const;
  mhc::PreBackwardOutputs backward_outputs() const;
  int64_t total_bytes() const { return total_bytes_; }

 private:
  void* allocate(size_t bytes);
  ShapeSpec s_;
  std::vector<void*> blocks_;
  int64_t total_bytes_ = 0;
  // inputs
  void *x_, *phi_, *alpha_, *bias_, *gamma_, *grad_h_in_, *grad_h_post_, *grad_h_res_, *grad_x_post_;
  // forward outputs (the caches feed the backward)
  void *h_in_, *h_post_, *h_res_, *inv_rms_, *h_mix_, *h_pre_;
  // backward outputs
  void *grad_x_, *grad_phi_, *grad_alpha_, *grad_bias_, *grad_gamma_;
};

// Wall-clock times (ms) of `runs` calls after one warm-up call; at least
// min_runs, and more (up to max_runs) until min_seconds have been spent, so
// microsecond-scale calls get a stable median.
struct Timing {
  std::vector<double> ms;  // sorted
  double median() const;
  double min() const { return ms.front(); }
  double max() const { return ms.back(); }
};

// Buffer filling (in parallel: the buffers are large) and failing loudly.
void fill_activation(void* p, mhc::DType t, int64_t n, uint64_t seed, float scale);
void fill_f32(void* p, int64_t n, uint64_t seed, float scale, float offset = 0);
void zero(void* p, int64_t bytes);
void require(const mhc::Status& s, const char* what);

// `call` timed as above.
template <class Call>
Timing time_calls(Call call, int min_runs, double min_seconds, int max_runs) {
  using Clock = std::chrono::steady_clock;
  call();  // warm-up: thread pool start, caches, page tables
  Timing t;
  double spent = 0;
  while (int(t.ms.size()) < min_runs || (spent < min_seconds && int(t.ms.size()) < max_runs)) {
    const auto t0 = Clock::now();
    call();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    t.ms.push_back(ms);
    spent += ms * 1e-3;
  }
  std::sort(t.ms.begin(), t.ms.end());
  return t;
}

Timing time_forward(const ShapeBuffers& b, int threads, int min_runs, double min_seconds, int max_runs);
Timing time_backward(const ShapeBuffers& b, int threads, int min_runs, double min_seconds, int max_runs);

// Workspace the library will use per call for this shape (bytes), from its
// planning layer; -1 if it cannot be computed (library_internals.cpp).
int64_t expected_forward_workspace(const ShapeBuffers& b, int threads);
int64_t expected_backward_workspace(const ShapeBuffers& b, int threads);
// Frees the workspace the library keeps for the calling thread between calls;
// false if this library version keeps none (library_internals.cpp).
bool release_library_workspace();

// The AMX-BF16 tile peak probe (library_internals.cpp, with the library's tile
// operations): whether the library runs its AMX family here (CPU, OS, and a build
// whose assembler knows the instructions), and `iterations` rounds of four
// independent tdpbf16ps of kAmxChainFlops flops in all.
inline constexpr double kAmxChainFlops = 4.0 * 16 * 16 * 32 * 2;
bool amx_tiles_usable();
float amx_tile_chains(int64_t iterations);

}  // namespace mhc_bench
