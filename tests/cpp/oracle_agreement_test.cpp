// The production path (mhc::pre_forward / pre_backward through whatever kernel
// family MHC_ISA selects) against the float64 reference on the same inputs:
//   fp32 outputs: normwise relative error <= 1e-5;
//   h_in, grad_x: elementwise within max(1 ulp of the dtype at |truth|, 1e-6 · Σ|terms|),
//   the terms' magnitudes computed in float64.
// The backward is fed the caches of the production forward, and the reference
// the same caches upcast, so each operator's own error is measured.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "suite_cases.hpp"
#include "test_util.hpp"

namespace mhc_test {
namespace {

constexpr double kNormwiseTolerance = 1e-5;
constexpr double kTermsTolerance = 1e-6;

// ---------------------------------------------------------------- worst errors seen, printed at exit

struct Worst {
  double value = 0;
  std::string where;
};
std::map<std::string, Worst>& worst_table() {
  static std::map<std::string, Worst> table;
  return table;
}
void note(const std::string& what, double value, const std::string& where) {
  Worst& w = worst_table()[what];
  if (value > w.value || w.where.empty()) w = {value, where};
}

class WorstErrorReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("\nLargest errors vs float64 (MHC_ISA=%s, kernels: %s):\n",
                std::getenv("MHC_ISA") ? std::getenv("MHC_ISA") : "(unset)", mhc::isa());
    for (const auto& [what, w] : worst_table())
      std::printf("  %-34s %.3e  (%s)\n", what.c_str(), w.value, w.where.c_str());
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new WorstErrorReport);

// ---------------------------------------------------------------- checks

void expect_normwise(const char* name, const Tensor& got, const std::vector<double>& want,
                     const Config& c) {
  ASSERT_EQ(size_t(got.numel()), want.size()) << name;
  const double err = normwise_relative_error(got.values(), want);
  note(std::string(name) + " normwise rel", err, c.name());
  EXPECT_LE(err, kNormwiseTolerance) << name << ": normwise relative error vs float64";
}

// Elementwise: |got - truth| <= max(ulp(dtype, truth), 1e-6 · magnitude).
void expect_within_terms(const char* name, const Tensor& got, const std::vector<double>& truth,
                         const std::vector<double>& magnitude, const Config& c) {
  ASSERT_EQ(size_t(got.numel()), truth.size()) << name;
  int failures = 0;
  double worst_ratio = 0, worst_ulps = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    const double err = std::fabs(got.get(int64_t(i)) - truth[i]);
    const double ulp = ulp_of(got.dtype(), truth[i]);
    const double bound = std::max(ulp, kTermsTolerance * magnitude[i]);
    worst_ratio = std::max(worst_ratio, err / bound);
    worst_ulps = std::max(worst_ulps, err / ulp);
    if (!(err <= bound) && ++failures <= 5)
      ADD_FAILURE() << name << "[" << i << "]: got " << got.get(int64_t(i)) << ", float64 " << truth[i]
                    << ", error " << err << " > bound " << bound << " (ulp " << ulp << ", Σ|terms| "
                    << magnitude[i] << ")";
  }
  EXPECT_EQ(failures, 0) << name << ": elements out of bounds";
  const std::string dt = dtype_name(got.dtype());
  note(std::string(name) + " " + dt + " error/bound", worst_ratio, c.name());
  if (got.dtype() != DType::fp32)  // (for fp32 the terms bound dominates: ulps say little)
    note(std::string(name) + " " + dt + " error in ulps", worst_ulps, c.name());
}

// Not a check: the worst error/bound with the bound on the unexpanded terms, for the record.
void note_only(const char* name, const Tensor& got, const std::vector<double>& truth,
               const std::vector<double>& magnitude, const Config& c) {
  double worst = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    const double bound = std::max(ulp_of(got.dtype(), truth[i]), kTermsTolerance * magnitude[i]);
    worst = std::max(worst, std::fabs(got.get(int64_t(i)) - truth[i]) / bound);
  }
  note(std::string(name) + " " + dtype_name(got.dtype()) + " error/literal-bound (info)", worst, c.name());
}

// Σ_n |h_pre[n]·v[n,d]| for h_in, in float64.
std::vector<double> h_in_magnitudes(const mhc::kernels::reference::ForwardInputs64& in,
                                    const mhc::kernels::reference::ForwardOutputs64& out) {
  const auto& d = in.dims;
  std::vector<double> m(static_cast<size_t>(d.T * d.D), 0.0);
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t j = 0; j < d.D; ++j)
        m[t * d.D + j] += std::fabs(out.h_pre[t * d.N + n] * in.x[t * d.K + n * d.D + j]);
  return m;
}

// Magnitudes of grad_x's terms, in float64 (SPEC §3 written out again, once on
// values and once on absolute values). Per element of grad_x:
//   literal:  |h_pre·grad_h_in| + |gamma·gu| + |c·v| + |grad_x_post|
//   expanded: the same with each inner sum replaced by the sum of its terms'
//             magnitudes: gu = Σ_f phi·G -> Σ_f |phi·G|, g_pre = Σ_d v·grad_h_in ->
//             Σ_d |v·grad_h_in| inside G, and g_r = Σ_f gw·m -> Σ_f |gw·m| inside c.
// fp32 evaluation of a sum errs by a few ulps of the sum of its terms' magnitudes,
// not of its value: the expanded form is what the bound is taken on (a cancelling
// gu, |gu| << Σ_f |phi·G|, otherwise fails any fp32 implementation).
struct GradXMagnitudes {
  std::vector<double> literal, expanded;
};
GradXMagnitudes grad_x_magnitudes(const mhc::kernels::reference::BackwardInputs64& in) {
  const auto& d = in.dims;
  GradXMagnitudes out;
  out.literal.resize(static_cast<size_t>(d.T * d.K));
  out.expanded.resize(static_cast<size_t>(d.T * d.K));
  std::vector<double> G(static_cast<size_t>(d.F)), G_abs(static_cast<size_t>(d.F));
  const size_t entries = in.alpha.size();
  const double alpha[3] = {in.alpha[0], entries > 1 ? in.alpha[1] : 0.0, entries > 2 ? in.alpha[2] : 0.0};
  for (int64_t t = 0; t < d.T; ++t) {
    const double r = in.inv_rms[t];
    double g_r = 0, g_r_abs = 0;
    for (int64_t f = 0; f < d.F; ++f) {
      double gz, gz_abs;
      int branch;
      if (f < d.N) {
        double g_pre = 0, g_pre_abs = 0;
        for (int64_t j = 0; j < d.D; ++j) {
          const double p = in.x[t * d.K + f * d.D + j] * in.grad_h_in[t * d.D + j];
          g_pre += p;
          g_pre_abs += std::fabs(p);
        }
        const double s = in.h_pre[t * d.N + f] - in.hc_eps;
        gz = g_pre * s * (1 - s);
        gz_abs = g_pre_abs * std::fabs(s * (1 - s));
        branch = 0;
      } else if (f < 2 * d.N) {
        const double hp = in.h_post[t * d.N + f - d.N];
        const double sg = hp / 2;
        gz = in.grad_h_post[t * d.N + f - d.N] * 2 * sg * (1 - sg);
        gz_abs = std::fabs(gz);
        branch = 1;
      } else {
        gz = in.grad_h_res[t * d.R + f - 2 * d.N];
        gz_abs = std::fabs(gz);
        branch = 2;
      }
      G[f] = r * alpha[branch] * gz;
      G_abs[f] = std::fabs(r * alpha[branch]) * gz_abs;
      g_r += alpha[branch] * gz * in.h_mix[t * d.F + f];
      g_r_abs += std::fabs(alpha[branch] * in.h_mix[t * d.F + f]) * gz_abs;
    }
    const double c = -r * r * r * g_r / double(d.K);
    const double c_abs = std::fabs(r * r * r / double(d.K)) * g_r_abs;
    for (int64_t k = 0; k < d.K; ++k) {
      double gu = 0, gu_abs = 0;
      for (int64_t f = 0; f < d.F; ++f) {
        gu += in.phi[f * d.K + k] * G[f];
        gu_abs += std::fabs(in.phi[f * d.K + k]) * G_abs[f];
      }
      const double gamma = in.gamma.empty() ? 1.0 : in.gamma[k];
      const int64_t n = k / d.D, j = k % d.D;
      const double v = in.x[t * d.K + k];
      const double common = std::fabs(in.h_pre[t * d.N + n] * in.grad_h_in[t * d.D + j]) +
                            (in.grad_x_post.empty() ? 0.0 : std::fabs(in.grad_x_post[t * d.K + k]));
      out.literal[t * d.K + k] = common + std::fabs(gamma * gu) + std::fabs(c * v);
      out.expanded[t * d.K + k] = common + std::fabs(gamma) * gu_abs + c_abs * std::fabs(v);
    }
  }
  return out;
}

bool all_bytes_equal(const Tensor& t, uint8_t fill) {
  const auto bytes = t.buffer.snapshot();
  return std::all_of(bytes.begin(), bytes.end(), [&](uint8_t b) { return b == fill; });
}

// ---------------------------------------------------------------- the cases


class OracleAgreement : public ::testing::TestWithParam<Config> {};

TEST_P(OracleAgreement, ForwardMatchesFloat64Reference) {
  const Config& c = GetParam();
  Operands o = make_operands(c);
  const mhc::Status st = mhc::pre_forward(forward_inputs(o), forward_outputs(o), o.options);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto in64 = forward64(o);
  const auto ref = mhc::kernels::reference::forward(in64);

  expect_within_terms("h_in", o.h_in, ref.h_in, h_in_magnitudes(in64, ref), c);
  expect_normwise("h_post", o.h_post, ref.h_post, c);
  if (o.h_res.present()) expect_normwise("h_res", o.h_res, ref.h_res, c);
  if (c.caches) {
    expect_normwise("inv_rms", o.inv_rms, ref.inv_rms, c);
    expect_normwise("h_mix", o.h_mix, ref.h_mix, c);
    expect_normwise("h_pre", o.h_pre, ref.h_pre, c);
  } else {
    EXPECT_TRUE(all_bytes_equal(o.inv_rms, kOutputFill) && all_bytes_equal(o.h_mix, kOutputFill) &&
                all_bytes_equal(o.h_pre, kOutputFill))
        << "caches not requested but written";
  }
  // With and without caches, the other outputs are bitwise the same.
  Operands other = make_operands(c);
  other.cfg.caches = !c.caches;
  ASSERT_TRUE(mhc::pre_forward(forward_inputs(other), forward_outputs(other), other.options).ok());
  EXPECT_EQ(other.h_in.raw(), o.h_in.raw());
  EXPECT_EQ(other.h_post.raw(), o.h_post.raw());
  if (o.h_res.present()) {
    EXPECT_EQ(other.h_res.raw(), o.h_res.raw());
  }
}

TEST_P(OracleAgreement, BackwardMatchesFloat64Reference) {
  const Config& c = GetParam();
  Operands o = make_operands(c);
  ASSERT_TRUE(run_forward_with_caches(o).ok());
  const mhc::Status st = mhc::pre_backward(backward_inputs(o), backward_outputs(o), o.options);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto in64 = backward64(o);
  const auto ref = mhc::kernels::reference::backward(in64);

  const GradXMagnitudes magnitudes = grad_x_magnitudes(in64);
  expect_within_terms("grad_x", o.grad_x, ref.grad_x, magnitudes.expanded, c);
  note_only("grad_x", o.grad_x, ref.grad_x, magnitudes.literal, c);
  expect_normwise("grad_phi", o.grad_phi, ref.grad_phi, c);
  expect_normwise("grad_alpha", o.grad_alpha, ref.grad_alpha, c);
  expect_normwise("grad_bias", o.grad_bias, ref.grad_bias, c);
  if (c.gamma) expect_normwise("grad_gamma", o.grad_gamma, ref.grad_gamma, c);
  if (c.T() == 0) {  // sums over no tokens: zeros, written
    for (const Tensor* t : {&o.grad_phi, &o.grad_alpha, &o.grad_bias, &o.grad_gamma})
      if (t->present()) {
        for (double v : t->values()) ASSERT_EQ(v, 0.0);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Spread, OracleAgreement, ::testing::ValuesIn(oracle_configs()),
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
