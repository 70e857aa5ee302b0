#include "runtime/thread_pool.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
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
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      items_ = items;
      workers_ = workers;
      pending_ = workers - 1;
      ++generation_;
    }
    wake_.notify_all();
    std::exception_ptr failure;
    try {
      run_share(0);  // the caller is worker 0
    } catch (...) {
      failure = std::current_exception();  // the helpers still use body: wait for them first
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    body_ = nullptr;
    if (failure) std::rethrow_exception(failure);
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
    if (n > 0) return std::min(n, kMaxThreads);
  }
  return int(std::clamp(std::thread::hardware_concurrency(), 1u, unsigned(kMaxThreads)));
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
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (spins > 4096) std::this_thread::yield();  // oversubscribed machine: let the others run
  }
}

}  // namespace mhc::runtime
