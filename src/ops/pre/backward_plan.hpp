// MhcPreBackward's plan: chunks of tokens dealt to lanes, column items, and the
// workspace as typed views. Chunk and item boundaries depend on the problem only
// (never on the thread count), which makes results bitwise independent of
// threading (SPEC §5).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/pre_backward.hpp"

namespace mhc::ops::pre::backward {

struct Plan {
  int threads = 1;
  int64_t chunks = 0;  // ceil(T / kTokensPerChunk)
  int lanes = 1;       // min(kLanes, chunks)
  int64_t column_items_per_stream = 0;
  int64_t column_items = 0;    // N * column_items_per_stream
  int64_t scratch_floats = 0;  // per worker, a multiple of 16
  int64_t chunk_floats = 0;    // a lane's chunk buffers, a multiple of 16
  size_t workspace_bytes = 0;

  kernels::ColumnItem column_item(int64_t i, int64_t D) const {
    const int64_t n = i / column_items_per_stream, d0 = (i % column_items_per_stream) * kernels::kColumnsPerItem;
    return {n, d0, d0 + kernels::kColumnsPerItem < D ? d0 + kernels::kColumnsPerItem : D};
  }
};

// The workspace of one call as typed views: every worker's scratch, then the buffers.
struct Workspace {
  float* scratch_base = nullptr;
  int64_t scratch_floats = 0;
  kernels::BackwardBuffers buffers;
  float* scratch(int worker) const { return scratch_base + worker * scratch_floats; }
};

Plan make_plan(const kernels::PreBackwardKernels& kernels, const kernels::PreShape& shape, int threads);
Workspace lay_out(const Plan& plan, const kernels::PreShape& shape, void* workspace);

}  // namespace mhc::ops::pre::backward
