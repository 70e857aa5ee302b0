#include "runtime/thread_pool.hpp"

#include "mhc/mhc.hpp"

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
// hand-off seldom waits on a yield, a system call that is slow on paravirtualized
// guests (mhc-bench decode, T=1 D=4096).
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
// that has just run a job polls the job's line for a while before it waits on the
// condition variable, and the caller polls the count of finished shares before it
// waits for its helpers, as XNNPACK's pthreadpool and libgomp spin before they
// block. A polling hand-off touches two cache lines, each moving between cores
// once (a one-token call pays both: mhc-bench decode, T=1): the job's, which a
// polling helper reads as a sequence lock, and the finished count; the mutex
// orders only what sleepers read.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_.stopping.store(true, std::memory_order_relaxed);
      job_.sequence.store(2 * ++generation_, std::memory_order_release);  // polling helpers go and see
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

  // call(closure, item, worker) for every item on `workers` workers (the caller is
  // worker 0, helpers 1..workers-1); returns when all are done. Call with the lease
  // held and workers - 1 <= grow(...).
  void run(int64_t items, int workers, detail::ItemCall call, const detail::Closure& closure) {
    {
      // Odd while the fields change: a polling helper that read any of them then
      // sees the sequence moved and reads again. Sleepers read them under the lock.
      std::lock_guard<std::mutex> lock(mutex_);
      job_.sequence.store(2 * generation_ + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      job_.call.store(call, std::memory_order_relaxed);
      job_.items.store(items, std::memory_order_relaxed);
      job_.workers.store(workers, std::memory_order_relaxed);
      for (size_t i = 0; i < kClosureWords; ++i) {
        uint64_t word;
        std::memcpy(&word, closure.bytes + i * sizeof word, sizeof word);
        job_.closure[i].store(word, std::memory_order_relaxed);
      }
      ++generation_;
    }
    // Posted after the unlock: a polling helper never needs the mutex.
    job_.sequence.store(2 * generation_, std::memory_order_release);
    wake_.notify_all();
    const uint64_t finished = finished_target_ += uint64_t(workers - 1);
    std::exception_ptr failure;
    try {
      run_share(0, {call, closure, items, workers});  // the caller is worker 0
    } catch (...) {
      failure = std::current_exception();  // the helpers still use the closure: wait for them first
    }
    auto helpers_done = [&] { return done_.finished.load(std::memory_order_seq_cst) == finished; };
    if (!spin_until(helpers_done)) {
      std::unique_lock<std::mutex> lock(mutex_);
      // Then helpers_done, under the lock. An exchange, not a store: qemu-user on x86 lets an
      // aarch64 store-release pass the load-acquire after it, and a helper finishing in
      // between would be neither seen nor wake the caller (the test
      // ThreadPool.EveryJobEndsWithNobodyPolling under qemu).
      done_.caller_waits.exchange(true, std::memory_order_seq_cst);
      finished_cv_.wait(lock, helpers_done);
      done_.caller_waits.store(false, std::memory_order_relaxed);
    }
    if (failure) std::rethrow_exception(failure);
  }

 private:
  static constexpr size_t kClosureWords = detail::kClosureBytes / sizeof(uint64_t);

  struct Job {
    detail::ItemCall call;
    detail::Closure closure;
    int64_t items;
    int workers;
  };

  static void run_share(int worker, const Job& job) {
    const int64_t begin = job.items * worker / job.workers;
    const int64_t end = job.items * (worker + 1) / job.workers;
    for (int64_t i = begin; i < end; ++i) job.call(job.closure, i, worker);
  }

  // The job's fields as the caller last wrote them (relaxed: a sequence lock or the mutex orders them).
  Job read_job() const {
    Job job;
    job.call = job_.call.load(std::memory_order_relaxed);
    job.items = job_.items.load(std::memory_order_relaxed);
    job.workers = job_.workers.load(std::memory_order_relaxed);
    for (size_t i = 0; i < kClosureWords; ++i) {
      const uint64_t word = job_.closure[i].load(std::memory_order_relaxed);
      std::memcpy(job.closure.bytes + i * sizeof word, &word, sizeof word);
    }
    return job;
  }

  void loop(int index) {
    uint64_t seen = 0;  // the generation of the last job this helper looked at
    bool ran = false;   // only a helper that just ran a job polls for the next
    for (;;) {
      Job job;
      uint64_t sequence = 0;
      auto posted = [&] {
        sequence = job_.sequence.load(std::memory_order_acquire);
        return sequence % 2 == 0 && sequence != 2 * seen;
      };
      if (ran && spin_until(posted)) {
        job = read_job();
        std::atomic_thread_fence(std::memory_order_acquire);
        if (job_.sequence.load(std::memory_order_relaxed) != sequence) continue;  // rewritten meanwhile
        if (job_.stopping.load(std::memory_order_relaxed)) return;
        seen = sequence / 2;
      } else {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return job_.stopping.load(std::memory_order_relaxed) || generation_ != seen; });
        if (job_.stopping.load(std::memory_order_relaxed)) return;
        seen = generation_;
        job = read_job();
      }
      ran = index < job.workers;
      if (!ran) continue;  // not needed for this job
      run_share(index, job);
      // A caller that gave up polling is woken. Either it sees the count or this
      // sees caller_waits (both seq_cst), so a caller still polling is not made to
      // contend for the mutex.
      done_.finished.fetch_add(1, std::memory_order_seq_cst);
      if (done_.caller_waits.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lock(mutex_);  // the caller may be between its check and its wait
        finished_cv_.notify_one();
      }
    }
  }

  std::mutex busy_;  // held by the caller whose job runs
  std::mutex mutex_;
  std::condition_variable wake_, finished_cv_;
  std::vector<std::thread> threads_;
  uint64_t generation_ = 0;        // of the last job posted, under mutex_
  uint64_t finished_target_ = 0;   // shares the helpers will have finished, under busy_
  // What a polling helper reads: one line, written by the caller only.
  struct alignas(64) JobLine {
    std::atomic<uint64_t> sequence{0};  // 2 * generation_, odd while the fields change
    std::atomic<detail::ItemCall> call{nullptr};
    std::atomic<int64_t> items{0};
    std::atomic<int> workers{1};
    std::atomic<bool> stopping{false};
    std::atomic<uint64_t> closure[kClosureWords] = {};
  } job_;
  // What the caller polls: one line, written by the helpers (and the caller's flag).
  struct alignas(64) DoneLine {
    std::atomic<uint64_t> finished{0};  // helpers' shares finished, over every job
    std::atomic<bool> caller_waits{false};  // the caller sleeps on finished_cv_ (or is about to)
  } done_;
  static_assert(sizeof(JobLine) == 64, "the job in one cache line");
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

namespace {

thread_local const Executor* thread_executor = nullptr;

// One worker's share of a job handed to an executor: the contiguous items the pool's
// worker of that index would run.
struct ExecutorJob {
  detail::ItemCall call;
  const detail::Closure* closure;
  int64_t items;
  int workers;
};

void run_executor_share(void* context, int worker) {
  const ExecutorJob& job = *static_cast<const ExecutorJob*>(context);
  const int64_t begin = job.items * worker / job.workers, end = job.items * (worker + 1) / job.workers;
  for (int64_t i = begin; i < end; ++i) job.call(*job.closure, i, worker);
}

}  // namespace

const Executor* set_thread_executor(const Executor* executor) {
  const Executor* previous = thread_executor;
  thread_executor = executor;
  return previous;
}

namespace detail {

void run_items(int64_t items, int threads, ItemCall call, const Closure& closure) {
  if (items <= 0) return;
  int workers = int(std::clamp<int64_t>(threads, 1, std::min<int64_t>(items, kMaxThreads)));
  if (workers > 1 && thread_executor != nullptr) {
    ExecutorJob job{call, &closure, items, workers};
    thread_executor->run(thread_executor->self, workers, &run_executor_share, &job);
    return;
  }
  if (workers > 1) {
    std::unique_lock<std::mutex> lease = pool().try_acquire();
    if (lease.owns_lock()) {
      workers = std::min(workers, pool().grow(workers - 1) + 1);
      if (workers > 1) {
        pool().run(items, workers, call, closure);
        return;
      }
    }
  }
  // One worker, or the pool is busy with another caller: run here as worker 0.
  for (int64_t i = 0; i < items; ++i) call(closure, i, 0);
}

}  // namespace detail

void parallel_region(int threads,
                     const std::function<void(int worker, int workers, Barrier& barrier)>& body) {
  int workers = std::clamp(threads, 1, kMaxThreads);
  if (workers > 1) {
    std::unique_lock<std::mutex> lease = pool().try_acquire();
    if (lease.owns_lock()) {
      workers = std::min(workers, pool().grow(workers - 1) + 1);
      if (workers > 1) {
        Barrier barrier(workers);
        auto each = [&body, &barrier, workers](int64_t item, int) { body(int(item), workers, barrier); };
        // One item per worker: all concurrent.
        pool().run(workers, workers, &detail::call_body<decltype(each)>, detail::closure_of(each));
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
