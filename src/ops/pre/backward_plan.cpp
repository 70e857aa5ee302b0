// MhcPreBackward's plan (backward_plan.hpp).
#include "ops/pre/backward_plan.hpp"

#include <algorithm>

namespace mhc::ops::pre::backward {

using kernels::align16;
using kernels::ceil_div;

namespace {

// Offsets (floats) of the buffers in workspace order, each a multiple of 16.
struct Offsets {
  int64_t scratch, chunk[kernels::kLanes], G, c, gz, alpha_terms;
  int64_t phi_total[kernels::kLanes], gamma_total[kernels::kLanes], end;
};

Offsets offsets(const Plan& plan, const kernels::PreShape& d) {
  Offsets o{};
  int64_t at = 0;
  auto take = [&](int64_t floats) {
    const int64_t start = at;
    at += align16(floats);
    return start;
  };
  o.scratch = take(plan.threads * plan.scratch_floats);
  for (int lane = 0; lane < plan.lanes; ++lane) o.chunk[lane] = take(plan.chunk_floats);
  o.G = take(d.T * d.F);
  o.c = take(d.T);
  o.gz = take(d.T * d.F);
  o.alpha_terms = take(d.T * 3);
  for (int lane = 0; lane < plan.lanes; ++lane) o.phi_total[lane] = take(d.F * d.K);  // the totals last,
  for (int lane = 0; lane < plan.lanes; ++lane) o.gamma_total[lane] = take(d.K);      // one run to zero
  o.end = at;
  return o;
}

}  // namespace

Plan make_plan(const kernels::PreBackwardKernels& kernels, const kernels::PreShape& d, int threads) {
  Plan plan;
  if (kernels.serial) return plan;  // the kernels run whole, with memory of their own
  plan.chunks = ceil_div(d.T, kernels::kTokensPerChunk);
  plan.column_items_per_stream = ceil_div(d.D, kernels::kColumnsPerItem);
  plan.column_items = d.N * plan.column_items_per_stream;
  // More workers than column items would only wait at the barriers.
  plan.threads = int(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, plan.column_items)));
  plan.scratch_floats = align16(kernels.scratch_floats(d));
  plan.lanes = int(std::clamp<int64_t>(plan.chunks, 1, kernels::kLanes));
  plan.chunk_floats = align16(kernels.chunk_floats(d));
  plan.workspace_bytes = size_t(offsets(plan, d).end) * sizeof(float);
  return plan;
}

Workspace lay_out(const Plan& plan, const kernels::PreShape& d, void* workspace) {
  Workspace w;
  float* base = static_cast<float*>(workspace);
  if (base == nullptr) return w;
  const Offsets o = offsets(plan, d);
  w.scratch_base = base + o.scratch;
  w.scratch_floats = plan.scratch_floats;
  kernels::BackwardBuffers& b = w.buffers;
  b.lanes = plan.lanes;
  b.G = base + o.G;
  b.c = base + o.c;
  b.gz = base + o.gz;
  b.alpha_terms = base + o.alpha_terms;
  for (int lane = 0; lane < plan.lanes; ++lane) {
    b.chunk[lane] = base + o.chunk[lane];
    b.phi_total[lane] = base + o.phi_total[lane];
    b.gamma_total[lane] = base + o.gamma_total[lane];
  }
  return w;
}

}  // namespace mhc::ops::pre::backward
