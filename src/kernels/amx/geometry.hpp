// The AMX forward's shapes: steps of k, parts, how F and the tokens are cut into
// tiles. Shared by the files of kernels/amx.
#pragma once

#include <cstdint>

#include "kernels/operands.hpp"

namespace mhc::kernels::amx {

inline constexpr int64_t kStep = 32;           // columns of k per tile step (one A tile row: 64 bytes of bf16)
inline constexpr int64_t kStepsPerBlock = 64;  // packed phi of one block: 64 x 3 x 16 x F dwords, ~300 KiB at F = 24
inline constexpr int kParts = 3;               // parts of phi.gamma: hi, mid, lo
inline constexpr int kMaxFTiles = 6;           // F <= 96: the C tiles of one 16-token tile fit the 8 tiles
inline constexpr int64_t kFewTokens = 16;      // tokens per B tile of a decode call (kDecodeTokens: no packing)

// Word i of the result is the high half of fp32 lane i of (lo, hi): the bf16 of column i.
alignas(64) inline constexpr uint16_t kHighHalves[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                                  33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};

// How F is cut into tiles of columns, and how many 16-token tiles share a B tile.
struct Geometry {
  int f_tiles;     // C tiles per 16-token tile
  int width;       // columns per C tile (<= 16)
  int token_tiles; // 16-token tiles per group (2 when the tiles fit: 2 x f_tiles C + 2 A + 1 B <= 8)
  int x_parts;     // bf16 parts of x: 1 (bf16), 2 (fp16: 11 significant bits, exactly hi + lo)
  int64_t steps;   // k steps of 32 columns, the last zero-padded
  int64_t m_stride() const { return int64_t(f_tiles) * width; }
  int64_t tile_dwords() const { return 16 * int64_t(width); }
  int64_t step_dwords() const { return kParts * f_tiles * tile_dwords(); }
};

inline Geometry geometry(const PreShape& d) {
  Geometry g;
  g.f_tiles = int((d.F + 15) / 16);
  g.width = int((d.F + g.f_tiles - 1) / g.f_tiles);
  g.x_parts = d.x_dtype == DType::fp16 ? 2 : 1;
  g.token_tiles = g.f_tiles <= 2 && g.x_parts == 1 ? 2 : 1;
  g.steps = (d.K + kStep - 1) / kStep;
  return g;
}

}  // namespace mhc::kernels::amx
