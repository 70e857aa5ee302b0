// SPEC §10 as readable float64 code, one token at a time: the oracle the tests,
// the fuzzers' replays and the main job hold the Sinkhorn's families to. The
// families themselves run SPEC's fp32 steps (kernels/fp32_steps), whose bits SPEC
// fixes; this is the exact value those steps approximate.
#pragma once

#include <cstdint>
#include <vector>

namespace mhc::kernels::reference {

// One token's forward with every intermediate: P[k] is the matrix after step k
// (P[0] the row softmax, without eps), div[k] step k's divisors (div[0] the
// softmax's row sums Σ_j exp(z_ij − max_j z_ij)). H = P[2I−1].
struct Sinkhorn64 {
  int64_t N = 0, I = 0;
  std::vector<std::vector<double>> P, div;
  const std::vector<double>& H() const { return P.back(); }
};

// z is [N][N] row-major; eps as the library takes it (callers round it to fp32).
Sinkhorn64 sinkhorn_forward(const double* z, int64_t N, int64_t I, double eps);

// grad_z [N][N] from grad_H [N][N]: the reverse of the 2I steps, then the
// softmax's Jacobian.
std::vector<double> sinkhorn_backward(const Sinkhorn64& forward, const double* grad_H);

}  // namespace mhc::kernels::reference
