// The decode rows of mhc-bench (shape "decode"): MhcPre's forward at T = 1, 4,
// 16, 32 and 64 tokens, N = 4, D = 4096 and 7168, bf16 with gamma, timed through
// the C++ API and through aclnn's two phases (GetWorkspaceSize, then the call:
// an inference loop runs both every step), and the engines' pre (SGLang's
// hc_pre_fused_cpu: MhcPreSinkhorn, no gamma, 20 Sinkhorn iterations) through the
// C++ API on the same phi, each beside a floor probe: the row's
// own phi streamed once through fp32 FMAs against one token's u, on persistent
// pinned threads that split K, timed in blocks in turn with the row's calls so
// that their ratio is taken side by side. The calling thread is pinned to the
// first CPU throughout (the probe's worker 0; the libraries' pools are started
// before, so their helpers run on the other CPUs).
#pragma once

#include <cstdint>
#include <vector>

#include "floor_pass.hpp"
#include "operator_cases.hpp"

namespace mhc_bench {

struct DecodeFloor {
  int64_t D = 0;
  Timing timing;  // one pass of the T = 1 row's phi, all threads, in its fastest row blocking
  FloorBlocking blocking = FloorBlocking::narrow_rows;  // which (floor_pass.hpp)
};

struct DecodeRow {
  ShapeSpec shape;
  OperatorCost cost;
  double fma_bound_ms = 0;  // 2 T F K / the FMA peak
  Timing cpp, aclnn, engine_pre, engine_pre_prepared;  // the last with options.prepared
  double floor_ms = 0;      // the probe's median over this row's phi, timed beside it
};

struct DecodeResults {
  std::vector<DecodeFloor> floors;
  std::vector<DecodeRow> rows;
};

// The rows and floors at `threads` threads; fma_peak_gflops for the FMA bound.
DecodeResults run_decode_cases(int threads, int runs, double min_seconds, double fma_peak_gflops);

}  // namespace mhc_bench
