#include "runtime/thread_pool.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace mhc::runtime {
namespace {

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Returns false (and does nothing) when another caller holds the pool.
  bool try_run(int64_t items, int workers, const std::function<void(int64_t, int)>& body) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    ensure_threads(workers - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      items_ = items;
      workers_ = workers;
      pending_ = workers - 1;
      ++generation_;
    }
    wake_.notify_all();
    run_share(0);  // the caller is worker 0
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    body_ = nullptr;
    return true;
  }

 private:
  void run_share(int worker) {
    const int64_t begin = items_ * worker / workers_;
    const int64_t end = items_ * (worker + 1) / workers_;
    for (int64_t i = begin; i < end; ++i) (*body_)(i, worker);
  }

  void ensure_threads(int helpers) {
    while (int(threads_.size()) < helpers) {
      const int index = int(threads_.size()) + 1;
      threads_.emplace_back([this, index] { loop(index); });
    }
  }

  void loop(int index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (index >= workers_) continue;  // not needed for this job
      lock.unlock();
      run_share(index);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_;  // held by the caller whose job runs
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int64_t, int)>* body_ = nullptr;
  int64_t items_ = 0;
  int workers_ = 1;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

int default_thread_count() {
  if (const char* env = std::getenv("MHC_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return std::min(n, 1024);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(int64_t items, int threads,
                  const std::function<void(int64_t item, int worker)>& body) {
  if (items <= 0) return;
  const int workers = int(std::clamp<int64_t>(threads, 1, items));
  if (workers > 1 && pool().try_run(items, workers, body)) return;
  // One worker, or the pool is busy with another caller: run here as worker 0.
  for (int64_t i = 0; i < items; ++i) body(i, 0);
}

void parallel_region(int threads,
                     const std::function<void(int worker, int workers, Barrier& barrier)>& body) {
  const int workers = std::max(1, threads);
  if (workers > 1) {
    Barrier barrier(workers);
    const std::function<void(int64_t, int)> each = [&](int64_t item, int) {
      body(int(item), workers, barrier);
    };
    if (pool().try_run(workers, workers, each)) return;  // one item per worker: all concurrent
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
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (spins > 4096) std::this_thread::yield();  // oversubscribed machine: let the others run
  }
}

}  // namespace mhc::runtime
