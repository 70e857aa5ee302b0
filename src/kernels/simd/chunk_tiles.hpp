// Where the backward keeps a chunk's x (the v tile, in x's dtype) and gu (then y,
// fp32), shared by the workers: [stream n][item of n][token][strip of the item][lane].
// The column phase walks a strip's tokens at a fixed stride (a token's row of the
// block, 0.5-1 KiB), and the row phases walk a token's strips through contiguous
// runs: both patterns the hardware prefetchers follow. (With [strip][token][lane],
// the row phases stepped 4 KiB per vector and every load missed.) A token's row in
// a block is padded by a cache line, so that the rows of tokens a few apart do not
// alias in L1. Plain C++ (no Highway): the AMX family works on the same tiles.
#pragma once

#include <cstdint>

#include "kernels/kernels.hpp"

namespace mhc::kernels::simd {

inline constexpr int64_t kTokenFloats = plan::kColumnsPerItem + 16;
inline constexpr int64_t kBlockFloats = plan::kTokensPerChunk * kTokenFloats;

struct Tiles {
  int64_t L;                  // fp32 lanes of a strip
  int64_t strips_per_block;   // plan::kColumnsPerItem / L
  int64_t blocks_per_stream;
  int64_t v_row;  // elements of a token's row in the v tile: the item's columns and a cache line
  char* v;        // in x's dtype
  float* gu;      // gu, then y = gamma*gu + c*v
  // The element offset in v, and the address in gu, of strip s (counted in stream n) of the chunk's token t.
  int64_t v_at(int64_t n, int64_t s, int64_t t) const {
    return ((n * blocks_per_stream + s / strips_per_block) * plan::kTokensPerChunk + t) * v_row +
           (s % strips_per_block) * L;
  }
  float* gu_at(int64_t n, int64_t s, int64_t t) const {
    return gu + (n * blocks_per_stream + s / strips_per_block) * kBlockFloats + t * kTokenFloats +
           (s % strips_per_block) * L;
  }
};

inline int64_t tile_floats(const core::Dims& d) {  // the v tile is sized for fp32 x, the widest
  return d.N * plan::ceil_div(d.D, plan::kColumnsPerItem) * kBlockFloats + 16;  // + a line between v and gu
}

inline int64_t chunk_tiles_floats(const core::Dims& d) { return 2 * tile_floats(d); }

inline Tiles tiles_of(const BackwardArgs& args, int64_t lanes) {
  const core::Dims& d = args.problem->dims;
  float* base = args.chunk_buffers();
  const int64_t element_bytes = core::element_size(args.problem->x.dtype);
  return {lanes, plan::kColumnsPerItem / lanes, plan::ceil_div(d.D, plan::kColumnsPerItem),
          plan::kColumnsPerItem + 64 / element_bytes, reinterpret_cast<char*>(base), base + tile_floats(d)};
}

}  // namespace mhc::kernels::simd
