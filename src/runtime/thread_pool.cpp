#include "runtime/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mhc::runtime {
namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// MHC_SPIN_US, read once, at the pool's first job.
std::chrono::microseconds spin_budget() {
  static const std::chrono::microseconds budget(spin_microseconds(std::getenv("MHC_SPIN_US")));
  return budget;
}

// How long a poller keeps its core before it yields it: often enough that on an
// oversubscribed machine the threads with work left get the core, rarely enough that a
// hand-off seldom waits on a yield, a system call of about 1.2 us on a paravirtualized
// guest (yielding every 64 polls instead: mhc-bench decode T=1 D=4096 15.8 -> 12.8 us).
constexpr std::chrono::microseconds kYieldInterval(50);

// Polls done() for up to the spin budget; returns done(). Every 64 polls it looks
// at the clock: past the budget it gives up, past kYieldInterval since it last
// had the core back it yields.
template <class Done>
bool spin_until(Done done) {
  const auto budget = spin_budget();
  if (budget.count() == 0) return done();
  const auto start = std::chrono::steady_clock::now();
  auto yielded = start;
  for (int polls = 1;; ++polls) {
    if (done()) return true;
    cpu_relax();
    if (polls % 64 == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now - start > budget) return done();
      if (now - yielded > kYieldInterval) {
        std::this_thread::yield();
        yielded = std::chrono::steady_clock::now();
      }
    }
  }
}

// Spin, then sleep: waking a thread asleep on a futex (on a VM, an interrupt to a
// halted virtual CPU) costs about as much as a decode call's work, so a helper
// that has just run a job polls `posted_` for a while before it waits on the
// condition variable, and the caller polls `unfinished_` before it waits for its
// helpers, as XNNPACK's pthreadpool and libgomp spin before they block. The mutex
// still orders every job's fields: a helper that saw posted_ change takes the
// lock before it reads them.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      posted_.store(++generation_, std::memory_order_release);  // polling helpers go and see
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // The pool for one job, or an empty lease when another caller holds it.
  std::unique_lock<std::mutex> try_acquire() { return std::unique_lock<std::mutex>(busy_, std::try_to_lock); }

  // At least `helpers` helper threads if the system gives them; returns how many
  // can help (<= helpers). A refused thread (std::system_error) is not an error:
  // the job runs on the threads there are. Call with the lease held.
  int grow(int helpers) {
    while (int(threads_.size()) < helpers) {
      const int index = int(threads_.size()) + 1;
      try {
        threads_.emplace_back([this, index] { loop(index); });
      } catch (const std::exception&) {
        break;
      }
    }
    return std::min(helpers, int(threads_.size()));
  }

  // body(item, worker) for every item on `workers` workers (the caller is worker
  // 0, helpers 1..workers-1); returns when all are done. Call with the lease held
  // and workers - 1 <= grow(...).
  void run(int64_t items, int workers, const std::function<void(int64_t, int)>& body) {
    uint64_t generation = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      items_ = items;
      workers_ = workers;
      unfinished_.store(workers - 1, std::memory_order_relaxed);
      generation = ++generation_;
    }
    // Posted after the unlock: a polling helper that sees it must not find the mutex
    // held, or it sleeps on the futex and needs a wake-up (a VM exit on KVM).
    posted_.store(generation, std::memory_order_release);
    wake_.notify_all();
    std::exception_ptr failure;
    try {
      run_share(0);  // the caller is worker 0
    } catch (...) {
      failure = std::current_exception();  // the helpers still use body: wait for them first
    }
    auto helpers_done = [&] { return unfinished_.load(std::memory_order_seq_cst) == 0; };
    if (!spin_until(helpers_done)) {
      std::unique_lock<std::mutex> lock(mutex_);
      caller_waits_.store(true, std::memory_order_seq_cst);  // then helpers_done, under the lock
      done_.wait(lock, helpers_done);
      caller_waits_.store(false, std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = nullptr;
    if (failure) std::rethrow_exception(failure);
  }

 private:
  void run_share(int worker) {
    const int64_t begin = items_ * worker / workers_;
    const int64_t end = items_ * (worker + 1) / workers_;
    for (int64_t i = begin; i < end; ++i) (*body_)(i, worker);
  }

  void loop(int index) {
    uint64_t seen = 0;
    bool ran = false;  // only a helper that just ran a job polls for the next
    for (;;) {
      if (ran) spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      ran = index < workers_;
      if (!ran) continue;  // not needed for this job
      lock.unlock();
      run_share(index);
      // The last helper wakes a caller that gave up polling. Either the caller sees
      // unfinished_ at zero or this sees caller_waits_ (both seq_cst), so a caller
      // still polling is not made to contend for the mutex.
      if (unfinished_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_waits_.load(std::memory_order_seq_cst)) {
        lock.lock();  // the caller may be between its check and its wait
        done_.notify_one();
      }
    }
  }

  std::mutex busy_;  // held by the caller whose job runs
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int64_t, int)>* body_ = nullptr;
  int64_t items_ = 0;
  int workers_ = 1;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::atomic<uint64_t> posted_{0};  // generation_, for polling without the mutex
  std::atomic<int> unfinished_{0};   // helpers still running the job
  std::atomic<bool> caller_waits_{false};  // the caller sleeps on done_ (or is about to)
};

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

int64_t spin_microseconds(const char* env) {
  if (env == nullptr || *env == '\0') return kDefaultSpinMicroseconds;
  int64_t us = 0;
  for (const char* c = env; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return kDefaultSpinMicroseconds;
    us = std::min<int64_t>(us * 10 + (*c - '0'), kMaxSpinMicroseconds);
  }
  return us;
}

int default_thread_count() {
  if (const char* env = std::getenv("MHC_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return std::min(n, kMaxThreads);
  }
  // Read once: glibc opens /sys/devices/system/cpu/online on every query.
  static const unsigned online = std::thread::hardware_concurrency();
  return int(std::clamp(online, 1u, unsigned(kMaxThreads)));
}

void parallel_for(int64_t items, int threads,
                  const std::function<void(int64_t item, int worker)>& body) {
  if (items <= 0) return;
  int workers = int(std::clamp<int64_t>(threads, 1, std::min<int64_t>(items, kMaxThreads)));
  if (workers > 1) {
    std::unique_lock<std::mutex> lease = pool().try_acquire();
    if (lease.owns_lock()) {
      workers = std::min(workers, pool().grow(workers - 1) + 1);
      if (workers > 1) {
        pool().run(items, workers, body);
        return;
      }
    }
  }
  // One worker, or the pool is busy with another caller: run here as worker 0.
  for (int64_t i = 0; i < items; ++i) body(i, 0);
}

void parallel_region(int threads,
                     const std::function<void(int worker, int workers, Barrier& barrier)>& body) {
  int workers = std::clamp(threads, 1, kMaxThreads);
  if (workers > 1) {
    std::unique_lock<std::mutex> lease = pool().try_acquire();
    if (lease.owns_lock()) {
      workers = std::min(workers, pool().grow(workers - 1) + 1);
      if (workers > 1) {
        Barrier barrier(workers);
        const std::function<void(int64_t, int)> each = [&](int64_t item, int) {
          body(int(item), workers, barrier);
        };
        pool().run(workers, workers, each);  // one item per worker: all concurrent
        return;
      }
    }
  }
  Barrier alone(1);
  body(0, 1, alone);
}

void Barrier::arrive_and_wait() {
  if (participants_ == 1) return;
  const uint64_t gen = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == participants_) {
    arrived_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  for (int spins = 0; generation_.load(std::memory_order_acquire) == gen; ++spins) {
    cpu_relax();
    if (spins > 4096) std::this_thread::yield();  // oversubscribed machine: let the others run
  }
}

}  // namespace mhc::runtime
