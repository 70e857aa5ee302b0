// The float64 references' single-pass backward (SPEC §14: the Sinkhorn's backward,
// then MhcPreBackward with g_pre = grad_h_pre and the collapse taken with the
// carried pre-mix) against central finite differences of their forward, in every
// operand: x, phi, alpha, bias, gamma and the pre-mix itself.
//
// Loss L = Σ h_in·g_in + Σ h_pre·g_pre + Σ h_post·g_post + Σ H·g_H.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/reference/reference.hpp"
#include "kernels/reference/sinkhorn.hpp"
#include "test_util.hpp"

namespace mhc_test {
namespace {

namespace ref = mhc::kernels::reference;

constexpr double kStep = 1e-6;       // relative step of the central differences
// relative error allowed of an analytic derivative: the differences of a loss
// through 2I Sinkhorn steps carry ~1e-9 of rounding, a few 1e-6 of its smaller
// derivatives (a wrong term is off by O(1))
constexpr double kTolerance = 2e-5;
constexpr int kSampled = 30;         // elements checked of a tensor bigger than this
constexpr int64_t kIters = 6;
constexpr double kSinkhornEps = 1e-3;

struct Problem {
  ref::ForwardInputs64 forward;  // pre_mix: the carried vector (empty: the first site)
  std::vector<double> g_in, g_pre, g_post, g_H;
};

Problem make_problem(int64_t N, int64_t D, bool gamma, bool first_site, uint64_t seed) {
  Rng rng(seed);
  const int64_t T = 3, K = N * D, F = 2 * N + N * N;
  auto draw = [&](int64_t n, double lo, double hi) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& e : v) e = rng.uniform(lo, hi);
    return v;
  };
  Problem p;
  ref::ForwardInputs64& f = p.forward;
  f.dims = {.T = T, .N = N, .D = D, .K = K, .F = F, .R = N * N};
  f.norm_eps = 1e-6, f.hc_eps = 1e-3;
  f.x = draw(T * K, -1.5, 1.5);
  f.phi = draw(F * K, -2.0 / std::sqrt(double(K)), 2.0 / std::sqrt(double(K)));
  f.alpha = draw(3, 0.3, 1.5);
  f.bias = draw(F, -1, 1);
  if (gamma) f.gamma = draw(K, 0.5, 1.5);
  if (first_site) f.select_first_stream = true;
  else f.pre_mix = draw(T * N, 0.05, 1.0);
  p.g_in = draw(T * D, -1, 1), p.g_pre = draw(T * N, -1, 1), p.g_post = draw(T * N, -1, 1);
  p.g_H = draw(T * N * N, -1, 1);
  return p;
}

double loss(const Problem& p, const ref::ForwardInputs64& in) {
  const ref::ForwardOutputs64 out = ref::forward(in);
  const int64_t T = in.dims.T, N = in.dims.N, NN = N * N;
  double L = 0;
  for (size_t i = 0; i < out.h_in.size(); ++i) L += out.h_in[i] * p.g_in[i];
  for (size_t i = 0; i < out.h_pre.size(); ++i) L += out.h_pre[i] * p.g_pre[i];
  for (size_t i = 0; i < out.h_post.size(); ++i) L += out.h_post[i] * p.g_post[i];
  for (int64_t t = 0; t < T; ++t) {
    const ref::Sinkhorn64 s = ref::sinkhorn_forward(&out.h_res[size_t(t * NN)], N, kIters, kSinkhornEps);
    for (int64_t i = 0; i < NN; ++i) L += s.H()[size_t(i)] * p.g_H[size_t(t * NN + i)];
  }
  return L;
}

ref::BackwardOutputs64 analytic(const Problem& p) {
  const ref::ForwardInputs64& f = p.forward;
  const ref::ForwardOutputs64 fwd = ref::forward(f);
  const int64_t T = f.dims.T, N = f.dims.N, NN = N * N;
  ref::BackwardInputs64 in;
  in.dims = f.dims;
  in.x = f.x, in.phi = f.phi, in.alpha = f.alpha, in.gamma = f.gamma;
  in.grad_h_in = p.g_in, in.grad_h_post = p.g_post;
  for (int64_t t = 0; t < T; ++t) {
    const ref::Sinkhorn64 s = ref::sinkhorn_forward(&fwd.h_res[size_t(t * NN)], N, kIters, kSinkhornEps);
    const std::vector<double> gz = ref::sinkhorn_backward(s, &p.g_H[size_t(t * NN)]);
    in.grad_h_res.insert(in.grad_h_res.end(), gz.begin(), gz.end());
  }
  in.inv_rms = fwd.inv_rms, in.h_mix = fwd.h_mix, in.h_pre = fwd.h_pre, in.h_post = fwd.h_post;
  in.hc_eps = f.hc_eps;
  if (f.select_first_stream) {  // stream 0 selected: weights (1, 0, ..)
    in.pre_mix.assign(size_t(T * N), 0.0);
    for (int64_t t = 0; t < T; ++t) in.pre_mix[size_t(t * N)] = 1.0;
  } else {
    in.pre_mix = f.pre_mix;
  }
  in.grad_h_pre = p.g_pre;
  return ref::backward(in);
}

double worst_error(const Problem& p, std::vector<double> ref::ForwardInputs64::*member,
                   const std::vector<double>& grad, std::string* where) {
  double scale = 0;
  for (double g : grad) scale = std::max(scale, std::fabs(g));
  std::vector<size_t> idx;
  Rng rng(grad.size() * 7919 + 1);
  for (int i = 0; i < std::min<int>(kSampled, int(grad.size())); ++i)
    idx.push_back(grad.size() <= size_t(kSampled) ? size_t(i) : size_t(rng.below(int64_t(grad.size()))));
  double worst = 0;
  for (size_t i : idx) {
    ref::ForwardInputs64 in = p.forward;
    const double x0 = (in.*member)[i], h = kStep * std::max(1.0, std::fabs(x0));
    (in.*member)[i] = x0 + h;
    const double up = loss(p, in);
    (in.*member)[i] = x0 - h;
    const double fd = (up - loss(p, in)) / (2 * h);
    const double err = std::fabs(fd - grad[i]) / std::max({std::fabs(grad[i]), 1e-3 * scale, 1e-300});
    if (err > worst) worst = err, *where = "element " + std::to_string(i) + ": fd " + std::to_string(fd) +
                                          ", analytic " + std::to_string(grad[i]);
  }
  return worst;
}

using Param = std::tuple<int64_t /*N*/, int64_t /*D*/, bool /*gamma*/, bool /*first site*/>;
class SinglePassReferenceBackward : public ::testing::TestWithParam<Param> {};

TEST_P(SinglePassReferenceBackward, MatchesFiniteDifferencesInEveryOperand) {
  const auto [N, D, gamma, first] = GetParam();
  const Problem p = make_problem(N, D, gamma, first, 100 * N + D + (gamma ? 7 : 0) + (first ? 13 : 0));
  const ref::BackwardOutputs64 g = analytic(p);
  struct Check {
    const char* name;
    std::vector<double> ref::ForwardInputs64::*member;
    const std::vector<double>* grad;
  };
  std::vector<Check> checks = {{"x", &ref::ForwardInputs64::x, &g.grad_x},
                               {"phi", &ref::ForwardInputs64::phi, &g.grad_phi},
                               {"alpha", &ref::ForwardInputs64::alpha, &g.grad_alpha},
                               {"bias", &ref::ForwardInputs64::bias, &g.grad_bias}};
  if (gamma) checks.push_back({"gamma", &ref::ForwardInputs64::gamma, &g.grad_gamma});
  if (!first) checks.push_back({"pre_mix", &ref::ForwardInputs64::pre_mix, &g.grad_pre_mix});
  for (const Check& c : checks) {
    std::string where;
    EXPECT_LE(worst_error(p, c.member, *c.grad, &where), kTolerance) << "d loss / d " << c.name << ", worst at "
                                                                      << where;
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [N, D, gamma, first] = info.param;
  return "N" + std::to_string(N) + "_D" + std::to_string(D) + (gamma ? "_gamma" : "") + (first ? "_first" : "_carried");
}
INSTANTIATE_TEST_SUITE_P(Forms, SinglePassReferenceBackward,
                         ::testing::Combine(::testing::Values<int64_t>(1, 2, 4), ::testing::Values<int64_t>(1, 5),
                                            ::testing::Bool(), ::testing::Bool()),
                         param_name);

}  // namespace
}  // namespace mhc_test
