// Concurrency (docs/reliability.md): many host threads calling both operators
// at once, on their own tensors or on shared read-only inputs, get the bits of
// serial calls; the library's pool serves one call at a time and the others run
// on their callers' threads, so concurrent callers never oversubscribe; the
// thread knobs (Options::num_threads, MHC_NUM_THREADS) and their bounds.
// Run under TSan by scripts/hardening.sh.
#include <gtest/gtest.h>
#include <dirent.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/thread_pool.hpp"
#include "test_util.hpp"

namespace mhc_test {
namespace {

const std::vector<const char*> kOutputs = {"h_in", "h_post", "h_res", "inv_rms", "h_mix", "h_pre",
                                           "grad_x", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma"};

Tensor& member(Operands& o, const std::string& name) {
  for (const TensorMember& m : tensor_members())
    if (name == m.name) return o.*m.member;
  throw std::runtime_error(name);
}

using Bits = std::map<std::string, std::vector<uint32_t>>;

// Forward with caches, then backward; every output's bits.
Bits run_both(Operands& o) {
  const mhc::Status f = run_forward_with_caches(o);
  if (!f.ok()) throw std::runtime_error(f.message());
  const mhc::Status b = mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options);
  if (!b.ok()) throw std::runtime_error(b.message());
  Bits out;
  for (const char* n : kOutputs) out[n] = member(o, n).raw();
  return out;
}

// Varied problems: dtypes, F forms, layouts, sizes over several work items.
std::vector<Config> configs() {
  std::vector<Config> out;
  int i = 0;
  for (auto [dtype, form, bsnd, S, D] : {std::tuple{DType::bf16, FForm::square, true, 70, 64},
                                         {DType::fp16, FForm::permutation, false, 130, 40},
                                         {DType::fp32, FForm::two_entry, false, 65, 300},
                                         {DType::bf16, FForm::square, false, 200, 33},
                                         {DType::fp16, FForm::square, true, 17, 257},
                                         {DType::fp32, FForm::permutation, true, 64, 16}}) {
    Config c;
    c.N = 4; c.D = D; c.dtype = dtype; c.form = form; c.bsnd = bsnd;
    c.B = bsnd ? 2 : 1; c.S = S; c.gamma = i % 2 == 0; c.grad_x_post = i % 3 != 0;
    c.seed = 31 + uint64_t(i++);
    out.push_back(c);
  }
  return out;
}

// Runs fn(i) on `threads` threads released together.
template <class Fn>
void run_together(int threads, Fn fn) {
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  std::vector<std::string> errors(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      try {
        fn(i);
      } catch (const std::exception& e) {
        errors[size_t(i)] = e.what();
      }
    });
  for (auto& t : pool) t.join();
  for (int i = 0; i < threads; ++i) EXPECT_EQ(errors[size_t(i)], "") << "thread " << i;
}

TEST(Concurrency, ManyHostThreadsOnTheirOwnTensorsGetTheBitsOfSerialCalls) {
  const std::vector<Config> cs = configs();
  std::vector<Bits> serial;
  for (const Config& c : cs) {
    Operands o = make_operands(c);
    o.options.num_threads = 2;
    serial.push_back(run_both(o));
  }
  const int threads = 8, rounds = 3;
  std::vector<std::vector<Bits>> got(threads);
  run_together(threads, [&](int i) {
    for (int r = 0; r < rounds; ++r) {
      Operands o = make_operands(cs[size_t(i + r) % cs.size()]);
      o.options.num_threads = 1 + (i + r) % 3;  // 1, 2, 3: the bits do not depend on it
      got[size_t(i)].push_back(run_both(o));
    }
  });
  for (int i = 0; i < threads; ++i)
    for (int r = 0; r < rounds; ++r)
      for (const char* n : kOutputs)
        EXPECT_EQ(got[size_t(i)][size_t(r)].at(n), serial[size_t(i + r) % cs.size()].at(n))
            << n << ", thread " << i << ", round " << r;
}

// The same input tensors read by every thread at once; each thread has its outputs.
TEST(Concurrency, SharedReadOnlyInputsGiveTheBitsOfSerialCalls) {
  for (const Config& c : configs()) {
    SCOPED_TRACE(c.name());
    Operands shared = make_operands(c);
    ASSERT_TRUE(run_forward_with_caches(shared).ok());  // the caches every backward reads
    const Operands pristine = shared;
    Operands serial = shared;
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(serial), backward_outputs(serial), serial.options).ok());
    Operands serial_fwd = shared;
    ASSERT_TRUE(mhc::pre_forward(forward_inputs(serial_fwd), forward_outputs(serial_fwd), serial_fwd.options).ok());

    const int threads = 6;
    std::vector<Operands> mine(threads, pristine);  // only their outputs are used
    run_together(threads, [&](int i) {
      Operands& m = mine[size_t(i)];
      mhc::PreForwardOutputs fout{m.h_in.view(), m.h_post.view(), m.h_res.optional_view(), {}, {}, {}};
      mhc::PreBackwardOutputs bout = backward_outputs(m);
      mhc::Options options = shared.options;
      options.num_threads = i % 2 ? 2 : 0;
      for (int r = 0; r < 2; ++r) {
        mhc::Status f = mhc::pre_forward(forward_inputs(shared), fout, options);
        if (!f.ok()) throw std::runtime_error(f.message());
        mhc::Status b = mhc::pre_backward(backward_inputs(shared), bout, options);
        if (!b.ok()) throw std::runtime_error(b.message());
      }
    });
    for (int i = 0; i < threads; ++i) {
      for (const char* n : {"h_in", "h_post", "h_res"})
        EXPECT_EQ(member(mine[size_t(i)], n).raw(), member(serial_fwd, n).raw()) << n << " thread " << i;
      for (const char* n : {"grad_x", "grad_phi", "grad_alpha", "grad_bias", "grad_gamma"})
        EXPECT_EQ(member(mine[size_t(i)], n).raw(), member(serial, n).raw()) << n << " thread " << i;
    }
    // Nobody wrote the shared inputs.
    for (const char* n : {"x", "phi", "alpha", "bias", "gamma", "inv_rms", "h_mix", "h_pre", "h_post", "grad_h_in",
                          "grad_h_post", "grad_h_res", "grad_x_post"})
      EXPECT_EQ(member(shared, n).buffer.snapshot(), member(const_cast<Operands&>(pristine), n).buffer.snapshot()) << n;
  }
}

// ---------------------------------------------------------------- the pool's policy

// While one call holds the pool, another caller's items all run on its own thread.
TEST(ThreadPool, ACallerFindingThePoolBusyRunsAloneOnItsOwnThread) {
  std::mutex m;
  std::condition_variable cv;
  bool holder_inside = false, other_done = false;
  std::thread holder([&] {
    mhc::runtime::parallel_for(4, 4, [&](int64_t item, int) {
      if (item != 0) return;
      std::unique_lock<std::mutex> lock(m);
      holder_inside = true;
      cv.notify_all();
      cv.wait(lock, [&] { return other_done; });  // hold the pool until the other caller is done
    });
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return holder_inside; });
  }
  const std::thread::id me = std::this_thread::get_id();
  std::set<std::thread::id> ran_on;
  std::set<int> workers;
  mhc::runtime::parallel_for(16, 4, [&](int64_t, int worker) {
    ran_on.insert(std::this_thread::get_id());  // one thread only: no lock needed
    workers.insert(worker);
  });
  int region_workers = 0;
  mhc::runtime::parallel_region(4, [&](int worker, int count, mhc::runtime::Barrier& barrier) {
    region_workers = count;
    EXPECT_EQ(worker, 0);
    barrier.arrive_and_wait();  // a barrier of one never waits
  });
  {
    std::lock_guard<std::mutex> lock(m);
    other_done = true;
  }
  cv.notify_all();
  holder.join();
  EXPECT_EQ(ran_on, std::set<std::thread::id>{me});
  EXPECT_EQ(workers, std::set<int>{0});
  EXPECT_EQ(region_workers, 1);
}

int process_threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// Six callers asking for four threads each: at most the callers plus the pool's
// three helpers run, never six times three.
TEST(ThreadPool, ConcurrentCallersDoNotOversubscribe) {
  Config c = configs()[0];
  c.S = 256;
  const int callers = 6;
  const int before = process_threads();
  std::atomic<bool> done{false};
  std::atomic<int> most{0};
  std::thread sampler([&] {
    while (!done.load()) {
      int now = process_threads(), seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {}
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  run_together(callers, [&](int) {
    for (int r = 0; r < 3; ++r) {
      Operands o = make_operands(c);
      o.options.num_threads = 4;
      run_both(o);
    }
  });
  done = true;
  sampler.join();
  // before (this thread, the pool's existing helpers) + the sampler + the callers
  // + at most 3 new helpers (the pool grows to what one call asks for).
  EXPECT_LE(most.load(), before + 1 + callers + 3);
}

// ---------------------------------------------------------------- the knobs

TEST(ThreadKnobs, NumThreadsOneRunsOnTheCallerOnly) {
  const std::thread::id me = std::this_thread::get_id();
  std::set<std::thread::id> ran_on;
  mhc::runtime::parallel_for(64, 1, [&](int64_t, int worker) {
    EXPECT_EQ(worker, 0);
    ran_on.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ran_on, std::set<std::thread::id>{me});
}

TEST(ThreadKnobs, ParallelForUsesAtMostTheThreadsAskedAndAllItemsRunOnce) {
  for (int threads : {1, 2, 3, 7}) {
    std::vector<std::atomic<int>> seen(100);
    std::mutex m;
    std::set<int> workers;
    mhc::runtime::parallel_for(100, threads, [&](int64_t item, int worker) {
      seen[size_t(item)].fetch_add(1);
      std::lock_guard<std::mutex> lock(m);
      workers.insert(worker);
    });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1);
    EXPECT_LE(int(workers.size()), threads);
    EXPECT_LT(*workers.rbegin(), threads);
  }
}

// More threads than kMaxThreads are not created: the workers stop at the cap.
TEST(ThreadKnobs, WorkersAreCappedAtKMaxThreads) {
  const int64_t items = mhc::runtime::kMaxThreads + 100;
  std::atomic<int> top{-1};
  std::atomic<int64_t> count{0};
  mhc::runtime::parallel_for(items, 1 << 20, [&](int64_t, int worker) {
    count.fetch_add(1);
    int seen = top.load();
    while (worker > seen && !top.compare_exchange_weak(seen, worker)) {}
  });
  EXPECT_EQ(count.load(), items);
  EXPECT_LT(top.load(), mhc::runtime::kMaxThreads);
}

struct EnvGuard {
  std::string saved;
  bool had = false;
  EnvGuard() {
    if (const char* v = std::getenv("MHC_NUM_THREADS")) { saved = v; had = true; }
  }
  ~EnvGuard() {
    if (had) setenv("MHC_NUM_THREADS", saved.c_str(), 1);
    else unsetenv("MHC_NUM_THREADS");
  }
};

TEST(ThreadKnobs, MhcNumThreadsSetsTheDefaultWithinBounds) {
  EnvGuard guard;
  unsetenv("MHC_NUM_THREADS");
  const int hardware = mhc::runtime::default_thread_count();
  EXPECT_GE(hardware, 1);
  EXPECT_LE(hardware, mhc::runtime::kMaxThreads);
  setenv("MHC_NUM_THREADS", "3", 1);
  EXPECT_EQ(mhc::runtime::default_thread_count(), 3);
  setenv("MHC_NUM_THREADS", "100000", 1);
  EXPECT_EQ(mhc::runtime::default_thread_count(), mhc::runtime::kMaxThreads);
  for (const char* ignored : {"0", "-2", "many", ""}) {
    setenv("MHC_NUM_THREADS", ignored, 1);
    EXPECT_EQ(mhc::runtime::default_thread_count(), hardware) << "MHC_NUM_THREADS=" << ignored;
  }
}

TEST(ThreadKnobs, MhcSpinUsParsesDigitsOnlyWithinBounds) {
  using mhc::runtime::kDefaultSpinMicroseconds;
  using mhc::runtime::spin_microseconds;
  EXPECT_EQ(spin_microseconds(nullptr), kDefaultSpinMicroseconds);
  EXPECT_EQ(spin_microseconds("0"), 0);
  EXPECT_EQ(spin_microseconds("250"), 250);
  EXPECT_EQ(spin_microseconds("99999999999999999999999"), mhc::runtime::kMaxSpinMicroseconds);
  for (const char* ignored : {"", "-5", "1e3", "ten", " 7"})
    EXPECT_EQ(spin_microseconds(ignored), kDefaultSpinMicroseconds) << "MHC_SPIN_US=" << ignored;
}

// Helpers still polling for work, helpers just giving up (pauses around the spin
// budget) and helpers asleep (long pauses) all take their share of the next job.
// A job that does not finish within 10 s fails the test instead of hanging it.
TEST(ThreadPool, PollingAndSleepingHelpersBothTakeTheNextJob) {
  const int64_t budget_us = mhc::runtime::spin_microseconds(std::getenv("MHC_SPIN_US"));
  std::vector<int64_t> pauses_us;
  for (int i = 0; i < 300; ++i) pauses_us.push_back(i % 3 == 0 ? 0 : (i * 37) % (2 * budget_us + 50));
  for (int64_t long_pause : {5000, 20000}) pauses_us.push_back(std::max(long_pause, 4 * budget_us));
  for (int64_t pause_us : pauses_us) {
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    std::vector<std::atomic<int>> seen(64);
    std::mutex m;
    std::set<std::thread::id> ran_on;
    auto job = std::async(std::launch::async, [&] {
      mhc::runtime::parallel_for(64, 2, [&](int64_t item, int) {
        seen[size_t(item)].fetch_add(1);
        std::lock_guard<std::mutex> lock(m);
        ran_on.insert(std::this_thread::get_id());
      });
    });
    if (job.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      std::fprintf(stderr, "a job after a pause of %lld us did not finish in 10 s\n", (long long)pause_us);
      std::abort();
    }
    for (auto& s : seen) ASSERT_EQ(s.load(), 1) << "after a pause of " << pause_us << " us";
    ASSERT_EQ(ran_on.size(), 2u) << "after a pause of " << pause_us << " us";
  }
}

// A body travels to the helpers as its bytes when it is a few trivially copyable
// captures, else as a pointer to the caller's: both run every item once, with the
// captures the caller gave (the helper's items read them).
TEST(ThreadPool, BodiesInlineAndByPointerRunEveryItemOnceWithTheirCaptures) {
  std::vector<std::atomic<int>> seen(64);
  std::atomic<int64_t> sum{0};
  const int64_t offset = 1000;
  auto small = [&seen, offset](int64_t item, int) { seen[size_t(item)].fetch_add(int(offset - 999)); };
  static_assert(mhc::runtime::detail::kBodyInline<decltype(small)>, "a few captures travel inline");
  mhc::runtime::parallel_for(64, 2, small);
  std::array<int64_t, 8> weights{1, 2, 3, 4, 5, 6, 7, 8};  // 64 bytes by value: too large to travel inline
  auto large = [&sum, weights](int64_t item, int) { sum.fetch_add(weights[size_t(item) % 8]); };
  static_assert(!mhc::runtime::detail::kBodyInline<decltype(large)>, "a large body travels by pointer");
  mhc::runtime::parallel_for(64, 2, large);
  const std::string label = "not trivially copyable";
  auto owning = [&seen, label](int64_t item, int) { seen[size_t(item)].fetch_add(int(label.size()) - 21); };
  static_assert(!mhc::runtime::detail::kBodyInline<decltype(owning)>, "an owning body travels by pointer");
  mhc::runtime::parallel_for(64, 2, owning);
  for (auto& s : seen) EXPECT_EQ(s.load(), 2);
  EXPECT_EQ(sum.load(), 8 * 36);
}

// The caller's share throwing: parallel_for rethrows once the helpers' items have
// all run, and the pool takes the next job.
TEST(ThreadPool, AThrowingShareRethrowsAfterTheOtherWorkersFinish) {
  std::vector<std::atomic<int>> seen(64);
  EXPECT_THROW(mhc::runtime::parallel_for(64, 2,
                                          [&](int64_t item, int) {
                                            if (item == 0) throw std::runtime_error("item 0");
                                            seen[size_t(item)].fetch_add(1);
                                          }),
               std::runtime_error);
  for (size_t i = 32; i < 64; ++i) EXPECT_EQ(seen[i].load(), 1) << "item " << i << " of the helper";
  std::atomic<int> count{0};
  mhc::runtime::parallel_for(64, 2, [&](int64_t, int) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), 64);
}

}  // namespace
}  // namespace mhc_test
