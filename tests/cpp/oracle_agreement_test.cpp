// MhcPre and MhcPreBackward through every face (C++, C, aclnn) on every family
// this build and CPU run, against the float64 reference on the same inputs, by
// the operator's test drivers (driver/pre.hpp, where the bounds are stated); and
// which family a default call runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

#include "driver/pre.hpp"
#include "driver_check.hpp"
#include "suite_cases.hpp"

namespace mhc_test {
namespace {

// The worst error / bound of each output over the cases, printed at exit.
std::map<std::string, std::pair<double, std::string>>& worst_table() {
  static std::map<std::string, std::pair<double, std::string>> table;
  return table;
}
std::map<std::string, int>& runs_by_face() {
  static std::map<std::string, int> runs;
  return runs;
}
void note(const std::string& kind, const driver::Report& r, const Config& c) {
  for (const std::string& run : r.runs) ++runs_by_face()[run.substr(run.find(" through ") + 9)];
  for (const auto& [name, worst] : r.worst) {
    auto& w = worst_table()[kind + " " + name];
    if (worst > w.first || w.second.empty()) w = {worst, c.name()};
  }
}
class WorstErrorReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("\nLargest error / bound vs float64 over every face and family (MHC_ISA=%s, default kernels: %s):\n",
                std::getenv("MHC_ISA") ? std::getenv("MHC_ISA") : "(unset)", mhc::isa());
    for (const auto& [what, w] : worst_table()) std::printf("  %-22s %.3e  (%s)\n", what.c_str(), w.first, w.second.c_str());
    std::printf("  runs:");
    for (const auto& [face, count] : runs_by_face()) std::printf(" %s %d", face.c_str(), count);
    std::printf("\n");
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new WorstErrorReport);

class OracleAgreement : public ::testing::TestWithParam<Config> {};

TEST_P(OracleAgreement, ForwardThroughEveryFaceAndFamilyWithinTheBoundsOfFloat64) {
  note("forward", expect_driver_passes(driver::PreForwardDriver(), GetParam(), "forward " + GetParam().name()), GetParam());
}

TEST_P(OracleAgreement, BackwardThroughEveryFaceAndFamilyWithinTheBoundsOfFloat64) {
  note("backward", expect_driver_passes(driver::PreBackwardDriver(), GetParam(), "backward " + GetParam().name()), GetParam());
}

// With and without caches, the other outputs of the forward are bitwise the same.
TEST_P(OracleAgreement, CachesDoNotChangeTheOtherOutputs) {
  const Config& c = GetParam();
  Operands o = make_operands(c);
  ASSERT_TRUE(mhc::pre_forward(forward_inputs(o), forward_outputs(o), o.options).ok());
  Operands other = make_operands(c);
  other.cfg.caches = !c.caches;
  ASSERT_TRUE(mhc::pre_forward(forward_inputs(other), forward_outputs(other), other.options).ok());
  EXPECT_EQ(other.h_in.raw(), o.h_in.raw());
  EXPECT_EQ(other.h_post.raw(), o.h_post.raw());
  if (o.h_res.present()) {
    EXPECT_EQ(other.h_res.raw(), o.h_res.raw());
  }
}

// Sums over no tokens are zeros, written.
TEST(OracleAgreementEmpty, BackwardSumsOverNoTokensAreZeros) {
  for (const Config& c : oracle_configs()) {
    if (c.T() != 0) continue;
    Operands o = make_operands(c);
    ASSERT_TRUE(run_forward_with_caches(o).ok());
    ASSERT_TRUE(mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options).ok());
    for (const Tensor* t : {&o.grad_phi, &o.grad_alpha, &o.grad_bias, &o.grad_gamma})
      if (t->present()) {
        for (double v : t->values()) ASSERT_EQ(v, 0.0) << c.name();
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Spread, OracleAgreement, ::testing::ValuesIn(oracle_configs()),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return std::to_string(info.index) + "_" + info.param.name();
                         });

// More rows of phi than one pass over them takes (N = 9: F = 99 > kRowsPerPass),
// with D a multiple of the cast's blocks of squares: the SIMD forward casts each
// pass's u inside its first row tile, the squares on the first pass only; 40
// tokens take the decode path, 100 the items.
std::vector<Config> row_pass_configs() {
  std::vector<Config> out;
  for (auto [S, dtype, gamma] : {std::tuple{int64_t(40), DType::bf16, true}, {int64_t(100), DType::fp16, false},
                                 {int64_t(100), DType::bf16, true}}) {
    Config c;
    c.N = 9; c.D = 256; c.S = S; c.dtype = dtype; c.gamma = gamma; c.seed = 4000 + out.size();
    out.push_back(c);
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(RowPasses, OracleAgreement, ::testing::ValuesIn(row_pass_configs()),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return std::to_string(info.index) + "_" + info.param.name();
                         });

// The family a default call runs is the one MHC_ISA names (or the best this CPU
// runs): its outputs are bitwise those of a call that asks for that family, and
// differ from another family's on this case (so the comparison can tell them apart).
TEST(KernelSelection, RequestedFamilyIsUsed) {
  const char* want = std::getenv("MHC_ISA");
  mhc::Isa expected = available_families().front();
  if (want != nullptr && *want != '\0') ASSERT_TRUE(mhc::isa_from_name(want, &expected)) << want;
  else EXPECT_STRNE(mhc::isa(), "reference") << "the float64 reference must not be the default";
  EXPECT_EQ(std::string(mhc::isa()), mhc::isa_name(expected));
  EXPECT_EQ(std::string(mhc_isa()), mhc::isa_name(expected));
  Config c;
  c.N = 4; c.D = 300; c.S = 40; c.grad_x_post = true; c.seed = 77;
  auto outputs = [&](mhc::Isa isa) {
    Operands o = make_operands(c);
    o.options.isa = isa;
    EXPECT_TRUE(run_forward_with_caches(o).ok());
    EXPECT_TRUE(mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options).ok());
    return std::vector<std::vector<uint32_t>>{o.h_in.raw(), o.h_mix.raw(), o.grad_x.raw(), o.grad_phi.raw()};
  };
  const auto by_default = outputs(mhc::Isa::automatic);
  EXPECT_EQ(by_default, outputs(expected)) << "a default call ran another family than " << mhc::isa_name(expected);
  const mhc::Isa other = expected == mhc::Isa::reference ? mhc::Isa::portable : mhc::Isa::reference;
  EXPECT_NE(by_default, outputs(other)) << mhc::isa_name(expected) << " and " << mhc::isa_name(other) << " agree bitwise";
}

}  // namespace
}  // namespace mhc_test
