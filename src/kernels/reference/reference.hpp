// The reference: SPEC §2-§3 as readable float64 code over contiguous arrays.
// Tests use it directly (float64 in, float64 out: finite differences need that)
// and through pre_forward_tokens/pre_backward below, which gather a call's
// operands into these arrays and store the results in the output dtypes.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/pre_backward.hpp"
#include "kernels/pre_forward.hpp"

namespace mhc::kernels::reference {

// Contiguous float64 operands. Per-token arrays are [T, ...] row-major; phi is
// [F, K]; gamma is [K] or empty (= ones); alpha has 1, 2 or 3 entries.
struct ForwardInputs64 {
  PreShape dims;  // x_dtype is not used
  std::vector<double> x, phi, alpha, bias, gamma;
  double norm_eps = 1e-6, hc_eps = 1e-6;
  bool hf32 = false;  // the product of HF32 operands: hf32(phi) . hf32(fp32(v * gamma)) (SPEC §7)
  // Single pass (SPEC §14): h_in collapses with pre_mix [T,N] when given, or is
  // stream 0 when select_first_stream; otherwise with h_pre (§2).
  std::vector<double> pre_mix;
  bool select_first_stream = false;
};
struct ForwardOutputs64 {
  std::vector<double> h_in, h_post, h_res, inv_rms, h_mix, h_pre;  // [T,D] [T,N] [T,R] [T] [T,F] [T,N]
  std::vector<double> h_in_magnitude;  // [T,D] sum_n |h_pre[n] v[n,d]|: the scale of h_in's rounding
};
ForwardOutputs64 forward(const ForwardInputs64& in);

struct BackwardInputs64 {
  PreShape dims;  // x_dtype is not used
  std::vector<double> x, phi, alpha, gamma;
  std::vector<double> grad_h_in, grad_h_post, grad_h_res;  // [T,D] [T,N] [T,R]
  std::vector<double> inv_rms, h_mix, h_pre, h_post;       // caches of the forward
  std::vector<double> grad_x_post;                         // [T,K] or empty (= 0)
  double hc_eps = 1e-6;
  // The products of HF32 operands (SPEC §7): gu = hf32(phi)^T hf32(G) and
  // grad_phi = sum_t hf32(G_t) hf32(fp32(v_t * gamma))^T, G rounded to fp32 first.
  bool hf32 = false;
  // Single pass (SPEC §14): grad_x's collapse term takes pre_mix [T,N] (empty: h_pre);
  // with grad_h_pre [T,N] given, g_pre is grad_h_pre and sum_d v grad_h_in is grad_pre_mix.
  std::vector<double> pre_mix, grad_h_pre;
  bool grad_h_pre_adds = false;  // g_pre = the sums + grad_h_pre (V4's h_pre as an output)
};
struct BackwardOutputs64 {
  std::vector<double> grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma;  // grad_gamma always [K]
  std::vector<double> grad_pre_mix;  // [T,N] sum_d v grad_h_in (with grad_h_pre given)
  // [entries] sum_t sum_f |gz w| over each branch: the scale of grad_alpha's rounding
  // (its terms may cancel to far below it)
  std::vector<double> grad_alpha_magnitude;
  // [T,K] |w grad_h_in| (w: h_pre or pre_mix) + |gamma gu| + |c v| + |grad_x_post|: the scale of grad_x's rounding
  std::vector<double> grad_x_magnitude;
};
BackwardOutputs64 backward(const BackwardInputs64& in);

// The same over a call's operands, results stored in the output dtypes (float64
// rounded to fp32 first): tokens [t0, t1) of the forward, or the whole backward.
// Unlike the other families' kernels these allocate their own memory.
void pre_forward_tokens(const ForwardOperands& operands, int64_t t0, int64_t t1);
void pre_backward(const BackwardOperands& operands);

}  // namespace mhc::kernels::reference
