// The layer operators' benchmark cases (MhcPost, MhcSinkhorn): their buffers,
// cost model and timed calls, for mhc-bench's second table.
#pragma once

#include <string>
#include <vector>

#include "operator_cases.hpp"

namespace mhc_bench {

struct LayerCase {
  std::string name;    // "post", "sinkhorn", "post_pre", "unfused", "pre_sp", "pre", "pre+sk"
  std::string op;      // "forward", "backward", ...
  std::string shape;   // e.g. "T=4096 N=4 D=4096 bf16"
  OperatorCost cost;   // bytes: every input read once, every output written once
  Timing main_timing, one_thread_timing;
};

// The cases of `name` ("post": forward and backward at T=4096 N=4 D=4096 bf16;
// "sinkhorn": T=65536 N=4, 20 iterations, forward with caches, backward from
// them, and the forward without caches plus the backward recomputing it;
// "boundary": MhcPostPre's forward in both variants beside the unfused pair, and
// the single-pass backward beside MhcPreBackward + MhcSinkhornBackward, at T=4096
// N=4 D=4096 bf16).
std::vector<LayerCase> run_layer_cases(const std::string& name, int threads, int runs, double min_seconds);
bool is_layer_case(const std::string& name);

}  // namespace mhc_bench
