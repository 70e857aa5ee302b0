// The decode floor probe's one pass: out[f*16 + lane] = the lane sums over columns
// [c0, c1) of phi[f][c] * u[c], for f < F, on the widest vectors the CPU has.
// Lanes beyond the vector width are left as they were; c1 - c0 must be a multiple
// of the vector's lanes (at most 16; K is a multiple of 16 at the decode shapes).
#pragma once

#include <cstdint>

namespace mhc_bench {
void floor_pass(const float* phi, int64_t F, int64_t K, const float* u, int64_t c0, int64_t c1, float* out);
}
