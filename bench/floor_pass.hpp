// The decode floor probe's one pass: out[f*16 + lane] = the lane sums over columns
// [c0, c1) of phi[f][c] * u[c], for f < F, on the widest vectors the CPU has, a
// block of rows at a time, in one of three blockings: kFloorNarrowRows rows over
// the whole range (their lines, K floats apart, share fewer L1 sets than more
// rows'), as many rows as the registers hold, or kFloorNarrowRows rows over
// chunks of kFloorChunkColumns columns, every block of rows over one chunk before
// the next (the library's slice order). Lanes beyond the vector width are left as
// they were; c1 - c0 must be a multiple of the vector's lanes (at most 16; K is a
// multiple of 16 at the decode shapes).
#pragma once

#include <cstdint>

namespace mhc_bench {
inline constexpr int kFloorNarrowRows = 6;
inline constexpr int64_t kFloorChunkColumns = 2048;
enum class FloorBlocking { narrow_rows, all_registers, chunked };
const char* floor_blocking_name(FloorBlocking blocking);
void floor_pass(const float* phi, int64_t F, int64_t K, const float* u, int64_t c0, int64_t c1, float* out,
                FloorBlocking blocking);
}
