// The float64 reference's backward (SPEC §3) against central finite differences
// of its forward (SPEC §2), and the CANN documentation's inv_rms term shown wrong.
//
// Loss L = Σ h_in·g_h_in + Σ h_post·g_h_post + Σ h_res·g_h_res (+ Σ x·grad_x_post:
// grad_x_post enters grad_x additively, exactly as a linear term of the loss would).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include "test_util.hpp"

namespace mhc_test {
namespace {

using mhc::kernels::reference::BackwardInputs64;
using mhc::kernels::reference::BackwardOutputs64;
using mhc::kernels::reference::ForwardInputs64;
using mhc::kernels::reference::ForwardOutputs64;

constexpr double kStep = 1e-6;          // relative step of the central differences
constexpr double kTolerance = 1e-6;     // relative error allowed of an analytic derivative
constexpr int kSampledElements = 40;    // elements checked of a tensor bigger than this

struct FdProblem {
  ForwardInputs64 forward;
  std::vector<double> grad_h_in, grad_h_post, grad_h_res, grad_x_post;  // [T,D] [T,N] [T,R] [T,K]/{}
};

FdProblem make_fd_problem(int64_t N, int64_t D, int64_t T, FForm form, bool gamma, bool grad_x_post,
                          uint64_t seed, double gamma_lo = 0.5, double gamma_hi = 1.5) {
  Rng rng(seed);
  Config c;
  c.N = N; c.D = D; c.B = 1; c.S = T; c.form = form;
  FdProblem p;
  ForwardInputs64& f = p.forward;
  f.dims = c.dims();
  f.norm_eps = 1e-6;
  f.hc_eps = 1e-3;  // big enough that dropping it anywhere would show
  const int64_t K = c.K(), F = c.F(), R = c.R();
  auto draw = [&](int64_t n, double lo, double hi) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& e : v) e = rng.uniform(lo, hi);
    return v;
  };
  f.x = draw(T * K, -1.5, 1.5);
  f.phi = draw(F * K, -2.0 / std::sqrt(double(K)), 2.0 / std::sqrt(double(K)));
  f.alpha = draw(alpha_entries(form), 0.3, 1.5);
  f.bias = draw(F, -1, 1);
  if (gamma) f.gamma = draw(K, gamma_lo, gamma_hi);
  p.grad_h_in = draw(T * D, -1, 1);
  if (form != FForm::head) p.grad_h_post = draw(T * N, -1, 1);
  p.grad_h_res = draw(T * R, -1, 1);
  if (grad_x_post) p.grad_x_post = draw(T * K, -1, 1);
  return p;
}

double loss(const FdProblem& p, const ForwardInputs64& in) {
  const ForwardOutputs64 out = mhc::kernels::reference::forward(in);
  double L = 0;
  for (size_t i = 0; i < out.h_in.size(); ++i) L += out.h_in[i] * p.grad_h_in[i];
  for (size_t i = 0; i < out.h_post.size(); ++i) L += out.h_post[i] * p.grad_h_post[i];
  for (size_t i = 0; i < size_t(in.dims.T * in.dims.R); ++i) L += out.h_res[i] * p.grad_h_res[i];
  for (size_t i = 0; i < p.grad_x_post.size(); ++i) L += in.x[i] * p.grad_x_post[i];
  return L;
}

BackwardOutputs64 analytic(const FdProblem& p) {
  const ForwardOutputs64 fwd = mhc::kernels::reference::forward(p.forward);
  BackwardInputs64 in;
  in.dims = p.forward.dims;
  in.x = p.forward.x;
  in.phi = p.forward.phi;
  in.alpha = p.forward.alpha;
  in.gamma = p.forward.gamma;
  in.grad_h_in = p.grad_h_in;
  in.grad_h_post = p.grad_h_post;
  in.grad_h_res = p.grad_h_res;
  in.inv_rms = fwd.inv_rms;
  in.h_mix = fwd.h_mix;
  in.h_pre = fwd.h_pre;
  in.h_post = fwd.h_post;
  in.grad_x_post = p.grad_x_post;
  in.hc_eps = p.forward.hc_eps;
  return mhc::kernels::reference::backward(in);
}

// Central difference of the loss w.r.t. element i of the operand `member`.
double central_difference(const FdProblem& p, std::vector<double> ForwardInputs64::*member, size_t i) {
  ForwardInputs64 in = p.forward;
  const double x0 = (in.*member)[i], h = kStep * std::max(1.0, std::fabs(x0));
  (in.*member)[i] = x0 + h;
  const double up = loss(p, in);
  (in.*member)[i] = x0 - h;
  const double down = loss(p, in);
  return (up - down) / (2 * h);
}

// Every element of small operands, a seeded sample of the bigger ones.
std::vector<size_t> elements_to_check(size_t n, uint64_t seed) {
  std::vector<size_t> idx;
  if (n <= size_t(kSampledElements)) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    Rng rng(seed);
    for (int i = 0; i < kSampledElements; ++i) idx.push_back(size_t(rng.below(int64_t(n))));
  }
  return idx;
}

// Largest |fd - analytic| / max(|analytic|, 1e-3·max|analytic|) over the checked elements.
double worst_relative_error(const FdProblem& p, std::vector<double> ForwardInputs64::*member,
                            const std::vector<double>& grad, std::string* where) {
  double scale = 0;
  for (double g : grad) scale = std::max(scale, std::fabs(g));
  double worst = 0;
  for (size_t i : elements_to_check(grad.size(), grad.size() * 7919)) {
    const double fd = central_difference(p, member, i);
    const double err = std::fabs(fd - grad[i]) / std::max({std::fabs(grad[i]), 1e-3 * scale, 1e-300});
    if (err > worst) {
      worst = err;
      *where = "element " + std::to_string(i) + ": fd " + std::to_string(fd) + ", analytic " +
               std::to_string(grad[i]);
    }
  }
  return worst;
}

using FdParam = std::tuple<int64_t /*N*/, int64_t /*D*/, FForm, bool /*gamma*/, bool /*grad_x_post*/>;

class ReferenceBackwardMatchesFiniteDifferences : public ::testing::TestWithParam<FdParam> {};

TEST_P(ReferenceBackwardMatchesFiniteDifferences, EveryOperand) {
  const auto [N, D, form, gamma, grad_x_post] = GetParam();
  const FdProblem p = make_fd_problem(N, D, /*T=*/3, form, gamma, grad_x_post, 1000 * N + 10 * D + int(form));
  const BackwardOutputs64 g = analytic(p);
  ASSERT_EQ(g.grad_x.size(), p.forward.x.size());
  ASSERT_EQ(g.grad_alpha.size(), p.forward.alpha.size());
  struct Check { const char* name; std::vector<double> ForwardInputs64::*member; const std::vector<double>* grad; };
  std::vector<Check> checks = {{"x", &ForwardInputs64::x, &g.grad_x},
                               {"phi", &ForwardInputs64::phi, &g.grad_phi},
                               {"alpha", &ForwardInputs64::alpha, &g.grad_alpha},
                               {"bias", &ForwardInputs64::bias, &g.grad_bias}};
  if (gamma) checks.push_back({"gamma", &ForwardInputs64::gamma, &g.grad_gamma});
  for (const Check& c : checks) {
    std::string where;
    const double err = worst_relative_error(p, c.member, *c.grad, &where);
    EXPECT_LE(err, kTolerance) << "d loss / d " << c.name << ", worst at " << where;
  }
}

std::string fd_name(const ::testing::TestParamInfo<FdParam>& info) {
  const auto [N, D, form, gamma, gxp] = info.param;
  return "N" + std::to_string(N) + "_D" + std::to_string(D) + "_" + fform_name(form) +
         (gamma ? "_gamma" : "_nogamma") + (gxp ? "_gxpost" : "");
}

INSTANTIATE_TEST_SUITE_P(AllForms, ReferenceBackwardMatchesFiniteDifferences,
                         ::testing::Combine(::testing::Values<int64_t>(1, 2, 3, 4), ::testing::Values<int64_t>(1, 3),
                                            ::testing::Values(FForm::square, FForm::permutation, FForm::two_entry,
                                                              FForm::head),
                                            ::testing::Bool(), ::testing::Bool()),
                         fd_name);

// grad_x_post is added to grad_x and changes nothing else.
TEST(ReferenceBackward, GradXPostIsAdditive) {
  FdProblem with = make_fd_problem(3, 4, 5, FForm::square, true, true, 77);
  FdProblem without = with;
  without.grad_x_post.clear();
  const BackwardOutputs64 a = analytic(with), b = analytic(without);
  for (size_t i = 0; i < a.grad_x.size(); ++i)
    EXPECT_NEAR(a.grad_x[i] - b.grad_x[i], with.grad_x_post[i], 1e-14) << "element " << i;
  EXPECT_EQ(a.grad_phi, b.grad_phi);
  EXPECT_EQ(a.grad_alpha, b.grad_alpha);
  EXPECT_EQ(a.grad_bias, b.grad_bias);
  EXPECT_EQ(a.grad_gamma, b.grad_gamma);
}

// ---------------------------------------------------------------- SPEC §3: the documented error

// c_t = -r³·g_r/K of every token, from SPEC §3 written out here independently.
std::vector<double> inv_rms_coefficients(const FdProblem& p) {
  const ForwardOutputs64 fwd = mhc::kernels::reference::forward(p.forward);
  const auto& d = p.forward.dims;
  const auto& alpha = p.forward.alpha;
  std::vector<double> c(static_cast<size_t>(d.T));
  for (int64_t t = 0; t < d.T; ++t) {
    double g_r = 0;
    for (int64_t f = 0; f < d.F; ++f) {
      double gz;
      int branch;
      if (f < d.N) {
        double g_pre = 0;
        for (int64_t j = 0; j < d.D; ++j) g_pre += p.forward.x[t * d.K + f * d.D + j] * p.grad_h_in[t * d.D + j];
        const double s = fwd.h_pre[t * d.N + f] - p.forward.hc_eps;
        gz = g_pre * s * (1 - s);
        branch = 0;
      } else if (f < 2 * d.N) {
        const double hp = fwd.h_post[t * d.N + f - d.N];
        gz = p.grad_h_post[t * d.N + f - d.N] * hp * (1 - hp / 2);
        branch = 1;
      } else {
        gz = p.grad_h_res[t * d.R + f - 2 * d.N];
        branch = 2;
      }
      g_r += alpha[branch] * gz * fwd.h_mix[t * d.F + f];
    }
    const double r = fwd.inv_rms[t];
    c[t] = -r * r * r * g_r / double(d.K);
  }
  return c;
}

TEST(CannDocumentationError, InvRmsTermUsesRawXNotXTimesGamma) {
  // gamma far from 1 so that (gamma - 1) ⊙ x is large.
  const FdProblem p = make_fd_problem(4, 3, 3, FForm::square, true, false, 2024, 0.2, 1.8);
  const auto& d = p.forward.dims;
  const BackwardOutputs64 g = analytic(p);
  const std::vector<double> c = inv_rms_coefficients(p);

  double ref_worst = 0, doc_worst = 0, doc_offset_worst = 0, scale = 0;
  for (double e : g.grad_x) scale = std::max(scale, std::fabs(e));
  for (int64_t t = 0; t < d.T; ++t) {
    for (int64_t k = 0; k < d.K; ++k) {
      const size_t i = size_t(t * d.K + k);
      const double fd = central_difference(p, &ForwardInputs64::x, i);
      const double v = p.forward.x[i], gamma = p.forward.gamma[k];
      // The documented form: c · (x ⊙ gamma) where the reference has c · x.
      const double documented = g.grad_x[i] - c[t] * v + c[t] * v * gamma;
      const double denom = std::max(std::fabs(fd), 1e-3 * scale);
      ref_worst = std::max(ref_worst, std::fabs(g.grad_x[i] - fd) / denom);
      doc_worst = std::max(doc_worst, std::fabs(documented - fd) / denom);
      // SPEC: the documented form is off by exactly (g_r·r³/K)(gamma−1)⊙x = -c (gamma-1) x.
      const double predicted_offset = c[t] * (gamma - 1) * v;
      doc_offset_worst = std::max(doc_offset_worst, std::fabs((documented - fd) - predicted_offset) / denom);
    }
  }
  EXPECT_LE(ref_worst, kTolerance) << "the reference's grad_x (c · x) disagrees with finite differences";
  EXPECT_GE(doc_worst, 1e4 * kTolerance) << "the documented grad_x (c · x·gamma) should be visibly wrong";
  EXPECT_LE(doc_offset_worst, kTolerance) << "the documented form's error is not (g_r r³/K)(gamma-1)⊙x";
  RecordProperty("reference_relative_error", std::to_string(ref_worst));
  RecordProperty("documented_relative_error", std::to_string(doc_worst));
  std::printf("grad_x vs finite differences: reference %.3g, CANN-documented form %.3g\n", ref_worst, doc_worst);
}

// With gamma = 1 the two forms coincide (the error is proportional to gamma - 1).
TEST(CannDocumentationError, VanishesWhenGammaIsOne) {
  const FdProblem p = make_fd_problem(4, 3, 2, FForm::square, true, false, 7, 1.0, 1.0);
  const BackwardOutputs64 g = analytic(p);
  const std::vector<double> c = inv_rms_coefficients(p);
  for (int64_t t = 0; t < p.forward.dims.T; ++t)
    for (int64_t k = 0; k < p.forward.dims.K; ++k) {
      const size_t i = size_t(t * p.forward.dims.K + k);
      EXPECT_EQ(c[t] * p.forward.x[i] * p.forward.gamma[k], c[t] * p.forward.x[i]);
    }
  std::string where;
  EXPECT_LE(worst_relative_error(p, &ForwardInputs64::x, g.grad_x, &where), kTolerance) << where;
}

}  // namespace
}  // namespace mhc_test
