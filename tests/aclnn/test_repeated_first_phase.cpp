// The forward's first phase asked again with the same aclTensors (an inference
// loop's every step) takes its plan from the thread's primitive cache
// (docs/aclnn.md): these tests hold it to what a first phase over fresh handles
// gives, whatever changed between the calls.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "op_case.hpp"

namespace aclnn_test {
namespace {

class RepeatedFirstPhase : public ::testing::TestWithParam<Op> {};

// Outputs back to the pattern, the same storage and aclTensors kept.
void repaint_outputs(OpCase& c) {
  for (Slot& s : c.slots())
    if (s.output && s.present) std::fill(s.storage.begin(), s.storage.end(), kPattern);
}

// Both phases of a case made afresh (new handles) with these scalars.
std::vector<std::vector<uint8_t>> fresh_outputs(Op op, double norm_eps, double hc_eps, int64_t mode,
                                                uint64_t* workspace_size = nullptr) {
  OpCase c(op);
  c.norm_eps = norm_eps;
  c.hc_eps = hc_eps;
  c.materialize();
  EXPECT_EQ(c.get_workspace(mode), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  if (workspace_size) *workspace_size = c.workspace_size;
  EXPECT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  return c.output_storage();
}

TEST_P(RepeatedFirstPhase, GivesTheFirstCallsSizeAndBits) {
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  const uint64_t first_size = c.workspace_size;
  ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  const auto first = c.output_storage();
  for (int step = 0; step < 3; ++step) {
    repaint_outputs(c);
    c.workspace_size = kWorkspaceSentinel;
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(c.workspace_size, first_size);
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_TRUE(c.output_storage() == first) << "step " << step;
  }
}

// Both phases of c with these scalars, right after both phases of c with the
// previous ones: the first phase's last success on the thread is c's own.
std::vector<std::vector<uint8_t>> after_a_success(OpCase& c, double norm_eps, double hc_eps, int64_t mode,
                                                  int64_t previous_mode) {
  repaint_outputs(c);
  EXPECT_EQ(c.get_workspace(previous_mode), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  repaint_outputs(c);
  c.norm_eps = norm_eps;
  c.hc_eps = hc_eps;
  EXPECT_EQ(c.get_workspace(mode), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  return c.output_storage();
}

TEST_P(RepeatedFirstPhase, HonoursChangedScalars) {
  const Op op = GetParam();
  struct Change {
    double norm_eps, hc_eps;
    int64_t mode;
  };
  std::vector<Change> changes = {{1e-6, 1e-6, 0}, {0.25, 1e-6, 0}, {0.25, 0.125, 0}};
  if (is_v2(op)) changes.push_back({0.25, 0.125, 1});  // HF32 products
  std::vector<std::vector<std::vector<uint8_t>>> fresh;
  for (const Change& change : changes) fresh.push_back(fresh_outputs(op, change.norm_eps, change.hc_eps, change.mode));
  OpCase c(op);
  c.materialize();
  for (size_t i = 1; i < changes.size(); ++i) {
    const Change& change = changes[i];
    EXPECT_TRUE(fresh[i] != fresh[i - 1]) << "change " << i << " reaches the outputs: the comparison can fail";
    c.norm_eps = changes[i - 1].norm_eps;
    c.hc_eps = changes[i - 1].hc_eps;
    EXPECT_TRUE(after_a_success(c, change.norm_eps, change.hc_eps, change.mode, changes[i - 1].mode) == fresh[i])
        << "norm_eps " << change.norm_eps << " hc_eps " << change.hc_eps << " mode " << change.mode;
  }
}

TEST_P(RepeatedFirstPhase, ReportsATensorDestroyedAfterASuccess) {
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_SUCCESS);
  for (const char* name : {"x", "hIn", "invRms"}) {
    OpCase d(GetParam());
    d.materialize();
    ASSERT_EQ(d.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    ASSERT_EQ(aclDestroyAclOpExecutor(d.executor), ACLNN_SUCCESS);
    Slot& slot = d.slot(name);
    ASSERT_EQ(aclDestroyTensor(slot.tensor), ACLNN_SUCCESS);  // the handle stays in the slot: stale
    reset_recent_error();
    d.executor = kExecutorSentinel;
    EXPECT_EQ(d.get_workspace(), ACLNN_ERR_PARAM_INVALID) << name;
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find("not a live aclTensor"), std::string::npos)
        << aclGetRecentErrMsg();
    EXPECT_EQ(d.executor, kExecutorSentinel);
    slot.tensor = nullptr;  // already destroyed
  }
}

TEST_P(RepeatedFirstPhase, ReadsTheThreadCountAgain) {
  const Op op = GetParam();
  const ScopedThreadCount threads;
  const char* counts[] = {"1", "2", "1"};
  std::vector<uint64_t> fresh_sizes;
  std::vector<std::vector<std::vector<uint8_t>>> fresh;
  for (const char* count : counts) {
    threads.set(count);
    uint64_t size = 0;
    fresh.push_back(fresh_outputs(op, 1e-6, 1e-6, 0, &size));
    fresh_sizes.push_back(size);
  }
  OpCase c(op);
  c.materialize();
  for (size_t i = 1; i < 3; ++i) {
    threads.set(counts[i - 1]);
    repaint_outputs(c);
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    threads.set(counts[i]);  // then asked again under another count
    repaint_outputs(c);
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(c.workspace_size, fresh_sizes[i]) << counts[i] << " thread(s)";
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_TRUE(c.output_storage() == fresh[i]) << counts[i] << " thread(s)";
  }
  // A family that plans a workspace sizes it per worker: a stale answer would show
  // (the serial reference family plans none).
  if (fresh_sizes[0] != 0) EXPECT_NE(fresh_sizes[0], fresh_sizes[1]);
}

// Executors of one cached primitive share it: each still runs once, in any
// order, and destroying one leaves the others whole.
TEST_P(RepeatedFirstPhase, ExecutorsOfOneCachedPrimitiveRunInAnyOrder) {
  const auto fresh = fresh_outputs(GetParam(), 1e-6, 1e-6, 0);
  OpCase c(GetParam());
  c.materialize();
  std::vector<aclOpExecutor*> executors;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    executors.push_back(c.executor);
  }
  ASSERT_EQ(aclDestroyAclOpExecutor(executors[1]), ACLNN_SUCCESS);
  for (aclOpExecutor* executor : {executors[2], executors[0]}) {
    repaint_outputs(c);
    c.executor = executor;
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_TRUE(c.output_storage() == fresh);
    EXPECT_EQ(c.run(), ACLNN_ERR_PARAM_INVALID) << "an executor runs once";
  }
  c.executor = executors[1];
  EXPECT_EQ(c.run(), ACLNN_ERR_PARAM_INVALID) << "destroyed";
}

INSTANTIATE_TEST_SUITE_P(Aclnn, RepeatedFirstPhase, ::testing::Values(Op::pre, Op::pre_v2),
                         [](const ::testing::TestParamInfo<Op>& info) { return std::string(op_name(info.param)); });

}  // namespace
}  // namespace aclnn_test
