// Where the AMX forward's A tiles of x come from: x itself (16 token rows at a
// fixed stride), or rows copied (the item's last tokens, the last step, a step
// that spans two streams apart in memory); fp16 x as bf16 parts. And the
// sums of squares formed from the same rows while they are in L1.
#pragma once

#include <cstdint>
#include <utility>

#include "kernels/amx/geometry.hpp"
#include "kernels/pre_forward.hpp"

namespace mhc::kernels::amx {

// The A tile rows of x for a kernel call; staging buffers belong to the worker.
struct XSource {
  const ForwardOperands* o;
  bool direct;          // each step's 32 columns contiguous in x
  int64_t token_bytes;  // x's token stride
  uint16_t* staging;    // [16][32] tiles: per token tile (bf16), per step parity and part (fp16)
  uint16_t* row_staging;  // [32]: one row of x copied (fp16)

  // Tile row pointer and stride for tokens [t, t + count) at step s.
  std::pair<const void*, int64_t> source(int64_t t, int64_t count, int64_t s, uint16_t* tile_staging) const;

  // Where every token's row of step s lies: in x, at column `column` of stream
  // `stream`, or (in_x false) to be copied by source(). Found once per step, so
  // each token's row costs no division.
  struct Step {
    bool in_x;
    int64_t stream, column;
  };
  Step step(int64_t s) const;
  // Token t's row at step s (whose Step is `at`): in x, or copied into row_copy.
  const void* row(const Step& at, int64_t t, int64_t s, uint16_t* row_copy) const {
    if (at.in_x) return static_cast<const char*>(o->x.data) + 2 * (o->x.at(t, at.stream) + at.column);
    return source(t, 1, s, row_copy).first;
  }

  // Token t's row at step s when the step's rows lie at token_bytes apart in x
  // itself (the other tokens' rows follow at that stride); nullptr when they must be copied.
  const char* direct_row(int64_t t, int64_t s) const;

  // fp16 x: tokens [t, t + count) at step s as rows of bf16 parts into hi and lo
  // ([16][32] each), their squares into sq rows of 16 (rows copied via row_staging).
  void stage_fp16(int64_t t, int64_t count, int64_t s, uint16_t* hi, uint16_t* lo, float* sq) const;
  // The same for rows [i0, i1) of a step whose rows lie in x token_bytes apart from `first` (direct_row).
  void stage_fp16_rows(const char* first, int64_t i0, int64_t i1, uint16_t* hi, uint16_t* lo, float* sq) const;
};

// Whether each step's 32 columns of a token are contiguous in x.
bool x_direct(const ForwardOperands& o);

// sq[i][lane] += the squares of the 32 bf16 of row i (rows at `stride` bytes).
void accumulate_squares(const void* base, int64_t stride, int64_t rows, float* sq);

// A row of 32 fp16 as two rows of bf16 parts, and its squares added into sq[16].
void fp16_parts(const void* row, uint16_t* hi_row, uint16_t* lo_row, float* sq);

}  // namespace mhc::kernels::amx
