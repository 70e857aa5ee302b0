// The AMX family: the SIMD family (AVX-512) with the F x K products on AMX-BF16
// tiles when x is bf16 (the forward's GEMM, the backward's column phase).
// Everything else is the SIMD family's.
#pragma once

#include <cstdint>

#include "kernels/kernels.hpp"

namespace mhc::kernels::amx {

// Tokens per forward item on the tile path: the packed phi (3 bf16 parts) is
// read from L3 once per item, so items are longer than the SIMD family's 32.
inline constexpr int64_t kItemTokens = 256;

// Whether the forward of this problem runs on tiles: bf16 x and F <= 96 (the C
// tiles of 16 tokens fit the eight tiles), from dtypes and dims only.
bool forward_uses_tiles(const core::ForwardProblem& p);

int64_t forward_item_tokens(const core::ForwardProblem& p);
int64_t forward_shared_floats(const core::ForwardProblem& p);
int64_t forward_scratch_floats(const core::Dims& d);
void forward_prepare(const ForwardArgs& args, int64_t part, int64_t parts);
void forward_tokens(const ForwardArgs& args, int64_t t0, int64_t t1, int worker);

// The backward: for bf16 x and F <= 80, two passes with the products on tiles
// (pre_backward.cpp); otherwise the SIMD family's chunked schedule.
int64_t backward_shared_floats(const core::BackwardProblem& p);
int64_t backward_chunk_floats(const core::BackwardProblem& p);
int64_t backward_blocks(const core::BackwardProblem& p, int threads);
void backward_block(const BackwardArgs& args, int64_t block, int64_t blocks, int worker);
int64_t backward_scratch_floats(const core::Dims& d);
void backward_prepare(const BackwardArgs& args, int64_t part, int64_t parts);
void backward_token_stats(const BackwardArgs& args, int64_t chunk0, int64_t t0, int64_t t1, int worker);

}  // namespace mhc::kernels::amx
