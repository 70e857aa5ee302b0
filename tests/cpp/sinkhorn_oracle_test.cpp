// MhcSinkhorn and MhcSinkhornBackward (SPEC §10) against float64, through every face
// on every kernel family this build and CPU run, in one process (driver/sinkhorn.hpp):
//   - H, both caches and grad_z within the bounds of driver/sinkhorn.hpp of the
//     float64 reference (kernels/reference/sinkhorn.hpp);
//   - the backward from the caches == from z, bitwise; every face and family the same bits;
//   - float64 central differences of the reference's forward against the
//     reference's backward and against the library's fp32 backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "driver_check.hpp"
#include "sinkhorn_util.hpp"

namespace mhc_test::layer {
namespace {

// ------------------------------------------------------------------ agreement with float64

class SinkhornOracle : public ::testing::TestWithParam<SCase> {};

TEST_P(SinkhornOracle, EveryFaceAndFamilyWithinTheBoundsOfFloat64AndTheSameBits) {
  expect_driver_passes(driver::SinkhornDriver(), GetParam(), GetParam().name());
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
  const auto f = mhc::kernels::reference::sinkhorn_forward(z.data(), N, I, eps);
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
        const std::vector<double> analytic =
            mhc::kernels::reference::sinkhorn_backward(mhc::kernels::reference::sinkhorn_forward(z.data(), N, I, e32), G.data());
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
          const double spread = driver::row_spread(z.data(), N);
          double err = normwise_relative_error(got, fd);
          if (N == 1) err = max_abs_error(got, fd);
          EXPECT_LE(err, driver::sinkhorn_grad_bound(c, spread)) << family_name(isa) << ": the fp32 backward vs the differences";
        }
      }
}

}  // namespace
}  // namespace mhc_test::layer
