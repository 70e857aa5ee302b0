// Portable MhcPre: plain C++ in fp32 (SPEC §2), any architecture.
#include <cmath>

#include "kernels/common/token_math.hpp"
#include "kernels/tables.hpp"
#include "kernels/portable/blocked_sum.hpp"

namespace mhc::kernels::portable {

namespace {

int64_t forward_scratch_floats(const core::Dims& d) {  // v, u = v*gamma, m, h_pre
  return 2 * align16(d.K) + align16(d.F) + align16(d.N);
}

void forward_tokens(const ForwardItem& item, int64_t t0, int64_t t1) {
  const core::ForwardProblem& p = *item.problem;
  const core::Dims& d = p.dims;
  float* v = item.scratch;          // [K] token as fp32
  float* u = v + align16(d.K);      // [K] v * gamma
  float* m = u + align16(d.K);      // [F] h_mix
  float* h_pre = m + align16(d.F);  // [N]
  const float* phi = static_cast<const float*>(p.phi.data);
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t j = 0; j < d.D; ++j) v[n * d.D + j] = p.x.load(p.x.at(t, n, j));
    const float* gamma_applied = v;
    if (p.gamma.present()) {
      for (int64_t k = 0; k < d.K; ++k) u[k] = v[k] * p.gamma.load(p.gamma.at(k / d.D, k % d.D));
      gamma_applied = u;
    }
    for (int64_t f = 0; f < d.F; ++f)
      m[f] = dot(gamma_applied, phi + f * p.phi.stride[2], p.phi.stride[3], d.K);
    common::forward_token_finish(p, t, sum_of_squares(v, d.K), m, h_pre);
    for (int64_t j = 0; j < d.D; ++j) {
      float acc = 0.0f;  // n ascending, in fp32 (SPEC §2)
      for (int64_t n = 0; n < d.N; ++n) acc += h_pre[n] * v[n * d.D + j];
      p.h_in.store(p.h_in.at(t, 0, j), acc);
    }
  }
}

}  // namespace

const PreForwardKernels kPreForward = {.scratch_floats = forward_scratch_floats, .tokens = forward_tokens};

}  // namespace mhc::kernels::portable
