// The caller's threads in place of mhc's pool (mhc::Executor): every item runs once, on
// the executor's threads, in the pool's contiguous shares; only the setting thread's
// calls use it; and the operators' outputs are the same bits as on the pool.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "runtime/thread_pool.hpp"
#include "test_util.hpp"

namespace mhc_test::executor {
namespace {

// Runs the shares in reverse order, each on a thread of its own.
void on_new_threads(void* self, int workers, void (*share)(void*, int), void* context) {
  ++*static_cast<std::atomic<int>*>(self);
  std::vector<std::thread> threads;
  for (int w = workers - 1; w >= 0; --w) threads.emplace_back([=] { share(context, w); });
  for (auto& t : threads) t.join();
}

// Runs every share on the calling thread, last first.
void serially_backwards(void* self, int workers, void (*share)(void*, int), void* context) {
  ++*static_cast<std::atomic<int>*>(self);
  for (int w = workers - 1; w >= 0; --w) share(context, w);
}

class Scope {
 public:
  explicit Scope(const mhc::Executor* e) : previous_(mhc::set_thread_executor(e)) {}
  ~Scope() { mhc::set_thread_executor(previous_); }

 private:
  const mhc::Executor* previous_;
};

TEST(Executor, RunsEveryItemOnceInThePoolsSharesOnItsThreads) {
  std::atomic<int> jobs{0};
  const mhc::Executor executor{&on_new_threads, &jobs};
  const Scope scope(&executor);
  const int64_t items = 103;
  std::vector<std::atomic<int>> runs(items);
  std::vector<int> worker_of(items, -1);
  std::vector<std::thread::id> thread_of(items);
  mhc::runtime::parallel_for(items, 4, [&](int64_t item, int worker) {
    ++runs[size_t(item)];
    worker_of[size_t(item)] = worker;
    thread_of[size_t(item)] = std::this_thread::get_id();
  });
  EXPECT_EQ(jobs.load(), 1);
  for (int64_t i = 0; i < items; ++i) {
    EXPECT_EQ(runs[size_t(i)].load(), 1) << i;
    int share = 0;  // the pool's contiguous shares: [items*w/4, items*(w+1)/4)
    while (i >= items * (share + 1) / 4) ++share;
    EXPECT_EQ(worker_of[size_t(i)], share) << i;
    EXPECT_NE(thread_of[size_t(i)], std::this_thread::get_id()) << i;
  }
}

TEST(Executor, OnlyTheSettingThreadsCallsUseIt) {
  std::atomic<int> jobs{0};
  const mhc::Executor executor{&serially_backwards, &jobs};
  const Scope scope(&executor);
  std::thread other([] { mhc::runtime::parallel_for(8, 2, [](int64_t, int) {}); });
  other.join();
  EXPECT_EQ(jobs.load(), 0);
  mhc::runtime::parallel_for(8, 2, [](int64_t, int) {});
  EXPECT_EQ(jobs.load(), 1);
  mhc::runtime::parallel_for(8, 1, [](int64_t, int) {});  // one worker: run here, no job
  EXPECT_EQ(jobs.load(), 1);
}

// MhcPreSinkhorn, MhcPost and MhcRmsNorm: the same bits on the pool and on executors.
TEST(Executor, OperatorsGiveThePoolsBits) {
  const int64_t T = 37, N = 4, D = 300, F = 2 * N + N * N;
  Rng rng(11);
  auto filled = [&](DType dtype, Shape shape, double scale) {
    Tensor t = make_tensor(dtype, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(-1.0, 1.0) * scale);
    return t;
  };
  Tensor x = filled(DType::bf16, {T, N, D}, 2.0), phi = filled(DType::fp32, {F, N * D}, 0.02);
  Tensor alpha = filled(DType::fp32, {3}, 1.0), bias = filled(DType::fp32, {F}, 0.1);
  Tensor h_out = filled(DType::bf16, {T, D}, 1.0), h_post = filled(DType::fp32, {T, N}, 1.0);
  Tensor h_res = filled(DType::fp32, {T, N, N}, 0.5), weight = filled(DType::fp32, {D}, 1.0);
  auto run = [&](int threads) {
    Tensor h_in = make_tensor(DType::bf16, {T, D}), post = make_tensor(DType::fp32, {T, N});
    Tensor comb = make_tensor(DType::fp32, {T, N, N}), out = make_tensor(DType::bf16, {T, N, D});
    Tensor y = make_tensor(DType::bf16, {T, D});
    mhc::Options o;
    o.num_threads = threads;
    EXPECT_TRUE(mhc::pre_sinkhorn_forward({x.view(), phi.view(), alpha.view(), bias.view(), 20},
                                          {h_in.view(), post.view(), comb.view(), {}, {}, {}, {}, {}}, o).ok());
    EXPECT_TRUE(mhc::post_forward({x.view(), h_res.view(), h_out.view(), h_post.view()}, {out.view()}, o).ok());
    EXPECT_TRUE(mhc::rms_norm_forward({h_out.view(), weight.view(), 1e-6}, {y.view()}, o).ok());
    std::vector<uint32_t> bits;
    for (const Tensor* t : {&h_in, &post, &comb, &out, &y}) {
      const std::vector<uint32_t> raw = t->raw();
      bits.insert(bits.end(), raw.begin(), raw.end());
    }
    return bits;
  };
  const std::vector<uint32_t> pool = run(2);
  for (auto fn : {&on_new_threads, &serially_backwards}) {
    std::atomic<int> jobs{0};
    const mhc::Executor executor{fn, &jobs};
    const Scope scope(&executor);
    for (int threads : {2, 3, 5}) EXPECT_EQ(run(threads), pool) << threads << " threads";
    EXPECT_GT(jobs.load(), 0);
  }
}

}  // namespace
}  // namespace mhc_test::executor
