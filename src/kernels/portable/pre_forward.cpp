// Portable MhcPre: plain C++ in fp32 (SPEC §2), any architecture.
#include <cmath>

#include "kernels/common/hf32.hpp"
#include "kernels/common/token_math.hpp"
#include "kernels/tables.hpp"
#include "kernels/portable/blocked_sum.hpp"

namespace mhc::kernels::portable {

namespace {

int64_t forward_scratch_floats(const PreShape& d) {  // v, u = v*gamma, m, h_pre
  return 2 * align16(d.K) + align16(d.F) + align16(d.N);
}

void forward_tokens(const ForwardItem& item, int64_t t0, int64_t t1) {
  const ForwardOperands& o = *item.operands;
  const PreShape& d = o.shape;
  float* v = item.scratch;          // [K] token as fp32
  float* u = v + align16(d.K);      // [K] v * gamma
  float* m = u + align16(d.K);      // [F] h_mix
  float* h_pre = m + align16(d.F);  // [N]
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t j = 0; j < d.D; ++j) v[n * d.D + j] = core::load_element(o.x.data, d.x_dtype, o.x.at(t, n) + j);
    const float* gamma_applied = v;
    if (o.gamma.present() || d.hf32) {
      for (int64_t k = 0; k < d.K; ++k) u[k] = o.gamma.present() ? v[k] * o.gamma.row(k / d.D)[k % d.D] : v[k];
      if (d.hf32) common::round_hf32(u, d.K);  // the product's operand
      gamma_applied = u;
    }
    for (int64_t f = 0; f < d.F; ++f) m[f] = dot(gamma_applied, o.phi.row(f), 1, d.K);
    common::forward_token_finish(o, t, sum_of_squares(v, d.K), m, h_pre);
    for (int64_t j = 0; j < d.D; ++j) {
      float acc = 0.0f;  // n ascending, in fp32 (SPEC §2)
      for (int64_t n = 0; n < d.N; ++n) acc += h_pre[n] * v[n * d.D + j];
      core::store_element(o.h_in.data, d.x_dtype, o.h_in.at(t, 0) + j, acc);
    }
  }
}

}  // namespace

const PreForwardKernels kPreForward = {.scratch_floats = forward_scratch_floats, .tokens = forward_tokens};

}  // namespace mhc::kernels::portable
