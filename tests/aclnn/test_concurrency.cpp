// The aclnn face under concurrent use (docs/reliability.md): many threads
// running the four operators at once get the bytes of serial runs; one
// executor raced by several threads runs exactly once; run and destroy racing
// on one executor, and destroy racing destroy on one tensor, resolve to exactly
// one success; the rest of the lifecycle misuse not in test_lifecycle.cpp.
// Run under TSan by scripts/hardening.sh.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "op_case.hpp"

namespace aclnn_test {
namespace {

std::vector<std::vector<uint8_t>> outputs_of(OpCase& c) {
  std::vector<std::vector<uint8_t>> out;
  for (const Slot& s : c.slots())
    if (s.output && s.present) out.push_back(c.logical_bytes(s.name));
  return out;
}

Config config_for(int i) {
  Config c;
  c.T = 3 + 31 * (i % 3);  // up to 65 tokens: two backward chunks
  c.D = 8 << (i % 3);
  c.gamma = i % 2 == 0;
  c.optional_extras = i % 4 != 1;
  c.two_entry_alpha = i % 5 == 3;
  c.x_dtype = i % 2 ? ACL_FLOAT16 : ACL_BF16;
  return c;
}

constexpr Op kOps[] = {Op::pre, Op::pre_v2, Op::backward, Op::backward_v2};

template <class Fn>
void run_together(int threads, Fn fn) {
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      fn(i);
    });
  for (auto& t : pool) t.join();
}

TEST(AclnnConcurrency, ManyThreadsRunningAllOperatorsGetTheBytesOfSerialRuns) {
  const int kinds = 8;
  std::vector<std::vector<std::vector<uint8_t>>> serial;
  for (int i = 0; i < kinds; ++i) {
    OpCase c(kOps[i % 4], config_for(i));
    c.materialize();
    ASSERT_EQ(c.get_workspace(1), ACLNN_SUCCESS) << aclGetRecentErrMsg();  // as the threads: V2 in HF32
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    serial.push_back(outputs_of(c));
  }
  const int threads = 8, rounds = 3;
  std::vector<std::string> failures(threads);
  std::vector<std::vector<std::vector<std::vector<uint8_t>>>> got(threads);
  run_together(threads, [&](int t) {
    for (int r = 0; r < rounds; ++r) {
      const int i = (t + r) % kinds;
      OpCase c(kOps[i % 4], config_for(i));
      c.materialize();
      aclrtStream stream = nullptr;
      if (r == 1 && aclrtCreateStream(&stream) != ACL_SUCCESS) failures[t] = "aclrtCreateStream";
      if (c.get_workspace(1) != ACLNN_SUCCESS) failures[t] = std::string("phase 1: ") + aclGetRecentErrMsg();
      std::vector<uint8_t> ws(c.workspace_size + 64);
      if (c.run(c.workspace_size ? ws.data() + t % 7 : nullptr, c.workspace_size, stream) != ACLNN_SUCCESS)
        failures[t] = std::string("phase 2: ") + aclGetRecentErrMsg();
      if (stream != nullptr && aclrtDestroyStream(stream) != ACL_SUCCESS) failures[t] = "aclrtDestroyStream";
      got[t].push_back(outputs_of(c));
    }
  });
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(failures[t], "") << "thread " << t;
    for (int r = 0; r < rounds; ++r) EXPECT_EQ(got[t][r], serial[(t + r) % kinds]) << "thread " << t << " round " << r;
  }
}

// Several threads run the same executor at once: one run, the others 161002.
TEST(AclnnConcurrency, AnExecutorRacedByManyThreadsRunsExactlyOnce) {
  for (Op op : kOps) {
    OpCase reference(op);
    reference.materialize();
    ASSERT_EQ(reference.get_workspace(), ACLNN_SUCCESS);
    ASSERT_EQ(reference.run(), ACLNN_SUCCESS);

    OpCase c(op);
    c.materialize();
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
    const int threads = 6;
    std::vector<aclnnStatus> status(threads);
    std::vector<std::string> messages(threads);
    run_together(threads, [&](int t) {
      std::vector<uint8_t> ws(c.workspace_size + 1);
      status[t] = c.run(c.workspace_size ? ws.data() : nullptr, c.workspace_size);
      messages[t] = aclGetRecentErrMsg();
    });
    int ran = 0;
    for (int t = 0; t < threads; ++t) {
      if (status[t] == ACLNN_SUCCESS) {
        ++ran;
      } else {
        EXPECT_EQ(status[t], ACLNN_ERR_PARAM_INVALID);
        EXPECT_NE(messages[t].find("not live"), std::string::npos) << messages[t];
      }
    }
    EXPECT_EQ(ran, 1) << op_name(op);
    EXPECT_EQ(outputs_of(c), outputs_of(reference)) << op_name(op);
  }
}

// Run and destroy racing on one executor: exactly one of them takes it.
TEST(AclnnConcurrency, RunAndDestroyRacingOnOneExecutorResolveToOneSuccess) {
  for (int round = 0; round < 20; ++round) {
    OpCase c(kOps[round % 4]);
    c.materialize();
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
    std::vector<uint8_t> ws(c.workspace_size + 1);
    aclnnStatus ran = -1, destroyed = -1;
    run_together(2, [&](int t) {
      if (t == 0) ran = c.run(c.workspace_size ? ws.data() : nullptr, c.workspace_size);
      else destroyed = aclDestroyAclOpExecutor(c.executor);
    });
    EXPECT_EQ((ran == ACLNN_SUCCESS) + (destroyed == ACLNN_SUCCESS), 1) << "run " << ran << ", destroy " << destroyed;
    if (ran != ACLNN_SUCCESS) EXPECT_TRUE(c.outputs_untouched());
  }
}

// Destroying one tensor from several threads: one success, the others 161002.
TEST(AclnnConcurrency, DestroyRacingDestroyOnOneTensorSucceedsOnce) {
  for (int round = 0; round < 20; ++round) {
    const int64_t dims[2] = {2, 3};
    aclTensor* t = aclCreateTensor(dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, nullptr, 0, nullptr);
    ASSERT_NE(t, nullptr);
    std::atomic<int> ok{0}, invalid{0};
    run_together(4, [&](int) {
      const aclnnStatus s = aclDestroyTensor(t);
      if (s == ACLNN_SUCCESS) ok.fetch_add(1);
      else if (s == ACLNN_ERR_PARAM_INVALID) invalid.fetch_add(1);
    });
    EXPECT_EQ(ok.load(), 1);
    EXPECT_EQ(invalid.load(), 3);
  }
}

// Tensors, streams and executors made and freed from many threads at once.
TEST(AclnnConcurrency, HandlesMadeAndFreedFromManyThreads) {
  std::atomic<int> failures{0};
  run_together(8, [&](int t) {
    for (int r = 0; r < 50; ++r) {
      const int64_t dims[1] = {4 + t};
      aclTensor* a = aclCreateTensor(dims, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 1, nullptr);
      aclrtStream s = nullptr;
      if (a == nullptr || aclrtCreateStream(&s) != ACL_SUCCESS) failures.fetch_add(1);
      if (aclrtDestroyStream(s) != ACL_SUCCESS || aclDestroyTensor(a) != ACLNN_SUCCESS) failures.fetch_add(1);
      if (aclDestroyTensor(a) != ACLNN_ERR_PARAM_INVALID || aclrtDestroyStream(s) == ACL_SUCCESS) failures.fetch_add(1);
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

// ------------------------------------------------------------ enum arguments

extern "C" aclTensor* mhc_test_tensor_with_codes(const int64_t* dims, uint64_t rank, int dtype, int format, void* data);
extern "C" aclError mhc_test_memcpy_with_kind(void* dst, size_t dest_max, const void* src, size_t count, int kind);

// Regression (fuzz_aclnn_mhc_pre): a format code outside aclFormat's enumerators
// (C allows any int) was loaded as the C++ enum, which is undefined behaviour.
// Any int is now an error code with a message.
TEST(AclnnEnums, CodesOutsideTheEnumeratorsAreRejectedWithAMessage) {
  OpCase c(Op::pre);
  c.materialize();
  const int64_t dims[1] = {3};
  float alpha[3] = {1, 1, 1};
  for (int format : {97, 66, 1000000, -100, 2147483647}) {
    aclTensor* odd = mhc_test_tensor_with_codes(dims, 1, ACL_FLOAT, format, alpha);
    ASSERT_NE(odd, nullptr);
    aclTensor* saved = c.slot("alpha").tensor;
    c.slot("alpha").tensor = odd;
    EXPECT_EQ(c.get_workspace(), ACLNN_ERR_PARAM_INVALID);
    EXPECT_EQ(std::string(aclGetRecentErrMsg()),
              "aclnnMhcPreGetWorkspaceSize: alpha: unknown aclFormat " + std::to_string(format));
    c.slot("alpha").tensor = saved;
    EXPECT_EQ(aclDestroyTensor(odd), ACLNN_SUCCESS);
  }
  for (int dtype : {99, -7, 1 << 20}) {
    aclTensor* odd = mhc_test_tensor_with_codes(dims, 1, dtype, ACL_FORMAT_ND, alpha);
    ASSERT_NE(odd, nullptr);
    aclTensor* saved = c.slot("alpha").tensor;
    c.slot("alpha").tensor = odd;
    EXPECT_EQ(c.get_workspace(), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find("aclDataType " + std::to_string(dtype) + " is not supported"),
              std::string::npos) << aclGetRecentErrMsg();
    c.slot("alpha").tensor = saved;
    EXPECT_EQ(aclDestroyTensor(odd), ACLNN_SUCCESS);
  }
  EXPECT_TRUE(c.outputs_untouched());
  char a = 1, b = 2;
  EXPECT_EQ(mhc_test_memcpy_with_kind(&a, 1, &b, 1, 77), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(a, 1);
}

// ------------------------------------------------------------ tensor descriptors

// Each of these overflowed a signed integer (undefined behaviour) before it was
// rejected: default strides of huge dims, an offset past the address space
// without storage dims, storage dims whose count overflows or is negative.
TEST(AclnnTensors, SizesPast64BitsAreRejectedWithoutOverflow) {
  OpCase c(Op::pre);
  c.materialize();
  float data[4] = {1, 1, 1, 1};
  struct Odd {
    std::vector<int64_t> dims;
    const int64_t* strides;
    int64_t offset;
    std::vector<int64_t> storage;  // empty: none declared
    const char* message;
  };
  const int64_t one[1] = {1};
  const std::vector<Odd> odd = {
      {{int64_t(1) << 40, int64_t(1) << 40, int64_t(1) << 40}, nullptr, 0, {}, "alpha: expected rank 1, got rank 3"},
      {{3}, one, INT64_MAX / 2, {}, "alpha: offset 4611686018427387903 elements overflows the address space"},
      {{3}, one, 0, {INT64_MAX, 2, 0}, "alpha: view [3] with strides [1] and offset 0 reaches outside its storage"},
      {{3}, one, 0, {-2, -3}, "alpha: storage dims [-2,-3] are negative or their element count overflows 64 bits"},
      {{3}, one, 0, {INT64_MAX, 4}, "alpha: storage dims [9223372036854775807,4] are negative or their element count"},
  };
  for (const Odd& o : odd) {
    aclTensor* t = aclCreateTensor(o.dims.data(), o.dims.size(), ACL_FLOAT, o.strides, o.offset, ACL_FORMAT_ND,
                                   o.storage.empty() ? nullptr : o.storage.data(), o.storage.size(), data);
    ASSERT_NE(t, nullptr) << aclGetRecentErrMsg();
    aclTensor* saved = c.slot("alpha").tensor;
    c.slot("alpha").tensor = t;
    EXPECT_EQ(c.get_workspace(), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find(o.message), std::string::npos) << aclGetRecentErrMsg();
    c.slot("alpha").tensor = saved;
    EXPECT_EQ(aclDestroyTensor(t), ACLNN_SUCCESS);
  }
  EXPECT_TRUE(c.outputs_untouched());
}

// ------------------------------------------------------------ lifecycle misuse

class LifecycleMisuse : public ::testing::TestWithParam<Op> {};

TEST_P(LifecycleMisuse, DestroyingAnExecutorTwiceIsAnError) {
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_SUCCESS);
  reset_recent_error();
  EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("not live"), std::string::npos) << aclGetRecentErrMsg();
  EXPECT_TRUE(c.outputs_untouched());
}

// Failed runs (NULL workspace, short workspace, dead stream) one after the
// other leave the executor live; it then runs once.
TEST_P(LifecycleMisuse, EveryFailedRunLeavesTheExecutorLive) {
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
  aclrtStream dead = nullptr;
  ASSERT_EQ(aclrtCreateStream(&dead), ACL_SUCCESS);
  ASSERT_EQ(aclrtDestroyStream(dead), ACL_SUCCESS);
  std::vector<uint8_t> ws(c.workspace_size + 64);
  if (c.workspace_size > 0) {
    EXPECT_EQ(c.run(nullptr, c.workspace_size), ACLNN_ERR_PARAM_NULLPTR);
    EXPECT_EQ(c.run(ws.data(), c.workspace_size - 1), ACLNN_ERR_PARAM_INVALID);
    EXPECT_EQ(c.run(nullptr, 0), ACLNN_ERR_PARAM_INVALID);
  }
  EXPECT_EQ(c.run(ws.data(), c.workspace_size, dead), ACLNN_ERR_PARAM_INVALID);
  EXPECT_TRUE(c.outputs_untouched());
  c.destroy_tensors();  // allowed before the run
  EXPECT_EQ(c.run(ws.data() + 3, c.workspace_size), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_FALSE(c.outputs_untouched());
  const auto after = c.slots();
  EXPECT_EQ(c.run(ws.data(), c.workspace_size), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_ERR_PARAM_INVALID);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(c.slots()[i].storage, after[i].storage) << after[i].name;
}

// A handle that was never an executor (or a tensor) is an error, not a crash.
TEST_P(LifecycleMisuse, ForgedHandlesAreErrors) {
  OpCase c(GetParam());
  for (uintptr_t forged : {uintptr_t(1), uintptr_t(0x40), uintptr_t(0xFFFFFFFFFFFFFFC0ull)}) {
    c.executor = reinterpret_cast<aclOpExecutor*>(forged);
    EXPECT_EQ(c.run(nullptr, 0), ACLNN_ERR_PARAM_INVALID);
    EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_ERR_PARAM_INVALID);
    EXPECT_EQ(aclDestroyTensor(reinterpret_cast<aclTensor*>(forged)), ACLNN_ERR_PARAM_INVALID);
  }
  c.executor = kExecutorSentinel;
}

INSTANTIATE_TEST_SUITE_P(Aclnn, LifecycleMisuse, ::testing::Values(Op::pre, Op::pre_v2, Op::backward, Op::backward_v2),
                         [](const ::testing::TestParamInfo<Op>& info) { return std::string(op_name(info.param)); });

}  // namespace
}  // namespace aclnn_test
