// The decode rows and the floor probe (decode_cases.hpp).
#include "decode_cases.hpp"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "acl/acl.h"
#include "aclnnop/aclnn_mhc_pre.h"
#include "floor_pass.hpp"

namespace mhc_bench {
namespace {

void pin_to(int cpu) {
  const int cpus = std::max(1, int(std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % cpus, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
}

// Workers 1.. spin on a generation counter between passes (no sleeping, no
// queue): the cheapest hand-off two cores allow. Worker 0 is the caller.
class PersistentThreads {
 public:
  PersistentThreads(int threads, std::function<void(int)> part) : threads_(threads), part_(std::move(part)) {
    for (int w = 1; w < threads_; ++w)
      helpers_.emplace_back([this, w] {
        pin_to(w);
        uint64_t seen = 0;
        for (;;) {
          uint64_t now;
          while ((now = generation_.load(std::memory_order_acquire)) == seen) _mm_pause();
          seen = now;
          if (stop_.load(std::memory_order_relaxed)) return;
          part_(w);
          done_.fetch_add(1, std::memory_order_acq_rel);
        }
      });
  }
  ~PersistentThreads() {
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
    for (auto& t : helpers_) t.join();
  }
  void run() {
    done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    part_(0);
    while (done_.load(std::memory_order_acquire) < threads_ - 1) _mm_pause();
  }

 private:
  const int threads_;
  std::function<void(int)> part_;
  std::vector<std::thread> helpers_;
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
};

// The fastest of the row blockings (floor_pass.hpp), *blocking says which, over
// `phi`: the decode rows' own (64-byte aligned, the same pages, so the probe and
// the library find the same cache conflicts).
Timing time_floor(const float* phi, int64_t F, int64_t K, int threads, int runs, double min_seconds,
                  FloorBlocking* blocking) {
  std::vector<float> u(static_cast<size_t>(K)), out(size_t(threads * F * 16));
  for (size_t i = 0; i < u.size(); ++i) u[i] = float(i % 7) * 0.1f;
  const int64_t vectors = K / 16;  // K is a multiple of 16 at the decode shapes
  cpu_set_t saved;
  sched_getaffinity(0, sizeof saved, &saved);
  pin_to(0);
  Timing best;
  for (FloorBlocking candidate : {FloorBlocking::narrow_rows, FloorBlocking::all_registers, FloorBlocking::chunked}) {
    PersistentThreads workers(threads, [&](int w) {
      floor_pass(phi, F, K, u.data(), vectors * w / threads * 16, vectors * (w + 1) / threads * 16,
                 out.data() + w * F * 16, candidate);
    });
    const Timing t = time_calls([&] { workers.run(); }, runs, min_seconds, 100000);
    if (best.ms.empty() || t.median() < best.median()) best = t, *blocking = candidate;
  }
  sched_setaffinity(0, sizeof saved, &saved);
  if (out[0] == 12345.0f) std::fprintf(stderr, " ");  // keep the result alive
  return best;
}

// ---- aclnn's two phases ----------------------------------------------------------
aclTensor* acl_tensor(const mhc::TensorView& v) {
  const aclDataType type = v.dtype == mhc::DType::bf16   ? ACL_BF16
                           : v.dtype == mhc::DType::fp16 ? ACL_FLOAT16
                                                         : ACL_FLOAT;
  return aclCreateTensor(v.shape.data(), uint64_t(v.rank), type, v.strides.data(), 0, ACL_FORMAT_ND, v.shape.data(),
                         uint64_t(v.rank), v.data);
}

void check_acl(int status, const char* what) {
  if (status == 0) return;
  std::fprintf(stderr, "mhc-bench: %s failed: %d (%s)\n", what, status, aclGetRecentErrMsg());
  std::exit(1);
}

Timing time_aclnn(const ShapeBuffers& b, aclrtStream stream, int runs, double min_seconds) {
  const mhc::PreForwardInputs in = b.forward_inputs();
  const mhc::PreForwardOutputs out = b.forward_outputs();
  aclTensor* x = acl_tensor(in.x);
  aclTensor* phi = acl_tensor(in.phi);
  aclTensor* alpha = acl_tensor(in.alpha);
  aclTensor* bias = acl_tensor(in.bias);
  aclTensor* gamma = in.gamma ? acl_tensor(*in.gamma) : nullptr;
  aclTensor* h_in = acl_tensor(out.h_in);
  aclTensor* h_post = acl_tensor(*out.h_post);
  aclTensor* h_res = acl_tensor(*out.h_res);
  aclTensor* inv_rms = acl_tensor(*out.inv_rms);
  aclTensor* h_mix = acl_tensor(*out.h_mix);
  aclTensor* h_pre = acl_tensor(*out.h_pre);
  void* workspace = nullptr;
  uint64_t capacity = 0;  // a caching allocator's block, reused while large enough
  const Timing t = time_calls(
      [&] {
        uint64_t bytes = 0;
        aclOpExecutor* executor = nullptr;
        check_acl(aclnnMhcPreGetWorkspaceSize(x, phi, alpha, bias, gamma, 1e-6, 1e-6, h_in, h_post, h_res, inv_rms,
                                              h_mix, h_pre, &bytes, &executor),
                  "aclnnMhcPreGetWorkspaceSize");
        if (bytes > capacity) {
          if (workspace) aclrtFree(workspace);
          check_acl(aclrtMalloc(&workspace, bytes, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
          capacity = bytes;
        }
        check_acl(aclnnMhcPre(workspace, bytes, executor, stream), "aclnnMhcPre");
        check_acl(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
      },
      runs, min_seconds, 100000);
  if (workspace) aclrtFree(workspace);
  for (aclTensor* tensor : {x, phi, alpha, bias, gamma, h_in, h_post, h_res, inv_rms, h_mix, h_pre})
    if (tensor) aclDestroyTensor(tensor);
  return t;
}

}  // namespace

DecodeResults run_decode_cases(int threads, int runs, double min_seconds, double fma_peak_gflops) {
  DecodeResults results;
  check_acl(aclInit(nullptr), "aclInit");
  check_acl(aclrtSetDevice(0), "aclrtSetDevice");
  aclrtStream stream = nullptr;
  check_acl(aclrtCreateStream(&stream), "aclrtCreateStream");
  for (int64_t D : {int64_t(4096), int64_t(7168)}) {
    const int64_t N = 4, F = 2 * N + N * N, K = N * D;
    DecodeFloor floor;
    floor.D = D;
    for (int64_t T : {int64_t(1), int64_t(4), int64_t(16), int64_t(32), int64_t(64)}) {
      DecodeRow row;
      row.shape = {"decode", T, N, D, mhc::DType::bf16, true, false, false, "decode"};
      row.cost = forward_cost(row.shape);
      row.fma_bound_ms = fma_peak_gflops > 0 ? 2.0 * double(T * F * K) / (fma_peak_gflops * 1e9) * 1e3 : 0;
      const ShapeBuffers buffers(row.shape);
      if (T == 1) {  // the probe over the first row's phi, right before that row
        floor.timing = time_floor(static_cast<const float*>(buffers.forward_inputs().phi.data), F, K, threads, runs,
                                  min_seconds, &floor.blocking);
        results.floors.push_back(floor);
      }
      row.cpp = time_forward(buffers, threads, runs, min_seconds, 100000);
      row.aclnn = time_aclnn(buffers, stream, runs, min_seconds);
      row.floor_ms = floor.timing.median();
      results.rows.push_back(row);
    }
  }
  aclrtDestroyStream(stream);
  aclrtResetDevice(0);
  aclFinalize();
  return results;
}

}  // namespace mhc_bench
