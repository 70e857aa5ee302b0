// MhcPre's plan (forward_plan.hpp).
#include "ops/pre/forward_plan.hpp"

#include <algorithm>

namespace mhc::ops::pre::forward {

using kernels::align16;
using kernels::ceil_div;
using kernels::round_up;

Plan make_plan(const kernels::PreForwardKernels& kernels, const kernels::PreShape& shape, int threads,
               bool weights_prepared) {
  Plan plan;
  const int64_t T = shape.T;
  if (kernels.serial) {  // one item on the calling thread
    plan.item_tokens = std::max<int64_t>(T, 1);
    plan.items = T > 0 ? 1 : 0;
    return plan;
  }
  const int64_t longest = kernels.item_tokens ? kernels.item_tokens(shape) : kernels::kTokensPerItem;
  // Shorter items (whole granules) for calls of fewer than kItems full items,
  // from T only, never from the thread count.
  const int64_t wanted = round_up(ceil_div(T, kItems), kItemGranule);
  plan.item_tokens = std::clamp<int64_t>(wanted, std::min(kItemGranule, longest), longest);
  plan.items = ceil_div(T, plan.item_tokens);
  // The preparation is split over every thread asked for, even when there are
  // fewer items (decode: one token, one item).
  const int prepare_threads = std::max(1, threads);
  plan.threads = int(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, plan.items)));
  plan.scratch_floats = align16(kernels.scratch_floats(shape));
  const int64_t prepared = kernels.prepared_bytes && !weights_prepared ? kernels.prepared_bytes(shape) : 0;
  plan.prepared_bytes = round_up(prepared, 64);
  plan.prepare_parts = prepared > 0 ? prepare_threads : 0;
  plan.scratch_workers = std::max(plan.threads, plan.prepare_parts);
  if (T > 0)
    plan.workspace_bytes = size_t(plan.scratch_workers * plan.scratch_floats) * sizeof(float) +
                           size_t(plan.prepared_bytes + plan.prepare_parts);
  return plan;
}

Workspace lay_out(const Plan& plan, void* workspace) {
  Workspace w;
  if (workspace == nullptr) return w;
  char* at = static_cast<char*>(workspace);
  w.scratch_base = reinterpret_cast<float*>(at);
  w.scratch_floats = plan.scratch_floats;
  at += plan.scratch_workers * plan.scratch_floats * int64_t(sizeof(float));
  w.prepared.data = plan.prepared_bytes > 0 ? at : nullptr;
  at += plan.prepared_bytes;
  w.prepared.finite = reinterpret_cast<uint8_t*>(at);
  w.prepared.parts = plan.prepare_parts;
  return w;
}

}  // namespace mhc::ops::pre::forward
