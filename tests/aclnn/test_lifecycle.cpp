// The executor's life (docs/aclnn.md): it runs once and is freed by the run;
// a run that fails its checks leaves it live; tensors may be destroyed before
// the run. Every misuse is an error code and a message, never a crash.
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "op_case.hpp"

namespace aclnn_test {
namespace {

class Lifecycle : public ::testing::TestWithParam<Op> {};

TEST_P(Lifecycle, RunsOnceThenTheSecondRunIsAnError) {
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  const auto first = c.output_storage();
  EXPECT_FALSE(c.outputs_untouched());
  reset_recent_error();
  EXPECT_EQ(c.run(), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("already run"), std::string::npos) << aclGetRecentErrMsg();
  EXPECT_EQ(c.output_storage(), first);
  // Running freed it: destroying it now is an error too.
  EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_ERR_PARAM_INVALID);
}

TEST_P(Lifecycle, DestroyingAnExecutorThatDidNotRunFreesIt) {
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_SUCCESS);
  EXPECT_EQ(c.run(), ACLNN_ERR_PARAM_INVALID);
  EXPECT_TRUE(c.outputs_untouched());
  EXPECT_EQ(aclDestroyAclOpExecutor(nullptr), ACLNN_SUCCESS);  // NULL: no-op
}

TEST_P(Lifecycle, WorkspaceTooSmallIsAnErrorAndTheExecutorStaysLive) {
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
  if (c.workspace_size == 0) GTEST_SKIP() << "this kernel family needs no workspace";
  std::vector<uint8_t> small(c.workspace_size - 1);
  reset_recent_error();
  EXPECT_EQ(c.run(small.data(), small.size()), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("workspaceSize"), std::string::npos) << aclGetRecentErrMsg();
  EXPECT_EQ(c.run(nullptr, 0), ACLNN_ERR_PARAM_INVALID);
  EXPECT_TRUE(c.outputs_untouched());
  EXPECT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
}

TEST_P(Lifecycle, NullWorkspaceWithNonZeroSizeIsAnError) {
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
  reset_recent_error();
  EXPECT_EQ(c.run(nullptr, c.workspace_size + 64), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("workspace is NULL"), std::string::npos);
  EXPECT_TRUE(c.outputs_untouched());
}

TEST_P(Lifecycle, NullExecutorIsAnError) {
  OpCase c(GetParam());
  c.executor = nullptr;
  EXPECT_EQ(c.run(nullptr, 0), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("executor is NULL"), std::string::npos);
}

TEST_P(Lifecycle, DestroyingTensorsBeforeTheRunIsAllowed) {
  OpCase reference(GetParam());
  reference.materialize();
  ASSERT_EQ(reference.get_workspace(), ACLNN_SUCCESS);
  ASSERT_EQ(reference.run(), ACLNN_SUCCESS);

  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
  c.destroy_tensors();  // the executor holds no reference to them
  ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(c.output_storage(), reference.output_storage());
}

TEST_P(Lifecycle, AnExecutorRunsOnlyThroughItsOwnOperator) {
  const Op op = GetParam();
  const Op other = op == Op::pre ? Op::pre_v2 : op == Op::pre_v2 ? Op::backward : op == Op::backward ? Op::backward_v2 : Op::pre;
  OpCase c(op);
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
  OpCase wrong(other);
  wrong.executor = c.executor;
  std::vector<uint8_t> ws(c.workspace_size + 1);
  reset_recent_error();
  EXPECT_EQ(wrong.run(ws.data(), ws.size()), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("belongs to"), std::string::npos) << aclGetRecentErrMsg();
  wrong.executor = kExecutorSentinel;
  EXPECT_TRUE(c.outputs_untouched());
  EXPECT_EQ(c.run(), ACLNN_SUCCESS);  // still live for its own operator
}

TEST_P(Lifecycle, RunsOnACreatedStreamAndRejectsADestroyedOne) {
  aclrtStream stream = nullptr;
  ASSERT_EQ(aclrtCreateStream(&stream), ACL_SUCCESS);
  OpCase c(GetParam());
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
  std::vector<uint8_t> ws(c.workspace_size);
  aclrtStream dead = nullptr;
  ASSERT_EQ(aclrtCreateStream(&dead), ACL_SUCCESS);
  ASSERT_EQ(aclrtDestroyStream(dead), ACL_SUCCESS);
  EXPECT_EQ(c.run(ws.data(), ws.size(), dead), ACLNN_ERR_PARAM_INVALID);
  EXPECT_TRUE(c.outputs_untouched());
  EXPECT_EQ(c.run(ws.data(), ws.size(), stream), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(aclrtSynchronizeStream(stream), ACL_SUCCESS);
  EXPECT_EQ(aclrtDestroyStream(stream), ACL_SUCCESS);
}

TEST_P(Lifecycle, AnyWorkspaceAlignmentGivesTheSameNumbers) {
  OpCase reference(GetParam());
  reference.materialize();
  ASSERT_EQ(reference.get_workspace(), ACLNN_SUCCESS);
  ASSERT_EQ(reference.run(), ACLNN_SUCCESS);
  for (size_t shift : {1, 8, 33}) {
    OpCase c(GetParam());
    c.materialize();
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
    std::vector<uint8_t> ws(c.workspace_size + shift);
    ASSERT_EQ(c.run(c.workspace_size ? ws.data() + shift : nullptr, c.workspace_size), ACLNN_SUCCESS)
        << aclGetRecentErrMsg();
    EXPECT_EQ(c.output_storage(), reference.output_storage()) << "shift " << shift;
  }
}

// The run phase runs at the thread count of its first phase, which sized the
// workspace: a count changed in between neither outgrows it nor moves a bit.
TEST_P(Lifecycle, RunsAtItsFirstPhasesThreadCount) {
  OpCase reference(GetParam());
  reference.materialize();
  ASSERT_EQ(reference.get_workspace(), ACLNN_SUCCESS);
  ASSERT_EQ(reference.run(), ACLNN_SUCCESS);
  const ScopedThreadCount threads;
  for (const auto& [first, run] : {std::pair{"1", "2"}, std::pair{"2", "1"}}) {
    OpCase c(GetParam());
    c.materialize();
    threads.set(first);
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    threads.set(run);
    EXPECT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg() << " (first phase at " << first << " thread(s), run at "
                                      << run << ")";
    EXPECT_EQ(c.output_storage(), reference.output_storage());
  }
}

// opImplMode 1 (HF32) is test_check_order.cpp's.
TEST_P(Lifecycle, V2WithOpImplMode0GivesTheNumbersOfV1) {
  const Op op = GetParam();
  const Op v1 = is_forward(op) ? Op::pre : Op::backward;
  OpCase a(v1), b(op);
  a.materialize();
  b.materialize();
  ASSERT_EQ(a.get_workspace(), ACLNN_SUCCESS);
  ASSERT_EQ(b.get_workspace(0), ACLNN_SUCCESS);
  ASSERT_EQ(a.run(), ACLNN_SUCCESS);
  ASSERT_EQ(b.run(), ACLNN_SUCCESS);
  EXPECT_EQ(a.output_storage(), b.output_storage());
}

INSTANTIATE_TEST_SUITE_P(Aclnn, Lifecycle, ::testing::Values(Op::pre, Op::pre_v2, Op::backward, Op::backward_v2),
                         [](const ::testing::TestParamInfo<Op>& info) { return std::string(op_name(info.param)); });

}  // namespace
}  // namespace aclnn_test
