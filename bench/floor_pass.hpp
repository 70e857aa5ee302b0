// The decode floor probe's one pass: out[f*16 + lane] = the lane sums over columns
// [c0, c1) of phi[f][c] * u[c], for f < F, on the widest vectors the CPU has, a
// block of rows at a time: as many as the registers hold (all_registers), or
// kFloorNarrowRows, whose lines of phi's rows K floats apart share fewer L1 sets.
// Lanes beyond the vector width are left as they were; c1 - c0 must be a multiple
// of the vector's lanes (at most 16; K is a multiple of 16 at the decode shapes).
#pragma once

#include <cstdint>

namespace mhc_bench {
inline constexpr int kFloorNarrowRows = 6;
void floor_pass(const float* phi, int64_t F, int64_t K, const float* u, int64_t c0, int64_t c1, float* out,
                bool all_registers);
}
