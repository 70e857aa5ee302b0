// The decode rows and the floor probe (decode_cases.hpp).
#include "decode_cases.hpp"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
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

// Workers 1.. spin on a generation counter between passes (no queue): the
// cheapest hand-off two cores allow. Worker 0 is the caller. Parked, they sleep
// on the counter instead, until the next pass: the library's calls then have
// the cores to themselves.
class PersistentThreads {
 public:
  PersistentThreads(int threads, std::function<void(int)> part) : threads_(threads), part_(std::move(part)) {
    for (int w = 1; w < threads_; ++w)
      helpers_.emplace_back([this, w] {
        pin_to(w);
        uint64_t seen = 0;
        for (;;) {
          uint64_t now;
          while ((now = generation_.load(std::memory_order_acquire)) == seen) {
            if (parked_.load(std::memory_order_relaxed)) generation_.wait(seen, std::memory_order_acquire);
            else _mm_pause();
          }
          seen = now;
          if (stop_.load(std::memory_order_relaxed)) return;
          part_(w);
          done_.fetch_add(1, std::memory_order_acq_rel);
        }
      });
  }
  ~PersistentThreads() {
    stop_.store(true);
    parked_.store(false);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : helpers_) t.join();
  }
  void park() { parked_.store(true, std::memory_order_relaxed); }
  void run() {
    done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    if (parked_.exchange(false, std::memory_order_relaxed)) generation_.notify_all();
    part_(0);
    while (done_.load(std::memory_order_acquire) < threads_ - 1) _mm_pause();
  }

 private:
  const int threads_;
  std::function<void(int)> part_;
  std::vector<std::thread> helpers_;
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> done_{0};
  std::atomic<bool> stop_{false}, parked_{false};
};

// One pass of the probe over phi on `threads` persistent threads, split by K.
class FloorProbe {
 public:
  FloorProbe(const float* phi, int64_t F, int64_t K, int threads, FloorBlocking blocking)
      : u_(static_cast<size_t>(K)), out_(size_t(threads * F * 16)),
        workers_(threads, [this, phi, F, K, threads, blocking](int w) {
          const int64_t vectors = K / 16;  // K is a multiple of 16 at the decode shapes
          floor_pass(phi, F, K, u_.data(), vectors * w / threads * 16, vectors * (w + 1) / threads * 16,
                     out_.data() + w * F * 16, blocking);
        }) {
    for (size_t i = 0; i < u_.size(); ++i) u_[i] = float(i % 7) * 0.1f;
  }
  ~FloorProbe() {
    if (out_[0] == 12345.0f) std::fprintf(stderr, " ");  // keep the result alive
  }
  void run() { workers_.run(); }
  void park() { workers_.park(); }

 private:
  std::vector<float> u_, out_;
  PersistentThreads workers_;
};

// The calling thread pinned to CPU 0 for a scope (the probe's worker 0, whose
// helpers are pinned to the others). Threads it starts meanwhile inherit the pin.
class PinnedToFirstCpu {
 public:
  PinnedToFirstCpu() {
    sched_getaffinity(0, sizeof saved_, &saved_);
    pin_to(0);
  }
  ~PinnedToFirstCpu() { sched_setaffinity(0, sizeof saved_, &saved_); }

 private:
  cpu_set_t saved_;
};

// The fastest of the row blockings (floor_pass.hpp) over `phi`, timed alone.
FloorBlocking fastest_blocking(const float* phi, int64_t F, int64_t K, int threads, int runs, double min_seconds) {
  FloorBlocking best = FloorBlocking::narrow_rows;
  double best_ms = 0;
  for (FloorBlocking candidate : {FloorBlocking::narrow_rows, FloorBlocking::all_registers, FloorBlocking::chunked}) {
    FloorProbe probe(phi, F, K, threads, candidate);
    const double ms = time_calls([&] { probe.run(); }, runs, min_seconds, 100000).median();
    if (best_ms == 0 || ms < best_ms) best_ms = ms, best = candidate;
  }
  return best;
}

// How long the library's pool keeps polling after a call (MHC_SPIN_US, default
// 1000 us), so that a probe block starts after its helpers sleep.
std::chrono::microseconds pool_polling() {
  long us = 1000;
  if (const char* env = std::getenv("MHC_SPIN_US"); env != nullptr && *env != '\0') us = std::atol(env);
  return std::chrono::microseconds(std::clamp(us, 0L, 1000000L));
}

// The probe and the row's calls in blocks of about kBlock, in turn, until each
// has min_runs calls and min_seconds are spent: the host's speed drifts over
// seconds, and a ratio of two medians taken side by side does not. Each block
// starts with kWarmUp of calls not timed (a helper waking from its sleep, the
// other side's lines in the caches, the core's clock).
struct SideBySide {
  Timing floor;
  std::vector<Timing> calls;
};
SideBySide time_side_by_side(FloorProbe& probe, const std::vector<std::function<void()>>& calls, int min_runs,
                             double min_seconds) {
  using Clock = std::chrono::steady_clock;
  constexpr std::chrono::milliseconds kBlock(20), kWarmUp(1);
  SideBySide r;
  r.calls.resize(calls.size());
  double spent = 0;
  auto block = [&](const std::function<void()>& call, Timing& t) {
    for (const auto start = Clock::now(); Clock::now() - start < kWarmUp;) call();
    const auto start = Clock::now();
    for (int i = 0; i < 5 || Clock::now() - start < kBlock; ++i) {
      const auto t0 = Clock::now();
      call();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      t.ms.push_back(ms);
      spent += ms * 1e-3;
    }
  };
  while (int(r.floor.ms.size()) < min_runs || (spent < min_seconds && r.floor.ms.size() < 1000000)) {
    std::this_thread::sleep_for(pool_polling() + std::chrono::microseconds(500));  // the pool's helpers asleep
    block([&] { probe.run(); }, r.floor);
    probe.park();
    for (size_t c = 0; c < calls.size(); ++c) block(calls[c], r.calls[c]);
  }
  std::sort(r.floor.ms.begin(), r.floor.ms.end());
  for (Timing& t : r.calls) std::sort(t.ms.begin(), t.ms.end());
  return r;
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

// aclnn's two phases on one shape's buffers, as an inference step makes them:
// GetWorkspaceSize, then the call into a workspace reused while large enough.
class AclnnCall {
 public:
  AclnnCall(const ShapeBuffers& b, aclrtStream stream) : stream_(stream) {
    const mhc::PreForwardInputs in = b.forward_inputs();
    const mhc::PreForwardOutputs out = b.forward_outputs();
    tensors_ = {acl_tensor(in.x),          acl_tensor(in.phi),           acl_tensor(in.alpha),
                acl_tensor(in.bias),       in.gamma ? acl_tensor(*in.gamma) : nullptr,
                acl_tensor(out.h_in),      acl_tensor(*out.h_post),      acl_tensor(*out.h_res),
                acl_tensor(*out.inv_rms),  acl_tensor(*out.h_mix),       acl_tensor(*out.h_pre)};
  }
  ~AclnnCall() {
    if (workspace_) aclrtFree(workspace_);
    for (aclTensor* tensor : tensors_)
      if (tensor) aclDestroyTensor(tensor);
  }
  AclnnCall(const AclnnCall&) = delete;
  AclnnCall& operator=(const AclnnCall&) = delete;
  void operator()() {
    const auto& t = tensors_;
    uint64_t bytes = 0;
    aclOpExecutor* executor = nullptr;
    check_acl(aclnnMhcPreGetWorkspaceSize(t[0], t[1], t[2], t[3], t[4], 1e-6, 1e-6, t[5], t[6], t[7], t[8], t[9],
                                          t[10], &bytes, &executor),
              "aclnnMhcPreGetWorkspaceSize");
    if (bytes > capacity_) {
      if (workspace_) aclrtFree(workspace_);
      check_acl(aclrtMalloc(&workspace_, bytes, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
      capacity_ = bytes;
    }
    check_acl(aclnnMhcPre(workspace_, bytes, executor, stream_), "aclnnMhcPre");
    check_acl(aclrtSynchronizeStream(stream_), "aclrtSynchronizeStream");
  }

 private:
  aclrtStream stream_;
  std::array<aclTensor*, 11> tensors_{};
  void* workspace_ = nullptr;
  uint64_t capacity_ = 0;
};

}  // namespace

DecodeResults run_decode_cases(int threads, int runs, double min_seconds, double fma_peak_gflops) {
  DecodeResults results;
  check_acl(aclInit(nullptr), "aclInit");
  check_acl(aclrtSetDevice(0), "aclrtSetDevice");
  aclrtStream stream = nullptr;
  check_acl(aclrtCreateStream(&stream), "aclrtCreateStream");
  {  // the pools (the C++ library's and the aclnn library's own) started before this
     // thread is pinned: their helpers stay free to run on the other CPUs
    const ShapeBuffers small({"decode", 1, 4, 64, mhc::DType::bf16, true, false, false, "decode"});
    mhc::Options options;
    options.num_threads = threads;
    require(mhc::pre_forward(small.forward_inputs(), small.forward_outputs(), options), "forward");
    AclnnCall aclnn(small, stream);
    aclnn();
  }
  const PinnedToFirstCpu pinned;
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
      const mhc::PreForwardInputs in = buffers.forward_inputs();
      const mhc::PreForwardOutputs out = buffers.forward_outputs();
      const auto* phi = static_cast<const float*>(in.phi.data);
      if (T == 1) floor.blocking = fastest_blocking(phi, F, K, threads, runs, min_seconds);
      // The probe streams this row's own phi (64-byte aligned; the same pages, so the
      // same cache conflicts as the library's call).
      FloorProbe probe(phi, F, K, threads, floor.blocking);
      mhc::Options options;
      options.num_threads = threads;
      AclnnCall aclnn(buffers, stream);
      const mhc::PreSinkhornForwardInputs engine_in{in.x, in.phi, in.alpha, in.bias, 20};
      const mhc::PreSinkhornForwardOutputs engine_out{out.h_in, *out.h_post, *out.h_res, {}, {}, {}, {}, {}};
      std::shared_ptr<const mhc::PreparedPre> prepared;
      require(mhc::prepare_pre(in.phi, in.alpha, in.bias, std::nullopt, &prepared), "prepare_pre");
      mhc::Options prepared_options = options;
      prepared_options.prepared = prepared.get();
      const SideBySide timed = time_side_by_side(
          probe,
          {[&] { require(mhc::pre_forward(in, out, options), "forward"); }, [&] { aclnn(); },
           [&] { require(mhc::pre_sinkhorn_forward(engine_in, engine_out, options), "pre_sinkhorn_forward"); },
           [&] {
             require(mhc::pre_sinkhorn_forward(engine_in, engine_out, prepared_options), "prepared pre_sinkhorn");
           }},
          runs, min_seconds);
      row.cpp = timed.calls[0];
      row.aclnn = timed.calls[1];
      row.engine_pre = timed.calls[2];
      row.engine_pre_prepared = timed.calls[3];
      row.floor_ms = timed.floor.median();
      if (T == 1) {
        floor.timing = timed.floor;
        results.floors.push_back(floor);
      }
      results.rows.push_back(row);
    }
  }
  aclrtDestroyStream(stream);
  aclrtResetDevice(0);
  aclFinalize();
  return results;
}

}  // namespace mhc_bench
