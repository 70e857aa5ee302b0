// The operator layer's run phase: plan, then drive the kernel family's work
// items on the thread pool in phases separated by barriers.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/kernels.hpp"
#include "ops/operators.hpp"
#include "plan/plan.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops {
namespace {

static_assert(kernels::kMaxPrepareParts >= runtime::kMaxThreads, "a prepare part per thread");

// The plans size per-worker scratch by this count, so it is capped where the pool is.
int resolve_threads(int requested) {
  return std::min(requested > 0 ? requested : runtime::default_thread_count(), runtime::kMaxThreads);
}

Status workspace_error(size_t needed, size_t given, const void* workspace) {
  if (needed > 0 && workspace == nullptr)
    return {StatusCode::null_pointer, ErrorKind::null,
            "workspace: " + std::to_string(needed) + " bytes needed, got a null pointer"};
  if (given < needed)
    return {StatusCode::invalid_argument, ErrorKind::value,
            "workspace: expected at least " + std::to_string(needed) + " bytes, got " +
                std::to_string(given)};
  if (reinterpret_cast<uintptr_t>(workspace) % 64 != 0)
    return {StatusCode::invalid_argument, ErrorKind::layout, "workspace: expected 64-byte alignment"};
  return {};
}

}  // namespace

const kernels::Family& family() { return *kernels::selected_family(); }

static plan::ForwardPlan plan_forward(const kernels::Family& kernels, const core::ForwardProblem& problem, int threads) {
  return plan::plan_forward(
      problem, resolve_threads(threads), kernels.forward_scratch_floats(problem.dims),
      kernels.forward_item_tokens ? kernels.forward_item_tokens(problem) : plan::kTokensPerItem,
      kernels.forward_shared_floats ? kernels.forward_shared_floats(problem) : 0);
}

size_t forward_workspace_bytes(const core::ForwardProblem& problem, int num_threads) {
  if (kernels::reference_selected()) return 0;
  return plan_forward(family(), problem, num_threads).workspace_bytes;
}

size_t backward_workspace_bytes(const core::BackwardProblem& problem, int num_threads) {
  if (kernels::reference_selected()) return 0;
  const kernels::Family& kernels = family();
  return plan::plan_backward(problem, resolve_threads(num_threads), kernels.backward_scratch_floats(problem.dims),
                             kernels.backward_chunk_floats(problem)).workspace_bytes;
}

Status run_forward(const core::ForwardProblem& problem, void* workspace, size_t workspace_bytes,
                   int num_threads) {
  if (kernels::reference_selected()) {
    reference::pre_forward(problem);
    return {};
  }
  const kernels::Family& kernels = family();
  const plan::ForwardPlan plan = plan_forward(kernels, problem, num_threads);
  if (Status s = workspace_error(plan.workspace_bytes, workspace_bytes, workspace); !s.ok()) return s;
  const kernels::ForwardArgs args{&problem, &plan, static_cast<float*>(workspace)};
  const int64_t T = problem.dims.T;
  if (T == 0) return {};
  if (plan.prepare_parts > 0)
    runtime::parallel_for(plan.prepare_parts, plan.prepare_parts,
                          [&](int64_t part, int) { kernels.forward_prepare(args, part, plan.prepare_parts); });
  runtime::parallel_for(plan.token_items, plan.threads, [&](int64_t item, int worker) {
    const int64_t t0 = item * plan.item_tokens;
    kernels.forward_tokens(args, t0, std::min(T, t0 + plan.item_tokens), worker);
  });
  return {};
}

// Backward: for each chunk of tokens, phase 1 (per-token statistics, tokens
// split over the workers), phase 2 (column items split over the workers) and,
// for families that have it, phase 3 (grad_x row by row, tokens split over the
// workers), with a barrier after each; the chunk's data stays in cache between
// the phases. Chunks are dealt to plan.lanes lanes in turn; with two or more
// workers the lanes run side by side, each on its own group of workers (lane l:
// workers l, l + lanes, ...), so that one lane's memory-bound phases overlap the
// other's column phase. Which worker does what never changes a result: a chunk's
// sums go to its lane's totals in chunk order whatever the grouping.
Status run_backward(const core::BackwardProblem& problem, void* workspace, size_t workspace_bytes,
                    int num_threads) {
  if (kernels::reference_selected()) {
    reference::pre_backward(problem);
    return {};
  }
  const kernels::Family& kernels = family();
  const plan::BackwardPlan plan =
      plan::plan_backward(problem, resolve_threads(num_threads), kernels.backward_scratch_floats(problem.dims),
                          kernels.backward_chunk_floats(problem));
  if (Status s = workspace_error(plan.workspace_bytes, workspace_bytes, workspace); !s.ok()) return s;
  const kernels::BackwardArgs args{&problem, &plan, static_cast<float*>(workspace)};
  const core::Dims& d = problem.dims;
  // Every lane's totals: the gamma totals follow the phi totals.
  std::fill(args.phi_total(0), args.gamma_total(plan.lanes - 1) + d.K, 0.0f);

  std::optional<runtime::Barrier> lane_barriers[plan::kLanes];
  runtime::parallel_region(plan.threads, [&](int worker, int workers, runtime::Barrier& barrier) {
    const int lanes = plan.lanes;
    const bool side_by_side = lanes > 1 && workers >= lanes;
    const int groups = side_by_side ? lanes : 1;
    const int group = worker % groups, rank = worker / groups;
    auto group_size = [&](int g) { return (workers - g + groups - 1) / groups; };
    if (worker == 0)
      for (int g = 0; g < groups; ++g) lane_barriers[g].emplace(group_size(g));
    barrier.arrive_and_wait();
    runtime::Barrier& group_barrier = *lane_barriers[group];
    const int members = group_size(group);
    auto share = [&](int64_t count, int64_t* begin, int64_t* end) {
      *begin = count * rank / members;
      *end = count * (rank + 1) / members;
    };
    int64_t i0, i1;
    share(plan.column_items, &i0, &i1);
    for (int64_t chunk = group; chunk < plan.chunks; chunk += groups) {
      kernels::BackwardArgs lane_args = args;
      lane_args.lane = int(chunk % lanes);
      const int64_t c0 = chunk * plan::kTokensPerChunk, c1 = std::min(d.T, c0 + plan::kTokensPerChunk);
      int64_t t0, t1;
      share(c1 - c0, &t0, &t1);
      if (t1 > t0) kernels.backward_token_stats(lane_args, c0, c0 + t0, c0 + t1, worker);
      group_barrier.arrive_and_wait();
      for (int64_t i = i0; i < i1; ++i)
        kernels.backward_columns(lane_args, c0, c1, plan.column_item(i, d.D), worker);
      group_barrier.arrive_and_wait();
      if (kernels.backward_rows) {
        if (t1 > t0) kernels.backward_rows(lane_args, c0, c0 + t0, c0 + t1, worker);
        group_barrier.arrive_and_wait();
      }
    }
    barrier.arrive_and_wait();  // every lane's totals are complete
    const int64_t f0 = plan.column_items * worker / workers, f1 = plan.column_items * (worker + 1) / workers;
    for (int64_t i = f0; i < f1; ++i) kernels.backward_finish_columns(args, plan.column_item(i, d.D));
  });
  kernels::backward_small_sums(args);
  return {};
}

}  // namespace mhc::ops
