// MhcSinkhorn and MhcSinkhornBackward (SPEC §10) against float64, on every kernel
// family this build and CPU run (Options::isa, in one process):
//   - against a float64 reference written from SPEC's formulas (layer_util.hpp),
//     H, both caches and grad_z within the bounds stated at kHBound / kGradBound;
//   - the backward from the caches == from z, bitwise; every family the same bits;
//   - float64 central differences of the reference's forward against the
//     reference's backward and against the library's fp32 backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sinkhorn_util.hpp"

namespace mhc_test::layer {
namespace {

// ------------------------------------------------------------------ bounds
//
// Forward. Every step is a sum of N positive terms and a division (or, step 0,
// exp of z − max and a division): each rounds an entry by at most (N + 1) u
// relative (exp_f32: 2 ulp, plus |z − max| u from rounding its argument). In log
// space those relative errors add, and a normalisation only shifts a row or a
// column by its mean error, so they grow at most linearly in the 2I steps:
// |H − H64| <= (2I (N + 2) + 2 + |z − max|) u · H64, elementwise. kHFactor is the
// safety factor over that estimate (the measured worst, printed, is ~0.17 of the
// bound).
constexpr double kHFactor = 2.0;
double h_bound(const SCase& c, double spread) {
  return kHFactor * (2.0 * double(c.I) * double(c.N + 2) + 2.0 + spread) * kU;
}
// Backward. Each of the 2I reverse steps forms d = Σ G·Y (N products and sums)
// and (G − d)/s: its error relative to ||G|| is about (N + 2) u amplified by the
// step's norm (<= 2 for a doubly stochastic Y with s ~ 1), and the errors of the
// forward's Y and s enter the same way. Tokenwise normwise bound:
// ||g − g64|| / ||g64|| <= kGradFactor · 2I (N + 2) u · (1 + spread); the measured
// worst (N = 2, I = 1) is ~0.2 of it, most cases below 0.01.
constexpr double kGradFactor = 8.0;
double grad_bound(const SCase& c, double spread) {
  return kGradFactor * 2.0 * double(c.I) * double(c.N + 2) * (1.0 + spread) * kU;
}

struct Measured {
  double h = 0, caches = 0, grad = 0;  // in units of the bound
};

// The library's outputs against the float64 reference, token by token.
void check_against_float64(Bag& b, const SCase& c, const std::string& where, Measured& m) {
  const int64_t N = c.N, NN = N * N;
  const std::vector<double> z = b["z"].values(), G = b["grad_h_res"].values(), H = b["h_res"].values();
  const std::vector<double> gz = b["grad_z_from_z"].values();
  const double eps = double(float(c.eps));
  for (int64_t t = 0; t < c.T(); ++t) {
    const Sinkhorn64 f = sinkhorn_forward64(&z[size_t(t * NN)], N, c.I, eps);
    double spread = 0;
    for (int64_t i = 0; i < N; ++i) {
      double lo = z[size_t(t * NN + i * N)], hi = lo;
      for (int64_t j = 0; j < N; ++j) lo = std::min(lo, z[size_t(t * NN + i * N + j)]), hi = std::max(hi, z[size_t(t * NN + i * N + j)]);
      spread = std::max(spread, hi - lo);
    }
    const double hb = h_bound(c, spread);
    for (int64_t e = 0; e < NN; ++e) {
      const double want = f.H()[size_t(e)], got = H[size_t(t * NN + e)];
      const double err = std::fabs(got - want) / want;
      m.h = std::max(m.h, err / hb);
      ASSERT_LE(err, hb) << where << " H token " << t << " entry " << e << ": " << got << " vs float64 " << want;
    }
    if (c.pitch > 0) {  // every slot of both caches, the padding 0
      const Tensor& norm = b["norm_out"];
      const Tensor& sum = b["sum_out"];
      for (int64_t k = 0; k < 2 * c.I; ++k)
        for (int64_t i = 0; i < N; ++i) {
          for (int64_t j = 0; j < c.pitch; ++j) {
            const double got = norm.get(((k * c.T() + t) * N + i) * c.pitch + j);
            if (j >= N) {
              ASSERT_EQ(got, 0.0) << where << " norm_out padding";
              continue;
            }
            const double want = f.P[size_t(k)][size_t(i * N + j)];
            const double err = std::fabs(got - want) / want;
            m.caches = std::max(m.caches, err / hb);
            ASSERT_LE(err, hb) << where << " norm_out slot " << k << " token " << t << " (" << i << "," << j << ")";
          }
          const double got = sum.get((k * c.T() + t) * c.pitch + i), want = f.div[size_t(k)][size_t(i)];
          const double err = std::fabs(got - want) / want;
          m.caches = std::max(m.caches, err / hb);
          ASSERT_LE(err, hb) << where << " sum_out slot " << k << " token " << t << " row/col " << i;
        }
      for (int64_t k = 0; k < 2 * c.I; ++k)
        for (int64_t i = N; i < c.pitch; ++i) ASSERT_EQ(sum.get((k * c.T() + t) * c.pitch + i), 0.0) << "sum_out padding";
    }
    // The backward of the library's own grad_h_res (fp32 values), from z.
    const std::vector<double> want = sinkhorn_backward64(f, &G[size_t(t * NN)]);
    const std::vector<double> got(gz.begin() + t * NN, gz.begin() + (t + 1) * NN);
    const double err = normwise_relative_error(got, want), gb = grad_bound(c, spread);
    m.grad = std::max(m.grad, err / gb);
    ASSERT_LE(err, gb) << where << " grad_z token " << t;
  }
}

// ------------------------------------------------------------------ agreement with float64

class SinkhornOracle : public ::testing::TestWithParam<SCase> {};

TEST_P(SinkhornOracle, WithinTheBoundsOfFloat64OnEveryFamily) {
  const SCase c = GetParam();
  Measured worst;
  for (mhc::Isa isa : available_families()) {
    SCOPED_TRACE(family_name(isa));
    Bag b = run_all(c, options_for(isa));
    check_against_float64(b, c, family_name(isa), worst);
    if (c.pitch > 0) {
      EXPECT_EQ(b["grad_z"].raw(), b["grad_z_from_z"].raw()) << "from the caches != from z";
    }
  }
  RecordProperty("worst_h_over_bound", std::to_string(worst.h));
  RecordProperty("worst_grad_over_bound", std::to_string(worst.grad));
  std::printf("[ measured ] %s: H %.3g, caches %.3g, grad_z %.3g of their bounds\n", c.name().c_str(), worst.h,
              worst.caches, worst.grad);
}

// SPEC §10/§11: every family the same bits as every other, caches included.
TEST_P(SinkhornOracle, EveryFamilyGivesTheSameBits) {
  const SCase c = GetParam();
  const std::vector<mhc::Isa> families = available_families();
  Bag want = run_all(c, options_for(families.back()));  // the reference
  for (mhc::Isa isa : families) {
    Bag got = run_all(c, options_for(isa));
    for (const std::string& name : outputs_of(c))
      EXPECT_EQ(got[name].raw(), want[name].raw()) << name << ": " << family_name(isa) << " vs " << family_name(families.back());
  }
}

std::vector<SCase> oracle_cases() {
  std::vector<SCase> out;
  uint64_t seed = 10;
  for (int64_t N : {1, 2, 3, 4, 5, 6, 8, 13})
    for (int64_t I : {1, 2, 20}) {
      SCase c;
      c.N = N, c.I = I, c.S = 19, c.seed = seed++;
      c.pitch = (seed % 2) ? N : 8 * ((N + 7) / 8);
      out.push_back(c);
    }
  SCase big = {.B = 1, .S = 70, .N = 4, .I = 20, .eps = 1e-6, .pitch = 8, .scale = 3.0, .seed = 99};
  out.push_back(big);
  SCase eps0 = {.B = 2, .S = 9, .bsnd = true, .N = 4, .I = 7, .eps = 0.0, .pitch = 4, .scale = 1.0, .seed = 5};
  out.push_back(eps0);
  SCase big_eps = {.B = 1, .S = 9, .N = 6, .I = 5, .eps = 0.1, .pitch = 8, .scale = 2.0, .seed = 6};
  out.push_back(big_eps);
  SCase no_caches = {.B = 1, .S = 9, .N = 4, .I = 20, .eps = 1e-6, .pitch = 0, .scale = 1.0, .seed = 7};
  out.push_back(no_caches);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Cases, SinkhornOracle, ::testing::ValuesIn(oracle_cases()),
                         [](const ::testing::TestParamInfo<SCase>& i) { return i.param.name(); });

// ------------------------------------------------------------------ finite differences

double fd_loss(const std::vector<double>& z, const std::vector<double>& G, int64_t N, int64_t I, double eps) {
  const Sinkhorn64 f = sinkhorn_forward64(z.data(), N, I, eps);
  double l = 0;
  for (int64_t e = 0; e < N * N; ++e) l += G[size_t(e)] * f.H()[size_t(e)];
  return l;
}

// L = Σ G ⊙ H(z). The float64 backward against central differences of the float64
// forward (step 1e-5: truncation ~1e-10 · |L'''|, rounding ~1e-16/1e-5, so 1e-7
// relative is a wide margin), and the library's fp32 backward (every family,
// from z and from the caches) against the differences within grad_bound: the
// differences are the exact gradient to ~1e-9, far inside the fp32 bound.
TEST(SinkhornFiniteDifferences, Float64BackwardAndLibraryBackwardMatchCentralDifferences) {
  for (int64_t N : {1, 2, 3, 4, 7})
    for (int64_t I : {1, 3, 20})
      for (double eps : {1e-6, 0.05}) {
        SCOPED_TRACE("N " + std::to_string(N) + " I " + std::to_string(I) + " eps " + std::to_string(eps));
        SCase c;
        c.N = N, c.I = I, c.S = 1, c.eps = eps, c.pitch = N, c.seed = uint64_t(N * 100 + I);
        Bag b = make_bag(c);
        const std::vector<double> z = b["z"].values(), G = b["grad_h_res"].values();
        const double e32 = double(float(eps));
        std::vector<double> fd(size_t(N * N));
        for (int64_t e = 0; e < N * N; ++e) {
          const double h = 1e-5;
          std::vector<double> zp = z, zm = z;
          zp[size_t(e)] += h, zm[size_t(e)] -= h;
          fd[size_t(e)] = (fd_loss(zp, G, N, I, e32) - fd_loss(zm, G, N, I, e32)) / (2 * h);
        }
        const std::vector<double> analytic = sinkhorn_backward64(sinkhorn_forward64(z.data(), N, I, e32), G.data());
        double scale = 0;
        for (double v : fd) scale = std::max(scale, std::fabs(v));
        if (N == 1) {  // a 1x1 softmax is constant: the gradient is exactly 0
          for (double v : analytic) EXPECT_EQ(v, 0.0);
          scale = 1;
        }
        for (int64_t e = 0; e < N * N; ++e)
          EXPECT_NEAR(analytic[size_t(e)], fd[size_t(e)], 1e-7 * scale) << "float64 backward, entry " << e;
        for (mhc::Isa isa : available_families()) {
          Bag r = make_bag(c);
          ASSERT_TRUE(forward(r, c, options_for(isa)).ok());
          ASSERT_TRUE(backward_from_caches(r, options_for(isa)).ok());
          ASSERT_TRUE(backward_from_z(r, c, options_for(isa)).ok());
          const std::vector<double> got = r["grad_z"].values();
          EXPECT_EQ(r["grad_z"].raw(), r["grad_z_from_z"].raw()) << family_name(isa);
          double spread = 0;
          for (int64_t i = 0; i < N; ++i)
            for (int64_t j = 0; j < N; ++j)
              for (int64_t jj = 0; jj < N; ++jj) spread = std::max(spread, std::fabs(z[size_t(i * N + j)] - z[size_t(i * N + jj)]));
          double err = normwise_relative_error(got, fd);
          if (N == 1) err = max_abs_error(got, fd);
          EXPECT_LE(err, grad_bound(c, spread)) << family_name(isa) << ": the fp32 backward vs the differences";
        }
      }
}

}  // namespace
}  // namespace mhc_test::layer
