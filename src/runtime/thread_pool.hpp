// A small persistent thread pool with a static partition.
//
// Determinism does not rest on the pool: callers split work into items whose
// count and boundaries depend only on the problem, and every item writes its own
// outputs, so any assignment of items to workers gives the same bits.
// Policy: one operator call uses the pool at a time. A call made while another
// host thread holds the pool runs its items on its own thread instead of
// queueing or spawning more threads, so concurrent callers never oversubscribe.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>

namespace mhc {
struct Executor;  // mhc.hpp: the caller's threads
}

namespace mhc::runtime {

// At most this many workers run one call (more requested are not used): the
// pool never holds more than kMaxThreads - 1 threads.
inline constexpr int kMaxThreads = 1024;

// Threads a call uses by default: MHC_NUM_THREADS if set (> 0), else the
// hardware threads; at most kMaxThreads.
int default_thread_count();

// How long, in microseconds, a helper that has run a job polls for the next (and a
// caller for its helpers) before sleeping, from the value of MHC_SPIN_US (read
// once, at the pool's first job): digits only, at most kMaxSpinMicroseconds;
// unset, empty or anything else gives the default.
inline constexpr int64_t kDefaultSpinMicroseconds = 1000, kMaxSpinMicroseconds = 1000000;
int64_t spin_microseconds(const char* env);

namespace detail {

// A job's body, type-erased without an allocation: a small trivially copyable
// callable (a lambda of a few references) travels as its bytes in the job's cache
// line, so a polling helper gets the job and its captures in one transfer (the
// decode rows of mhc-bench); a larger one travels as a pointer to the caller's.
inline constexpr size_t kClosureBytes = 32;
struct Closure {
  alignas(8) unsigned char bytes[kClosureBytes];
};
using ItemCall = void (*)(const Closure& closure, int64_t item, int worker);

template <class Body>
inline constexpr bool kBodyInline =
    std::is_trivially_copyable_v<Body> && sizeof(Body) <= kClosureBytes && alignof(Body) <= alignof(Closure);

template <class Body>
void call_body(const Closure& closure, int64_t item, int worker) {
  if constexpr (kBodyInline<Body>) {
    (*std::launder(reinterpret_cast<const Body*>(closure.bytes)))(item, worker);
  } else {
    const Body* body;
    std::memcpy(&body, closure.bytes, sizeof body);
    (*body)(item, worker);
  }
}

template <class Body>
Closure closure_of(const Body& body) {
  Closure closure{};
  if constexpr (kBodyInline<Body>) {
    std::memcpy(closure.bytes, static_cast<const void*>(&body), sizeof(Body));
  } else {
    const Body* pointer = &body;
    std::memcpy(closure.bytes, &pointer, sizeof pointer);
  }
  return closure;
}

void run_items(int64_t items, int threads, ItemCall call, const Closure& closure);

}  // namespace detail

// The caller's executor for this thread's parallel_for (mhc::Executor); nullptr: the pool.
const Executor* set_thread_executor(const Executor* executor);

// Run body(item, worker) for item in [0, items) on up to `threads` workers
// (worker in [0, threads)); returns when all items are done. Each worker takes
// a contiguous range of items. Fewer workers than asked when the pool is held
// by another caller (then one: the caller), the system refuses threads, or
// threads > kMaxThreads; results never depend on the count.
template <class Body>
void parallel_for(int64_t items, int threads, const Body& body) {
  detail::run_items(items, threads, &detail::call_body<Body>, detail::closure_of(body));
}

// A reusable spinning barrier for the workers of one parallel_region: phases of
// a few microseconds make a futex round trip too costly.
class Barrier {
 public:
  explicit Barrier(int participants) : participants_(participants) {}
  void arrive_and_wait();

 private:
  const int participants_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
};

// Run body(worker, workers, barrier) on `workers` threads that all run at the
// same time, so they may wait for each other on `barrier`; workers is
// min(threads, what the pool can give): 1 when another caller holds the pool.
void parallel_region(int threads,
                     const std::function<void(int worker, int workers, Barrier& barrier)>& body);

}  // namespace mhc::runtime
