// The decode rows of mhc-bench (shape "decode"): MhcPre's forward at T = 1, 4,
// 16, 32 and 64 tokens, N = 4, D = 4096 and 7168, bf16 with gamma, timed through
// the C++ API and through aclnn's two phases (GetWorkspaceSize, then the call:
// an inference loop runs both every step), beside a floor probe per D: the T = 1
// row's phi streamed once through fp32 FMAs against one token's u, on persistent
// pinned threads that split K.
#pragma once

#include <cstdint>
#include <vector>

#include "floor_pass.hpp"
#include "operator_cases.hpp"

namespace mhc_bench {

struct DecodeFloor {
  int64_t D = 0;
  Timing timing;  // one pass of phi, all threads: the fastest row blocking
  FloorBlocking blocking = FloorBlocking::narrow_rows;  // which (floor_pass.hpp)
};

struct DecodeRow {
  ShapeSpec shape;
  OperatorCost cost;
  double fma_bound_ms = 0;  // 2 T F K / the FMA peak
  Timing cpp, aclnn;
  double floor_ms = 0;      // the probe's median at this D
};

struct DecodeResults {
  std::vector<DecodeFloor> floors;
  std::vector<DecodeRow> rows;
};

// The rows and floors at `threads` threads; fma_peak_gflops for the FMA bound.
DecodeResults run_decode_cases(int threads, int runs, double min_seconds, double fma_peak_gflops);

}  // namespace mhc_bench
