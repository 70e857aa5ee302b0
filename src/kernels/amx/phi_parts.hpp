// phi.gamma in three exact bf16 parts for the AMX forward's tiles: packed once per
// call as B tiles (pairs of columns, VNNI), or row by row as A tiles (calls of a
// few tokens). Each part is the truncation to 8 significant bits of what the
// previous ones left, so hi + mid + lo is phi.gamma exactly where |phi.gamma| >=
// 2^-110, and a product of a bf16 x with each part is exact in fp32. Below that
// a part falls in bf16's subnormal range, which the tiles flush to zero: such
// values lose less than 2^-126 (tests/kernels: AmxPhiParts).
#pragma once

#include <cstdint>

#include "kernels/amx/geometry.hpp"
#include "kernels/pre_forward.hpp"

namespace mhc::kernels::amx {

// Packs k steps [s0, s1): per step, part and C tile, 16 rows (pairs of columns)
// x width columns (rows of phi) of bf16 pairs. False if phi.gamma there is not finite.
bool pack_steps(const ForwardOperands& o, const Geometry& g, int64_t s0, int64_t s1, uint32_t* packed);

// 32 fp32 values split exactly into three bf16 parts: part p's 32 words at
// parts + 32 p, word i the part of values[i]. False if one of them is not finite.
bool split_step(const float* values, uint16_t* parts);

// The rows of C tile `tile` at step s as A tile rows: a + (part * 16 + r) * 32
// (rows past F left as they are). False if one of them is not finite.
bool stage_phi_rows(const ForwardOperands& o, const Geometry& g, int tile, int64_t s, uint16_t* a);

}  // namespace mhc::kernels::amx
