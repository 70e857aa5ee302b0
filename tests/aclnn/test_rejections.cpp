// Table-driven rejection rules of the first phase (SPEC §7), for aclnnMhcPre,
// aclnnMhcPreBackward and their V2 forms: one row per rule and tensor. Each
// row asserts the exact code, a message of this operator, results pointers
// and outputs untouched. Which of two faults wins: test_check_order.cpp.
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "op_case.hpp"

namespace aclnn_test {
namespace {

struct Row {
  std::string label;
  Op op;
  std::function<void(OpCase&)> mutate;  // on the slots, before materialize
  aclnnStatus expected;
  int64_t op_impl_mode = 0;
  bool null_workspace_size = false;
  bool null_executor = false;
  Config config = {};
};

// gtest prints a parameter by this, instead of its bytes.
void PrintTo(const Row& row, std::ostream* os) { *os << row.label; }

std::string op_label(Op op) { return op_name(op); }

const char* const kPrivateFormats[] = {"NC1HWC0", "FRACTAL_Z", "NC1HWC0_C04", "FRACTAL_NZ", "NDC1HWC0", "FRACTAL_Z_3D"};
const aclFormat kPrivateFormatValues[] = {ACL_FORMAT_NC1HWC0,    ACL_FORMAT_FRACTAL_Z, ACL_FORMAT_NC1HWC0_C04,
                                          ACL_FORMAT_FRACTAL_NZ, ACL_FORMAT_NDC1HWC0,  ACL_FRACTAL_Z_3D};

std::vector<std::string> slot_names(Op op) {
  OpCase c(op);
  std::vector<std::string> names;
  for (const Slot& s : c.slots()) names.push_back(s.name);
  return names;
}

// Required in CANN's signature. hRes / gradHRes are required with a 3-entry
// alpha; gradGamma is required because gamma is given.
std::vector<std::string> required_names(Op op) {
  if (is_forward(op)) return {"x", "phi", "alpha", "bias", "hIn", "hPost", "hRes"};
  return {"x", "phi", "alpha", "gradHIn", "gradHPost", "gradHRes", "invRms", "hMix", "hPre", "hPost",
          "gradX", "gradPhi", "gradAlpha", "gradBias", "gradGamma"};
}

std::vector<Row> rows_for(Op op) {
  const std::string o = op_label(op);
  std::vector<Row> rows;
  rows.push_back({o + "_accepts_the_baseline", op, [](OpCase&) {}, ACLNN_SUCCESS});
  for (const std::string& n : required_names(op))
    rows.push_back({o + "_null_" + n, op, [n](OpCase& c) { c.slot(n).present = false; }, ACLNN_ERR_PARAM_NULLPTR});
  rows.push_back({o + "_null_workspaceSize", op, [](OpCase&) {}, ACLNN_ERR_PARAM_NULLPTR, 0, true, false});
  rows.push_back({o + "_null_executor", op, [](OpCase&) {}, ACLNN_ERR_PARAM_NULLPTR, 0, false, true});
  for (const std::string& n : slot_names(op)) {
    rows.push_back({o + "_empty_" + n, op, [n](OpCase& c) { c.slot(n).dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID});
    rows.push_back({o + "_rank_" + n, op,
                    [n](OpCase& c) {
                      std::vector<int64_t>& dims = c.slot(n).dims;
                      if (n == "x") dims = {dims[0], dims[1] * dims[2]};  // [T,N*D]: [..,1] would read as [B,S,N,D]
                      else dims.push_back(1);
                    },
                    ACLNN_ERR_PARAM_INVALID});
    rows.push_back({o + "_shape_" + n, op, [n](OpCase& c) { c.slot(n).dims.back() += 1; }, ACLNN_ERR_PARAM_INVALID});
    rows.push_back({o + "_dtype_" + n, op,
                    [n](OpCase& c) {
                      Slot& s = c.slot(n);
                      s.dtype = s.dtype == ACL_FLOAT ? ACL_BF16 : ACL_FLOAT16;  // x-like slots: not x's dtype
                    },
                    ACLNN_ERR_PARAM_INVALID});
    rows.push_back({o + "_null_data_" + n, op, [n](OpCase& c) { c.slot(n).null_data = true; }, ACLNN_ERR_PARAM_NULLPTR});
  }
  // x: fp32 is rejected as CANN rejects it; a dtype mhc has no counterpart for.
  rows.push_back({o + "_x_fp32", op,
                  [](OpCase& c) {
                    for (Slot& s : c.slots())
                      if (s.dtype == ACL_BF16) s.dtype = ACL_FLOAT;  // consistently fp32: only the CANN rule rejects
                  },
                  ACLNN_ERR_PARAM_INVALID});
  rows.push_back({o + "_x_int32", op, [](OpCase& c) { c.slot("x").dtype = ACL_INT32; }, ACLNN_ERR_PARAM_INVALID});
  rows.push_back({o + "_phi_double", op, [](OpCase& c) { c.slot("phi").dtype = ACL_DOUBLE; }, ACLNN_ERR_PARAM_INVALID});
  for (size_t i = 0; i < std::size(kPrivateFormats); ++i) {
    const aclFormat f = kPrivateFormatValues[i];
    rows.push_back({o + "_x_format_" + kPrivateFormats[i], op, [f](OpCase& c) { c.slot("x").format = f; },
                    ACLNN_ERR_PARAM_INVALID});
  }
  rows.push_back({o + "_out_format_FRACTAL_NZ", op,
                  [op](OpCase& c) { c.slot(is_forward(op) ? "hIn" : "gradX").format = ACL_FORMAT_FRACTAL_NZ; },
                  ACLNN_ERR_PARAM_INVALID});
  rows.push_back({o + "_undefined_format", op, [](OpCase& c) { c.slot("phi").format = ACL_FORMAT_UNDEFINED; },
                  ACLNN_ERR_PARAM_INVALID});
  rows.push_back({o + "_view_outside_storage", op, [](OpCase& c) { c.slot("alpha").declared_storage_delta = -1; },
                  ACLNN_ERR_PARAM_INVALID});
  if (is_forward(op)) {  // the caches come all three or none
    rows.push_back({o + "_caches_incomplete", op, [](OpCase& c) { c.slot("hMix").present = false; },
                    ACLNN_ERR_PARAM_INVALID});
  }
  if (is_v2(op)) {
    rows.push_back({o + "_opImplMode_1_accepted", op, [](OpCase&) {}, ACLNN_SUCCESS, 1});
    rows.push_back({o + "_opImplMode_2", op, [](OpCase&) {}, ACLNN_ERR_PARAM_INVALID, 2});
    rows.push_back({o + "_opImplMode_minus_1", op, [](OpCase&) {}, ACLNN_ERR_PARAM_INVALID, -1});
    // opImplMode comes last: a NULL tensor wins.
    rows.push_back({o + "_null_before_opImplMode", op, [](OpCase& c) { c.slot("x").present = false; },
                    ACLNN_ERR_PARAM_NULLPTR, 7});
  }
  return rows;
}

std::vector<Row> all_rows() {
  std::vector<Row> rows;
  for (Op op : {Op::pre, Op::pre_v2, Op::backward, Op::backward_v2}) {
    std::vector<Row> r = rows_for(op);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

class Rejection : public ::testing::TestWithParam<Row> {};

TEST_P(Rejection, GivesTheCodeAMessageAndWritesNothing) {
  const Row& row = GetParam();
  OpCase c(row.op, row.config);
  row.mutate(c);
  c.materialize();
  reset_recent_error();
  const aclnnStatus status = c.get_workspace(row.op_impl_mode, row.null_workspace_size, row.null_executor);
  EXPECT_EQ(status, row.expected) << aclGetRecentErrMsg();
  if (row.expected == ACLNN_SUCCESS) {
    EXPECT_NE(c.executor, kExecutorSentinel);
    EXPECT_NE(c.executor, nullptr);
  } else {
    const std::string message = aclGetRecentErrMsg();
    RecordProperty("message", message);  // in --gtest_output=xml, to review what each rule says
    EXPECT_NE(message.find(std::string(op_name(row.op)) + "GetWorkspaceSize"), std::string::npos) << message;
    EXPECT_EQ(c.workspace_size, kWorkspaceSentinel);
    EXPECT_EQ(c.executor, kExecutorSentinel);
  }
  EXPECT_TRUE(c.outputs_untouched());
}

INSTANTIATE_TEST_SUITE_P(Aclnn, Rejection, ::testing::ValuesIn(all_rows()),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.label; });

// gradGamma is required exactly when gamma is given; without gamma it is
// ignored: accepted and never written.
TEST(AclnnBackward, GradGammaWithoutGammaIsIgnored) {
  for (Op op : {Op::backward, Op::backward_v2}) {
    Config config;
    config.gamma = false;
    OpCase c(op, config);
    c.slot("gradGamma").present = true;
    c.materialize();
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    for (uint8_t b : c.slot("gradGamma").storage) ASSERT_EQ(b, kPattern);
  }
}

TEST(AclnnBackward, GradGammaNullWithoutGammaIsAccepted) {
  Config config;
  config.gamma = false;
  OpCase c(Op::backward, config);
  c.materialize();
  EXPECT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
}

// Two-entry alpha (F = 2N, no residual branch): hRes / gradHRes are NULL.
TEST(AclnnTwoEntryAlpha, RunsWithoutResidualTensors) {
  for (Op op : {Op::pre, Op::backward}) {
    Config config;
    config.two_entry_alpha = true;
    OpCase c(op, config);
    c.materialize();
    ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    EXPECT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  }
}

TEST(AclnnForward, AcceptsFp16AndNoOptionalTensors) {
  Config config;
  config.x_dtype = ACL_FLOAT16;
  config.gamma = false;
  config.optional_extras = false;
  OpCase c(Op::pre, config);
  c.materialize();
  ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  EXPECT_FALSE(c.outputs_untouched());
}

TEST(AclnnForward, DestroyedTensorIsRejected) {
  OpCase c(Op::pre);
  c.materialize();
  aclTensor* x = c.slot("x").tensor;
  ASSERT_EQ(aclDestroyTensor(x), ACLNN_SUCCESS);
  EXPECT_EQ(aclDestroyTensor(x), ACLNN_ERR_PARAM_INVALID);  // destroying twice is an error, not a crash
  EXPECT_EQ(c.get_workspace(), ACLNN_ERR_PARAM_INVALID);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("x"), std::string::npos);
  c.slot("x").tensor = nullptr;
}

}  // namespace
}  // namespace aclnn_test
