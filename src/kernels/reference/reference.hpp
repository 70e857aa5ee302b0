// The reference: SPEC §2-§3 as readable float64 code over contiguous arrays.
// Tests use it directly (float64 in, float64 out: finite differences need that)
// and through pre_forward/pre_backward below, which gather a problem's strided
// tensors into these arrays and store the results in the output dtypes.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.hpp"

namespace mhc::kernels::reference {

// Contiguous float64 operands. Per-token arrays are [T, ...] row-major; phi is
// [F, K]; gamma is [K] or empty (= ones); alpha has 2 or 3 entries.
struct ForwardInputs64 {
  core::Dims dims;  // T, N, D, K, F, R, two_entry_alpha are used
  std::vector<double> x, phi, alpha, bias, gamma;
  double norm_eps = 1e-6, hc_eps = 1e-6;
};
struct ForwardOutputs64 {
  std::vector<double> h_in, h_post, h_res, inv_rms, h_mix, h_pre;  // [T,D] [T,N] [T,R] [T] [T,F] [T,N]
  std::vector<double> h_in_magnitude;  // [T,D] sum_n |h_pre[n] v[n,d]|: the scale of h_in's rounding
};
ForwardOutputs64 forward(const ForwardInputs64& in);

struct BackwardInputs64 {
  core::Dims dims;
  std::vector<double> x, phi, alpha, gamma;
  std::vector<double> grad_h_in, grad_h_post, grad_h_res;  // [T,D] [T,N] [T,R]
  std::vector<double> inv_rms, h_mix, h_pre, h_post;       // caches of the forward
  std::vector<double> grad_x_post;                         // [T,K] or empty (= 0)
  double hc_eps = 1e-6;
};
struct BackwardOutputs64 {
  std::vector<double> grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma;  // grad_gamma always [K]
  // [T,K] |h_pre grad_h_in| + |gamma gu| + |c v| + |grad_x_post|: the scale of grad_x's rounding
  std::vector<double> grad_x_magnitude;
};
BackwardOutputs64 backward(const BackwardInputs64& in);

// The same over a validated problem's strided tensors, results stored in the
// output dtypes: every token, or tokens [t0, t1) of the forward. Unlike the
// production kernels these allocate their own memory.
void pre_forward(const core::ForwardProblem& problem);
void pre_forward_tokens(const core::ForwardProblem& problem, int64_t t0, int64_t t1);
void pre_backward(const core::BackwardProblem& problem);

}  // namespace mhc::kernels::reference
