// The aclnn face of the layer operators (SPEC §10-§12, docs/aclnn.md):
// aclnnMhcSinkhorn, aclnnMhcSinkhornBackward, aclnnMhcPost,
// aclnnMhcPostBackward, aclnnMhcPreSinkhorn, aclnnMhcPreSinkhornBackward.
// One table of calls, each described as named tensor slots (CANN's parameter
// names) and one expected outcome: rejected with a code and a message (every
// documented code, and pairs of faults where CANN's order decides which one
// wins), accepted with nothing to run (CANN's empty cases), or computed, when
// every output must equal the C++ API's on the same inputs bit for bit and
// every output the face must not write (caches not asked for, gaps between
// strided elements) must be untouched. Then the executor's lifecycle and the
// forward's caches read by the backward. This file holds the table (all_rows),
// the test of one row and those tests; the fixture and the rows every operator
// shares are in layer_case.{hpp,cpp}, each operator's own rows in
// layer_rows_*.cpp.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "layer_case.hpp"

namespace aclnn_layer_test {
namespace {

std::vector<Row> all_rows() {
  std::vector<Row> rows;
  for (Op op : kOps) {
    std::vector<Row> c = common_rows(op);
    rows.insert(rows.end(), c.begin(), c.end());
  }
  for (const auto& more : {sinkhorn_rows(), sinkhorn_backward_rows(), post_rows(), post_backward_rows(),
                           pre_sinkhorn_rows(), pre_sinkhorn_backward_rows()})
    rows.insert(rows.end(), more.begin(), more.end());
  return rows;
}

class LayerOperators : public ::testing::TestWithParam<Row> {};

TEST_P(LayerOperators, Call) {
  const Row& row = GetParam();
  LayerCase c(row.op, row.config);
  row.mutate(c);
  c.materialize();
  if (row.after) row.after(c);
  reset_recent_error();
  const aclnnStatus status = c.get_workspace(row.null_workspace_size, row.null_executor);
  const std::string message = aclGetRecentErrMsg();

  if (row.outcome == Outcome::rejected) {
    EXPECT_EQ(status, row.code) << message;
    EXPECT_NE(message.find(std::string(op_name(row.op)) + "GetWorkspaceSize: "), std::string::npos) << message;
    EXPECT_NE(message.find(row.message), std::string::npos) << "expected \"" << row.message << "\" in: " << message;
    EXPECT_EQ(c.executor, kExecutorSentinel);
    EXPECT_EQ(c.workspace_size, kWorkspaceSentinel);
    EXPECT_TRUE(c.outputs_untouched());
    return;
  }
  ASSERT_EQ(status, ACLNN_SUCCESS) << message;
  ASSERT_NE(c.executor, kExecutorSentinel);
  if (row.outcome == Outcome::nothing_run) {
    EXPECT_EQ(c.workspace_size, 0u);
    EXPECT_EQ(c.run(nullptr, 0), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_TRUE(c.outputs_untouched());
    return;
  }
  if (row.outcome == Outcome::runs) {
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    for (const Slot& s : c.slots())
      if (s.output && s.present) EXPECT_FALSE(c.untouched(s.name)) << s.name << " was not written";
    return;
  }
  std::map<std::string, std::vector<uint8_t>> expected;
  const mhc::Status reference = c.reference(&expected);
  ASSERT_TRUE(reference.ok()) << reference.message();
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  for (const Slot& s : c.slots()) {
    if (!s.output || !s.present) continue;
    const auto it = expected.find(s.name);
    if (it == expected.end()) {
      EXPECT_TRUE(c.untouched(s.name)) << s.name << " is not the face's to write";
      continue;
    }
    EXPECT_EQ(c.logical_bytes(s.name), it->second) << s.name << " differs from the C++ API's";
    EXPECT_TRUE(c.gaps_untouched(s.name)) << s.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Aclnn, LayerOperators, ::testing::ValuesIn(all_rows()),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.label; });

// ---------------------------------------------------------------- lifecycle

// An executor runs once and only as its own operator; the aclTensors may be
// destroyed before the run; a failed run check leaves the executor live.
TEST(AclnnLayerLifecycle, AnExecutorRunsOnceAsItsOwnOperator) {
  for (Op op : kOps) {
    SCOPED_TRACE(op_name(op));
    LayerCase c(op, Config{});
    c.materialize();
    std::map<std::string, std::vector<uint8_t>> expected;
    ASSERT_TRUE(c.reference(&expected).ok());
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    c.destroy_tensors();
    const Op other = op == Op::post ? Op::sinkhorn : Op::post;
    EXPECT_EQ(c.run_as(other, nullptr, 0), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find(std::string("executor belongs to ") + op_name(op)),
              std::string::npos)
        << aclGetRecentErrMsg();
    if (c.workspace_size > 0) {
      EXPECT_EQ(c.run(nullptr, c.workspace_size), ACLNN_ERR_PARAM_NULLPTR);
      std::vector<uint8_t> small(c.workspace_size - 1);
      EXPECT_EQ(c.run(small.data(), small.size()), ACLNN_ERR_PARAM_INVALID);
    }
    aclrtStream dead = nullptr;
    ASSERT_EQ(aclrtCreateStream(&dead), ACL_SUCCESS);
    ASSERT_EQ(aclrtDestroyStream(dead), ACL_SUCCESS);
    std::vector<uint8_t> workspace(c.workspace_size);
    EXPECT_EQ(c.run(workspace.data(), workspace.size(), dead), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find("stream is not live"), std::string::npos);
    aclOpExecutor* const live = c.executor;
    c.executor = nullptr;
    EXPECT_EQ(c.run(nullptr, 0), ACLNN_ERR_PARAM_NULLPTR);
    c.executor = live;
    EXPECT_TRUE(c.outputs_untouched());
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    for (const auto& [name, bytes] : expected) EXPECT_EQ(c.logical_bytes(name), bytes) << name;
    EXPECT_EQ(c.run(), ACLNN_ERR_PARAM_INVALID);
    EXPECT_NE(std::string(aclGetRecentErrMsg()).find("an executor runs once"), std::string::npos);
    EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_ERR_PARAM_INVALID);
    c.executor = kExecutorSentinel;
  }
}

// The run phase runs at the thread count of its first phase, which sized the
// workspace: a count changed in between neither outgrows it nor moves a bit.
TEST(AclnnLayerLifecycle, RunsAtItsFirstPhasesThreadCount) {
  const ScopedThreadCount threads;
  for (Op op : kOps)
    for (const auto& [first, run] : {std::pair{"1", "2"}, std::pair{"2", "1"}}) {
      SCOPED_TRACE(std::string(op_name(op)) + ": first phase at " + first + " thread(s), run at " + run);
      LayerCase c(op, Config{});
      c.materialize();
      std::map<std::string, std::vector<uint8_t>> expected;
      ASSERT_TRUE(c.reference(&expected).ok());
      threads.set(first);
      ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      threads.set(run);
      ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      for (const auto& [name, bytes] : expected) EXPECT_EQ(c.logical_bytes(name), bytes) << name;
    }
}

// The executors of CANN's empty cases run nothing, once, on any stream; one
// that is not run can be destroyed.
TEST(AclnnLayerLifecycle, EmptyCallsRunNothingOnce) {
  for (Op op : {Op::sinkhorn_backward, Op::post, Op::pre_sinkhorn, Op::pre_sinkhorn_backward}) {
    SCOPED_TRACE(op_name(op));
    aclrtStream stream = nullptr;
    ASSERT_EQ(aclrtCreateStream(&stream), ACL_SUCCESS);
    LayerCase c(op, Config{});
    if (op == Op::sinkhorn_backward) {
      c.slot("gradOutput").dims[0] = 0;
      c.slot("out").dims[0] = 0;
    } else {
      empty_tokens(c);
    }
    c.materialize();
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(c.workspace_size, 0u);
    EXPECT_EQ(c.run(nullptr, 0, stream), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(c.run(nullptr, 0, stream), ACLNN_ERR_PARAM_INVALID);
    c.executor = kExecutorSentinel;
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS);
    EXPECT_EQ(aclDestroyAclOpExecutor(c.executor), ACLNN_SUCCESS);
    c.executor = kExecutorSentinel;
    EXPECT_TRUE(c.outputs_untouched());
    EXPECT_EQ(aclrtDestroyStream(stream), ACL_SUCCESS);
  }
}

// The layer end to end through the face, as a CANN program chains it: the
// backward's caches are the forward's outputs, and the fused pair equals the
// unfused chain (MhcPre's face, then MhcSinkhorn's) bit for bit.
TEST(AclnnLayerChain, SinkhornBackwardReadsTheForwardsCaches) {
  Config config;
  config.lead = {2, 3};
  config.N = 6;
  LayerCase forward(Op::sinkhorn, config);
  forward.materialize();
  ASSERT_EQ(forward.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(forward.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();

  LayerCase backward(Op::sinkhorn_backward, config);
  backward.materialize();
  for (const char* name : {"normOut", "sumOut"}) {  // the forward's caches as the backward's inputs
    Slot& s = backward.slot(name);
    const std::vector<uint8_t> bytes = forward.logical_bytes(name);
    ASSERT_EQ(bytes.size(), s.storage.size());
    std::memcpy(s.storage.data(), bytes.data(), bytes.size());  // the aclTensor points at this storage
  }
  std::map<std::string, std::vector<uint8_t>> expected;
  ASSERT_TRUE(backward.reference(&expected).ok());
  ASSERT_EQ(backward.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_EQ(backward.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(backward.logical_bytes("out"), expected["out"]);
  // From z alone (the C++ API's recompute) gives the same bits as from the caches.
  std::vector<uint8_t> z = forward.logical_bytes("x"), g = backward.logical_bytes("gradOutput");
  std::vector<uint8_t> grad_z(z.size(), 0);
  const std::vector<int64_t> dims = forward.slot("x").dims;
  mhc::SinkhornBackwardInputs in;
  in.grad_h_res = view_of(g, ACL_FLOAT, dims);
  in.z = view_of(z, ACL_FLOAT, dims);
  in.eps = forward.eps;
  in.num_iters = forward.num_iters;
  ASSERT_TRUE(mhc::sinkhorn_backward(in, {view_of(grad_z, ACL_FLOAT, dims)}).ok());
  EXPECT_EQ(backward.logical_bytes("out"), grad_z);
}

}  // namespace
}  // namespace aclnn_layer_test
