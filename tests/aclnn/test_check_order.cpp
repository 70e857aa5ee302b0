// The order of the first phase's checks (SPEC §7): pairs of faults where the
// order decides which code and message win; what the face does not check (eps
// values, hRes / gradHRes with a two-entry alpha); opImplMode 1 reaching the
// core (HF32).
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "op_case.hpp"

namespace aclnn_test {
namespace {

struct Pair {
  std::string label;
  Op op;
  std::function<void(OpCase&)> faults;
  int64_t op_impl_mode;
  aclnnStatus expected;
  std::string message;  // the winning fault's message contains this
  bool null_workspace_size = false;
  bool null_executor = false;
};

void PrintTo(const Pair& p, std::ostream* os) { *os << p.label; }

void add_rank(Slot& s) { s.dims.push_back(1); }
void drop(Slot& s) { s.present = false; }
void empty(Slot& s) { s.dims[0] = 0; }

std::vector<Pair> forward_pairs() {
  const Op v2 = Op::pre_v2;
  return {
      {"null_x_before_opImplMode", v2, [](OpCase& c) { drop(c.slot("x")); }, 7, ACLNN_ERR_PARAM_NULLPTR, "x is NULL"},
      {"workspaceSize_before_null_x", v2, [](OpCase& c) { drop(c.slot("x")); }, 0, ACLNN_ERR_PARAM_NULLPTR,
       "workspaceSize is NULL", true},
      {"executor_before_empty_x", v2, [](OpCase& c) { empty(c.slot("x")); }, 0, ACLNN_ERR_PARAM_NULLPTR,
       "executor is NULL", false, true},
      {"null_hIn_before_empty_x", v2, [](OpCase& c) { drop(c.slot("hIn")); empty(c.slot("x")); }, 0,
       ACLNN_ERR_PARAM_NULLPTR, "hIn is NULL"},
      {"empty_x_before_rank_phi", v2, [](OpCase& c) { empty(c.slot("x")); add_rank(c.slot("phi")); }, 0,
       ACLNN_ERR_PARAM_INVALID, "x: empty tensor [0,4,8]"},
      {"empty_bias_before_rank_x", v2, [](OpCase& c) { empty(c.slot("bias")); add_rank(c.slot("x")); }, 0,
       ACLNN_ERR_PARAM_INVALID, "bias: empty tensor"},
      {"rank_phi_before_alpha_length", v2, [](OpCase& c) { add_rank(c.slot("phi")); c.slot("alpha").dims = {4}; }, 0,
       ACLNN_ERR_PARAM_INVALID, "phi: expected rank 2, got rank 3"},
      {"alpha_length_before_null_hRes", v2, [](OpCase& c) { c.slot("alpha").dims = {4}; drop(c.slot("hRes")); }, 0,
       ACLNN_ERR_PARAM_INVALID, "alpha: expected [2] or [3], got [4]"},
      // The head (a one-entry alpha) is not CANN's: 161002, whatever hRes is.
      {"one_entry_alpha_is_161002", v2,
       [](OpCase& c) { c.slot("alpha").dims = {1}; c.slot("phi").dims[0] = 4; c.slot("bias").dims = {4}; drop(c.slot("hRes")); },
       0, ACLNN_ERR_PARAM_INVALID, "alpha: expected [2] or [3], got [1]"},
      {"null_hRes_before_rank_hIn", v2, [](OpCase& c) { drop(c.slot("hRes")); add_rank(c.slot("hIn")); }, 0,
       ACLNN_ERR_PARAM_NULLPTR, "hRes is NULL (required: alpha has 3 entries)"},
      {"rank_hIn_before_cache_group", v2, [](OpCase& c) { add_rank(c.slot("hIn")); drop(c.slot("invRms")); }, 0,
       ACLNN_ERR_PARAM_INVALID, "hIn: expected rank 2"},
      {"cache_group_is_161002_and_before_shapes", v2,
       [](OpCase& c) { drop(c.slot("hMix")); c.slot("phi").dims[1] += 1; }, 0, ACLNN_ERR_PARAM_INVALID,
       "invRms given, hMix NULL, hPre given"},
      {"cache_group_before_dtypes", v2, [](OpCase& c) { drop(c.slot("hPre")); c.slot("x").dtype = ACL_INT32; }, 0,
       ACLNN_ERR_PARAM_INVALID, "the caches invRms, hMix, hPre come all three or none"},
      {"shape_phi_before_dtype_x", v2, [](OpCase& c) { c.slot("phi").dims[0] += 1; c.slot("x").dtype = ACL_INT32; },
       0, ACLNN_ERR_PARAM_INVALID, "phi: expected [F,K]=[24,32]"},
      {"shape_hIn_before_dtype_phi", v2,
       [](OpCase& c) { c.slot("hIn").dims[1] += 1; c.slot("phi").dtype = ACL_BF16; }, 0, ACLNN_ERR_PARAM_INVALID,
       "hIn: expected [T,D]=[5,8], got [5,9]"},
      {"dtype_phi_before_format_x", v2,
       [](OpCase& c) { c.slot("phi").dtype = ACL_BF16; c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; }, 0,
       ACLNN_ERR_PARAM_INVALID, "phi: expected ACL_FLOAT, got ACL_BF16"},
      {"dtype_before_opImplMode", v2, [](OpCase& c) { c.slot("hPost").dtype = ACL_BF16; }, 2, ACLNN_ERR_PARAM_INVALID,
       "hPost: expected ACL_FLOAT, got ACL_BF16"},
      {"x_fp32_before_opImplMode", v2,
       [](OpCase& c) { c.slot("x").dtype = ACL_FLOAT; c.slot("hIn").dtype = ACL_FLOAT; }, 5, ACLNN_ERR_PARAM_INVALID,
       "x: ACL_FLOAT is not supported"},
      {"format_before_opImplMode", v2, [](OpCase& c) { c.slot("hRes").format = ACL_FORMAT_FRACTAL_NZ; }, 2,
       ACLNN_ERR_PARAM_INVALID, "hRes: private format ACL_FORMAT_FRACTAL_NZ"},
      // What CANN does not check comes after opImplMode.
      {"opImplMode_before_null_data", v2, [](OpCase& c) { c.slot("x").null_data = true; }, 2,
       ACLNN_ERR_PARAM_INVALID, "opImplMode must be 0 (fp32) or 1 (HF32), got 2"},
      {"opImplMode_before_storage", v2, [](OpCase& c) { c.slot("alpha").declared_storage_delta = -1; }, -1,
       ACLNN_ERR_PARAM_INVALID, "got -1"},
  };
}

std::vector<Pair> backward_pairs() {
  const Op v2 = Op::backward_v2;
  return {
      {"null_gradX_before_opImplMode", v2, [](OpCase& c) { drop(c.slot("gradX")); }, 9, ACLNN_ERR_PARAM_NULLPTR,
       "gradX is NULL"},
      {"null_gradHRes_before_opImplMode", v2, [](OpCase& c) { drop(c.slot("gradHRes")); }, 9,
       ACLNN_ERR_PARAM_NULLPTR, "gradHRes is NULL (required: alpha has 3 entries)"},
      {"one_entry_alpha_is_161002", v2,
       [](OpCase& c) { c.slot("alpha").dims = {1}; c.slot("phi").dims[0] = 4; c.slot("gradAlpha").dims = {1};
                       c.slot("gradBias").dims = {4}; drop(c.slot("gradHRes")); },
       0, ACLNN_ERR_PARAM_INVALID, "phi: expected"},
      {"null_gradGamma_before_empty_x", v2, [](OpCase& c) { drop(c.slot("gradGamma")); empty(c.slot("x")); }, 0,
       ACLNN_ERR_PARAM_NULLPTR, "gradGamma is NULL (required: gammaOptional is given)"},
      {"empty_hMix_before_rank_x", v2, [](OpCase& c) { empty(c.slot("hMix")); add_rank(c.slot("x")); }, 0,
       ACLNN_ERR_PARAM_INVALID, "hMix: empty tensor"},
      {"rank_gradPhi_before_shape_phi", v2,
       [](OpCase& c) { add_rank(c.slot("gradPhi")); c.slot("phi").dims[0] += 1; }, 0, ACLNN_ERR_PARAM_INVALID,
       "gradPhi: expected rank 2"},
      {"shape_alpha_before_dtype_x", v2, [](OpCase& c) { c.slot("alpha").dims = {2}; c.slot("x").dtype = ACL_INT8; },
       0, ACLNN_ERR_PARAM_INVALID, "alpha: expected [3] (phi has F=2N+R rows), got [2]"},
      {"shape_gradAlpha_before_dtype_x", v2,
       [](OpCase& c) { c.slot("gradAlpha").dims = {4}; c.slot("x").dtype = ACL_INT8; }, 0, ACLNN_ERR_PARAM_INVALID,
       "gradAlpha: expected [3]"},
      {"dtype_gradX_before_format_x", v2,
       [](OpCase& c) { c.slot("gradX").dtype = ACL_FLOAT16; c.slot("x").format = ACL_FORMAT_NC1HWC0; }, 0,
       ACLNN_ERR_PARAM_INVALID, "gradX: expected ACL_BF16 (x's dtype), got ACL_FLOAT16"},
      {"format_hPost_before_opImplMode", v2, [](OpCase& c) { c.slot("hPost").format = ACL_FORMAT_FRACTAL_Z; }, 2,
       ACLNN_ERR_PARAM_INVALID, "hPost: private format ACL_FORMAT_FRACTAL_Z"},
      // Output formats, like the rest CANN does not check, come after opImplMode.
      {"opImplMode_before_output_format", v2, [](OpCase& c) { c.slot("gradX").format = ACL_FORMAT_FRACTAL_NZ; }, 2,
       ACLNN_ERR_PARAM_INVALID, "opImplMode must be 0 (fp32) or 1 (HF32), got 2"},
      {"opImplMode_before_null_data", v2, [](OpCase& c) { c.slot("gradHIn").null_data = true; }, 3,
       ACLNN_ERR_PARAM_INVALID, "opImplMode must be 0 (fp32) or 1 (HF32), got 3"},
  };
}

std::vector<Pair> all_pairs() {
  std::vector<Pair> pairs = forward_pairs(), b = backward_pairs();
  pairs.insert(pairs.end(), b.begin(), b.end());
  // Without opImplMode, V1 gives the same answers.
  for (size_t i = 0, n = pairs.size(); i < n; ++i)
    if (pairs[i].op_impl_mode == 0) {
      Pair v1 = pairs[i];
      v1.op = is_forward(v1.op) ? Op::pre : Op::backward;
      pairs.push_back(v1);
    }
  for (Pair& p : pairs) p.label = std::string(op_name(p.op)) + "_" + p.label;
  return pairs;
}

class CheckOrder : public ::testing::TestWithParam<Pair> {};

TEST_P(CheckOrder, TheEarlierCheckWins) {
  const Pair& p = GetParam();
  OpCase c(p.op);
  p.faults(c);
  c.materialize();
  reset_recent_error();
  EXPECT_EQ(c.get_workspace(p.op_impl_mode, p.null_workspace_size, p.null_executor), p.expected)
      << aclGetRecentErrMsg();
  const std::string message = aclGetRecentErrMsg();
  EXPECT_NE(message.find(std::string(op_name(p.op)) + "GetWorkspaceSize: "), std::string::npos) << message;
  EXPECT_NE(message.find(p.message), std::string::npos) << message;
  EXPECT_EQ(c.executor, kExecutorSentinel);
  EXPECT_TRUE(c.outputs_untouched());
}

INSTANTIATE_TEST_SUITE_P(Aclnn, CheckOrder, ::testing::ValuesIn(all_pairs()),
                         [](const ::testing::TestParamInfo<Pair>& info) { return info.param.label; });

// CANN checks no eps value: NaN, Inf and negative values are accepted and
// propagate as IEEE arithmetic does.
TEST(AclnnEps, AnyValueIsAccepted) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (Op op : {Op::pre, Op::pre_v2, Op::backward, Op::backward_v2})
    for (double eps : {nan, inf, -inf, -1.0, 0.0}) {
      OpCase c(op);
      c.norm_eps = eps;
      c.hc_eps = eps;
      c.materialize();
      ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << op_name(op) << " eps " << eps << ": " << aclGetRecentErrMsg();
      ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      if (is_forward(op) && std::isnan(eps)) {
        float inv_rms;
        std::memcpy(&inv_rms, c.logical_bytes("invRms").data(), 4);
        EXPECT_TRUE(std::isnan(inv_rms)) << inv_rms;
      }
    }
}

// Two-entry alpha: an hRes given is accepted whatever it is, and left untouched.
TEST(AclnnTwoEntryAlpha, AnHResGivenIsLeftUntouched) {
  for (Op op : {Op::pre, Op::pre_v2})
    for (int variant = 0; variant < 3; ++variant) {
      Config config;
      config.two_entry_alpha = true;
      OpCase c(op, config);
      Slot& h_res = c.slot("hRes");
      h_res.present = true;
      if (variant == 1) h_res.dims = {7};  // any shape
      if (variant == 2) {  // any dtype and format
        h_res.dtype = ACL_INT64;
        h_res.format = ACL_FORMAT_FRACTAL_NZ;
      }
      c.materialize();
      ASSERT_EQ(c.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      ASSERT_EQ(c.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      for (uint8_t b : c.slot("hRes").storage) ASSERT_EQ(b, kPattern) << op_name(op) << " variant " << variant;
      EXPECT_NE(c.logical_bytes("hIn"), std::vector<uint8_t>(c.logical_bytes("hIn").size(), kPattern));
    }
}

std::vector<std::vector<uint8_t>> outputs_of(OpCase& c) {
  std::vector<std::vector<uint8_t>> out;
  for (const Slot& s : c.slots())
    if (s.output && s.present) out.push_back(c.logical_bytes(s.name));
  return out;
}

// Two-entry alpha: a gradHRes given is accepted and not read (NaN in it
// changes nothing).
TEST(AclnnTwoEntryAlpha, AGradHResGivenIsNotRead) {
  for (Op op : {Op::backward, Op::backward_v2}) {
    Config config;
    config.two_entry_alpha = true;
    OpCase without(op, config);
    without.materialize();
    ASSERT_EQ(without.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    ASSERT_EQ(without.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    for (bool odd_shape : {false, true}) {
      OpCase with(op, config);
      with.slot("gradHRes").present = true;
      if (odd_shape) with.slot("gradHRes").dims = {3, 3};
      with.materialize();
      std::vector<uint8_t>& storage = with.slot("gradHRes").storage;
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (size_t i = 0; i + 4 <= storage.size(); i += 4) std::memcpy(storage.data() + i, &nan, 4);
      ASSERT_EQ(with.get_workspace(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      ASSERT_EQ(with.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      EXPECT_EQ(outputs_of(with), outputs_of(without)) << op_name(op);
    }
  }
}

// max |a - b| / max |b| over the fp32 elements of two byte vectors.
double relative_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i + 4 <= a.size(); i += 4) {
    float x, y;
    std::memcpy(&x, a.data() + i, 4);
    std::memcpy(&y, b.data() + i, 4);
    diff = std::max(diff, std::fabs(double(x) - double(y)));
    scale = std::max(scale, std::fabs(double(y)));
  }
  return diff / scale;
}

// opImplMode 1 reaches the core: the matrix products take HF32 operands (10
// stored bits, SPEC §7), so the results move by more than fp32 rounding and
// by less than HF32's 2^-9 relative.
TEST(AclnnOpImplMode, Hf32ReachesTheCore) {
  for (Op op : {Op::pre_v2, Op::backward_v2}) {
    Config config;
    config.T = 8;
    config.D = 64;
    OpCase fp32(op, config), hf32(op, config);
    fp32.materialize();
    hf32.materialize();
    ASSERT_EQ(fp32.get_workspace(0), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    ASSERT_EQ(hf32.get_workspace(1), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    ASSERT_EQ(fp32.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    ASSERT_EQ(hf32.run(), ACLNN_SUCCESS) << aclGetRecentErrMsg();
    const char* product = is_forward(op) ? "hMix" : "gradPhi";
    const double rel = relative_difference(hf32.logical_bytes(product), fp32.logical_bytes(product));
    RecordProperty(std::string(op_name(op)) + "_relative_difference", std::to_string(rel));
    EXPECT_GT(rel, std::ldexp(1.0, -16)) << op_name(op) << " " << product << ": HF32 did not reach the core";
    EXPECT_LT(rel, std::ldexp(1.0, -9)) << op_name(op) << " " << product;
  }
}

}  // namespace
}  // namespace aclnn_test
