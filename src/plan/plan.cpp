#include "plan/plan.hpp"

#include <algorithm>

namespace mhc::plan {

ForwardPlan plan_forward(const core::ForwardProblem& p, int threads, int64_t scratch_floats, int64_t item_tokens,
                         int64_t shared_floats) {
  ForwardPlan plan;
  // A call of fewer tokens than kForwardItems full items gets shorter items (whole
  // groups of kForwardItemGranule tokens), so that its tokens still spread over
  // the workers: at most kForwardItems items then. From T only, never from the
  // thread count; and no family's per-token arithmetic depends on where items
  // begin (batch invariance), so the bits do not either.
  const int64_t wanted = round_up(ceil_div(p.dims.T, kForwardItems), kForwardItemGranule);
  plan.item_tokens = std::clamp<int64_t>(wanted, std::min(kForwardItemGranule, item_tokens), item_tokens);
  plan.token_items = ceil_div(p.dims.T, plan.item_tokens);
  // The once-per-call preparation is split over every thread asked for, even when
  // there are fewer items (decode: one token, one item).
  const int prepare_threads = int(std::max(1, threads));
  plan.threads = int(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, plan.token_items)));
  plan.scratch_per_worker = align16(scratch_floats);
  plan.off_shared = plan.threads * plan.scratch_per_worker;  // the preparation takes no scratch
  plan.prepare_parts = shared_floats > 0 ? prepare_threads : 0;
  plan.workspace_bytes = p.dims.T == 0 ? 0 : size_t(plan.off_shared + align16(shared_floats)) * 4;
  return plan;
}

BackwardPlan plan_backward(const core::BackwardProblem& p, int threads, int64_t scratch_floats,
                           int64_t chunk_floats) {
  const core::Dims& d = p.dims;
  BackwardPlan plan;
  plan.chunks = ceil_div(d.T, kTokensPerChunk);
  plan.column_items_per_stream = ceil_div(d.D, kColumnsPerItem);
  plan.column_items = d.N * plan.column_items_per_stream;
  // More workers than column items would only wait at the barriers.
  plan.threads = int(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, plan.column_items)));
  plan.scratch_per_worker = align16(scratch_floats);
  int64_t at = 0;
  auto region = [&](int64_t floats) { const int64_t o = at; at += align16(floats); return o; };
  plan.off_scratch = region(plan.threads * plan.scratch_per_worker);
  plan.lanes = int(std::clamp<int64_t>(plan.chunks, 1, kLanes));
  plan.chunk_stride = align16(chunk_floats);
  plan.off_chunk = region(plan.lanes * plan.chunk_stride);
  plan.off_G = region(d.T * d.F);
  plan.off_c = region(d.T);
  plan.off_gz = region(d.T * d.F);
  plan.off_alpha_terms = region(d.T * 3);
  plan.phi_total_stride = align16(d.F * d.K);
  plan.gamma_total_stride = align16(d.K);
  plan.off_phi_total = region(plan.lanes * plan.phi_total_stride);
  plan.off_gamma_total = region(plan.lanes * plan.gamma_total_stride);
  plan.workspace_bytes = size_t(at) * 4;
  return plan;
}

}  // namespace mhc::plan
