// MhcPre's plan: how a call is cut into work items and how its workspace is laid
// out. Item boundaries depend on the problem only (never on the thread count),
// and no kernel's per-token arithmetic depends on where items begin, which makes
// results bitwise independent of threading and batch composition (SPEC §5).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/pre_forward.hpp"

namespace mhc::ops::pre::forward {

// Calls too short for this many items of the kernels' length are cut into this
// many shorter items of whole groups of kItemGranule tokens (the AMX family's
// pair of 16-token tiles), so that 2-4 workers share them (mhc-kernel-bench:
// PreForward/<family>/T:64 and T:256).
inline constexpr int64_t kItems = 4;
inline constexpr int64_t kItemGranule = 32;

struct Plan {
  int threads = 1;
  int64_t item_tokens = kernels::kTokensPerItem;
  int64_t items = 0;
  int64_t scratch_floats = 0;   // per worker, a multiple of 16
  int64_t prepared_bytes = 0;   // operands prepared once per call, a multiple of 64
  int prepare_parts = 0;        // parallel parts of that preparation (0: none)
  int scratch_workers = 1;      // scratches: one per worker of the items or of the preparation
  size_t workspace_bytes = 0;
};

// The workspace of one call as typed views: [scratch_workers][scratch] floats, the
// prepared operands, one finite flag per preparation part.
struct Workspace {
  float* scratch_base = nullptr;
  int64_t scratch_floats = 0;
  kernels::ForwardPrepared prepared;
  float* scratch(int worker) const { return scratch_base + worker * scratch_floats; }
};

// weights_prepared: the kernels' preparation comes made (a prepared form), none in the workspace.
Plan make_plan(const kernels::PreForwardKernels& kernels, const kernels::PreShape& shape, int threads,
               bool weights_prepared = false);
Workspace lay_out(const Plan& plan, void* workspace);

}  // namespace mhc::ops::pre::forward
