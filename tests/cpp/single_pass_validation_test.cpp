// DeepSeek-V4.1's operators (SPEC §14): the rules of their arguments, each broken
// once: the message names the tensor and says what was expected, and nothing is
// written. The pre block's own rules (tested in validation_*_test.cpp) hold
// through the same checks; these are the single pass's and the collapse's.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "single_pass_util.hpp"

namespace mhc_test::single_pass {
namespace {

enum class Op { forward, backward, collapse_forward, collapse_backward };

struct Rule {
  std::string name;
  Op op;
  SCase c;
  std::function<void(Bag&)> mutate;
  std::string message;  // the message starts with it
};
void PrintTo(const Rule& r, std::ostream* os) { *os << r.name; }

mhc::Status run_op(Op op, Bag& b, const SCase& c) {
  const mhc::Options o;
  switch (op) {
    case Op::forward: return forward(b, c, o);
    case Op::backward: return backward(b, c, o);
    case Op::collapse_forward: return mhc::collapse_forward({b["x"].view(), b["pre_mix"].view()}, {b["h_in"].view()}, o);
    default:
      return mhc::collapse_backward({b["grad_h_in"].view(), b["x"].view(), b["pre_mix"].view()},
                                    {b["grad_x"].view(), b["grad_pre_mix"].view()}, o);
  }
}

const SCase kBase = {.B = 2, .S = 3, .bsnd = true, .N = 4, .D = 16, .dtype = DType::bf16, .I = 3, .gamma = true,
                     .seed = 400};

std::vector<Rule> rules() {
  SCase first = kBase;
  first.first_site = true;
  auto reshape = [](const char* name, DType dtype, Shape shape) {
    return [=](Bag& b) { b[name] = make_tensor(dtype, shape, kOutputFill); };
  };
  return {
      {"PreMixShape", Op::forward, kBase, reshape("pre_mix", DType::fp32, {2, 3, 5}), "pre_mix: expected"},
      {"PreMixDtype", Op::forward, kBase, reshape("pre_mix", DType::bf16, {2, 3, 4}), "pre_mix: expected"},
      {"TwoEntryAlpha", Op::forward, kBase,
       [](Bag& b) {
         b["alpha"] = make_tensor(DType::fp32, {2});
         b["phi"] = make_tensor(DType::fp32, {8, 64});
         b["bias"] = make_tensor(DType::fp32, {8});
       },
       "alpha: expected [3] (the single pass has the residual branch)"},
      {"PermutationRows", Op::forward, kBase,
       [](Bag& b) {
         b["phi"] = make_tensor(DType::fp32, {32, 64});
         b["bias"] = make_tensor(DType::fp32, {32});
       },
       "phi: expected [F,N*D] with F = 2N+N*N = 24 (the single pass's Sinkhorn"},
      {"GammaShape", Op::forward, kBase, reshape("gamma", DType::fp32, {4, 15}), "gamma: expected"},
      {"SinkhornEps", Op::forward, [] { SCase c = kBase; c.sinkhorn_eps = -1; return c; }(), [](Bag&) {},
       "sinkhorn_eps:"},
      {"NumIters", Op::forward, [] { SCase c = kBase; c.I = 0; return c; }(), [](Bag&) {}, "num_iters:"},
      {"GradHPreShape", Op::backward, kBase, reshape("grad_h_pre", DType::fp32, {2, 3, 3}), "grad_h_pre: expected"},
      {"GradPreMixShape", Op::backward, kBase, reshape("grad_pre_mix", DType::fp32, {6, 4}), "grad_pre_mix: expected"},
      {"GradPreMixWithoutPreMix", Op::backward, first,
       [](Bag& b) { b["grad_pre_mix"] = make_tensor(DType::fp32, {2, 3, 4}, kOutputFill); },
       "grad_pre_mix: given without pre_mix"},
      {"BackwardPreMixShape", Op::backward, kBase, reshape("pre_mix", DType::fp32, {2, 4}), "pre_mix: expected"},
      {"GradHResShape", Op::backward, kBase, reshape("grad_h_res", DType::fp32, {2, 3, 4, 3}), "grad_h_res: expected"},
      {"CollapseXDtype", Op::collapse_forward, kBase, reshape("x", DType::bf16, {6, 64}), "x: expected"},
      {"CollapsePreMixShape", Op::collapse_forward, kBase, reshape("pre_mix", DType::fp32, {2, 3, 2}),
       "pre_mix: expected"},
      {"CollapseHDtype", Op::collapse_forward, kBase, reshape("h_in", DType::fp16, {2, 3, 16}), "h: expected"},
      {"CollapseGradPreMixDtype", Op::collapse_backward, kBase, reshape("grad_pre_mix", DType::bf16, {2, 3, 4}),
       "grad_pre_mix: expected"},
  };
}

class SinglePassRule : public ::testing::TestWithParam<Rule> {};
TEST_P(SinglePassRule, RejectedWithItsMessageAndNothingWritten) {
  const Rule& r = GetParam();
  Bag b = make_bag(r.c);
  r.mutate(b);
  const auto before = b.snapshot();
  const mhc::Status s = run_op(r.op, b, r.c);
  ASSERT_FALSE(s.ok()) << "accepted";
  EXPECT_EQ(s.message().rfind(r.message, 0), 0u) << s.message();
  EXPECT_TRUE(b.snapshot() == before) << "a rejected call wrote memory";
}
INSTANTIATE_TEST_SUITE_P(Rules, SinglePassRule, ::testing::ValuesIn(rules()),
                         [](const auto& info) { return info.param.name; });

// An output that shares memory with an input is named, and nothing is written.
TEST(SinglePassValidation, OutputsSharingAnInputsMemoryAreRejected) {
  Bag b = make_bag(kBase);
  const auto before = b.snapshot();
  const mhc::Options o;
  mhc::Status s = mhc::pre_single_pass_forward(
      {b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), b["gamma"].view(), b["h_pre"].view(),
       1e-6, 3},
      {b["h_in"].view(), b["h_pre"].view(), b["h_post"].view(), b["h_res"].view(), b["inv_rms"].view(),
       b["h_mix"].view()},
      o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pre_mix"), std::string::npos) << s.message();
  s = mhc::collapse_backward({b["grad_h_in"].view(), b["x"].view(), b["pre_mix"].view()},
                             {b["x"].view(), b["grad_pre_mix"].view()}, o);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("grad_x:", 0), 0u) << s.message();
  s = mhc::pre_single_pass_backward(
      {b["x"].view(), b["phi"].view(), b["alpha"].view(), b["bias"].view(), b["gamma"].view(), b["pre_mix"].view(),
       b["grad_h_in"].view(), b["grad_h_pre"].view(), b["grad_h_post"].view(), b["grad_h_res"].view(),
       b["inv_rms"].view(), b["h_mix"].view(), b["h_pre"].view(), b["h_post"].view(), std::nullopt, 1e-6, 3},
      {b["grad_x"].view(), b["grad_h_pre"].view(), b["grad_phi"].view(), b["grad_alpha"].view(),
       b["grad_bias"].view(), b["grad_gamma"].view()},
      o);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("grad_pre_mix:", 0), 0u) << s.message();
  EXPECT_TRUE(b.snapshot() == before);
}

TEST(SinglePassCApi, NullRequiredPointersAreNamed) {
  Bag b = make_bag(kBase);
  const auto before = b.snapshot();
  const mhc_tensor x = to_c(b["x"].view()), phi = to_c(b["phi"].view()), alpha = to_c(b["alpha"].view()),
                   bias = to_c(b["bias"].view()), h_in = to_c(b["h_in"].view()), h_pre = to_c(b["h_pre"].view()),
                   h_post = to_c(b["h_post"].view()), h_res = to_c(b["h_res"].view()),
                   inv_rms = to_c(b["inv_rms"].view()), h_mix = to_c(b["h_mix"].view());
  EXPECT_EQ(mhc_pre_single_pass_forward(&x, &phi, &alpha, &bias, nullptr, nullptr, 1e-6, 3, &h_in, nullptr, &h_post,
                                        &h_res, &inv_rms, &h_mix, nullptr),
            MHC_ERR_NULLPTR);
  EXPECT_EQ(std::string(mhc_last_error()), "h_pre: required, got NULL");
  EXPECT_EQ(mhc_collapse_forward(&x, nullptr, &h_in, nullptr), MHC_ERR_NULLPTR);
  EXPECT_EQ(std::string(mhc_last_error()), "pre_mix: required, got NULL");
  EXPECT_TRUE(b.snapshot() == before);
  (void)h_pre;
}

TEST(SinglePassEdges, EmptyBatchWritesZeroSumsAndNothingPerToken) {
  for (bool first : {false, true}) {
    SCase c = kBase;
    c.S = 0, c.first_site = first;
    Bag b = make_bag(c);
    for (mhc::Isa isa : available_families()) run_both(b, c, options_for(c, isa));
    for (const char* name : {"grad_phi", "grad_alpha", "grad_bias", "grad_gamma"})
      for (int64_t i = 0; i < b[name].numel(); ++i) ASSERT_EQ(b[name].get(i), 0.0) << name;
  }
}

}  // namespace
}  // namespace mhc_test::single_pass
