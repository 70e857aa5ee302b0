// SPEC §11 as readable float64 code, one token at a time: the oracle the tests,
// the fuzzers' replays and the main job hold MhcPost's families to (the families
// run SPEC's fp32 order, kernels/fp32_steps). Each result comes with the sum of
// its terms' magnitudes, the scale of an fp32 evaluation's rounding.
#pragma once

#include <cstdint>
#include <vector>

namespace mhc::kernels::reference {

// One token's operands: x [N][D], H [N][N] (nullptr: the identity), h_out [D],
// h_post [N], grad_out [N][D].
struct PostToken64 {
  int64_t N = 0, D = 0;
  const double *x = nullptr, *H = nullptr, *h_out = nullptr, *h_post = nullptr;
};

struct PostForward64 {
  std::vector<double> out, out_magnitude;  // [N][D]
};
PostForward64 post_forward(const PostToken64& token);

struct PostBackward64 {
  std::vector<double> grad_x, grad_h_res, grad_h_out, grad_h_post;  // [N][D] [N][N] [D] [N]
  std::vector<double> grad_x_magnitude, grad_h_res_magnitude, grad_h_out_magnitude, grad_h_post_magnitude;
};
PostBackward64 post_backward(const PostToken64& token, const double* grad_out);

}  // namespace mhc::kernels::reference
