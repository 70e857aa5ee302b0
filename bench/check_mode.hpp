// mhc-bench --check: the benchmarked problems through the operators' test drivers
// (tests/driver/: every face on every family, against the float64 references)
// instead of the clock, as benchdnn's correctness mode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "operator_cases.hpp"

namespace mhc_bench {

// The shapes' MhcPre forward (and backward) and the named layer cases ("post",
// "sinkhorn"), each at its own T or at most `max_tokens` tokens (0: no cap).
// Prints a line per problem; returns 0 when every problem passed, 1 otherwise.
int run_checks(const std::vector<ShapeSpec>& shapes, const std::vector<std::string>& layer_cases,
               int64_t max_tokens);

}  // namespace mhc_bench
