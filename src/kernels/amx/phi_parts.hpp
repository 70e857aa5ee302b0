// phi.gamma in three exact bf16 parts for the AMX forward's tiles: packed once per
// call as B tiles (pairs of columns, VNNI), or row by row as A tiles (calls of a
// few tokens). Each part is the truncation to 8 significant bits of what the
// previous ones left, so hi + mid + lo is phi.gamma exactly, and a product of a
// bf16 x with each part is exact in fp32.
#pragma once

#include <cstdint>

#include "core/problem.hpp"
#include "kernels/amx/geometry.hpp"

namespace mhc::kernels::amx {

// Packs k steps [s0, s1): per step, part and C tile, 16 rows (pairs of columns)
// x width columns (rows of phi) of bf16 pairs. False if phi.gamma there is not finite.
bool pack_steps(const core::ForwardProblem& p, const Geometry& g, int64_t s0, int64_t s1, uint32_t* packed);

// The rows of C tile `tile` at step s as A tile rows: a + (part * 16 + r) * 32
// (rows past F left as they are). False if one of them is not finite.
bool stage_phi_rows(const core::ForwardProblem& p, const Geometry& g, int tile, int64_t s, uint16_t* a);

}  // namespace mhc::kernels::amx
