// MhcPreBackward's driver: for each chunk of tokens, phase 1 (per-token
// statistics, tokens split over the workers), phase 2 (column items split over
// the workers) and, for kernels that have it, phase 3 (grad_x row by row), with a
// barrier after each; the chunk's data stays in cache between the phases.
// Chunks are dealt to plan.lanes lanes in turn; with two or more workers the
// lanes run side by side, each on its own group of workers (lane l: workers l,
// l + lanes, ...), so that one lane's memory-bound phases overlap the other's
// column phase. Which worker does what never changes a result: a chunk's sums go
// to its lane's totals in chunk order whatever the grouping.
#include <algorithm>
#include <optional>

#include "ops/call_resources.hpp"
#include "ops/isa.hpp"
#include "ops/pre_backward/plan.hpp"
#include "ops/pre_backward/pre_backward.hpp"
#include "ops/staging.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::pre_backward {
namespace {

const kernels::PreBackwardKernels& kernels_of(const core::BackwardProblem& problem) {
  return *implementation(problem.isa).pre_backward;
}

// The operands the kernels read or write row by row: staged when their rows are
// not unit-stride (staging.hpp).
Staging staging_of(core::BackwardProblem* p) {
  Staging staging;
  staging.add(&p->x, false);
  staging.add(&p->grad_h_in, false);
  staging.add(&p->grad_x_post, false);
  staging.add(&p->phi, false);
  staging.add(&p->gamma, false);
  staging.add(&p->grad_x, true);
  return staging;
}

void run_phases(const kernels::PreBackwardKernels& kernels, const core::BackwardProblem& problem, const Plan& plan,
                const Workspace& w) {
  const core::Dims& d = problem.dims;
  const kernels::BackwardBuffers& buffers = w.buffers;
  std::fill(buffers.phi_total[0], buffers.gamma_total[plan.lanes - 1] + d.K, 0.0f);

  std::optional<runtime::Barrier> lane_barriers[kernels::kLanes];
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
      const kernels::BackwardStep step{&problem, &buffers, int(chunk % lanes), w.scratch(worker)};
      const int64_t c0 = chunk * kernels::kTokensPerChunk, c1 = std::min(d.T, c0 + kernels::kTokensPerChunk);
      int64_t t0, t1;
      share(c1 - c0, &t0, &t1);
      if (t1 > t0) kernels.token_stats(step, c0, c0 + t0, c0 + t1);
      group_barrier.arrive_and_wait();
      for (int64_t i = i0; i < i1; ++i) kernels.columns(step, c0, c1, plan.column_item(i, d.D));
      group_barrier.arrive_and_wait();
      if (kernels.rows) {
        if (t1 > t0) kernels.rows(step, c0, c0 + t0, c0 + t1);
        group_barrier.arrive_and_wait();
      }
    }
    barrier.arrive_and_wait();  // every lane's totals are complete
    const kernels::BackwardStep step{&problem, &buffers, 0, w.scratch(worker)};
    const int64_t f0 = plan.column_items * worker / workers, f1 = plan.column_items * (worker + 1) / workers;
    for (int64_t i = f0; i < f1; ++i) kernels.finish_columns(step, plan.column_item(i, d.D));
  });
  kernels.finish_sums({&problem, &buffers, 0, w.scratch(0)});
}

}  // namespace

size_t workspace_bytes(const core::BackwardProblem& problem, int num_threads) {
  core::BackwardProblem staged = problem;
  const Plan plan = make_plan(kernels_of(problem), problem, resolve_threads(num_threads));
  return staging_of(&staged).workspace_bytes(plan.workspace_bytes);
}

Status run(const core::BackwardProblem& original, void* workspace, size_t workspace_bytes, int num_threads) {
  const kernels::PreBackwardKernels& kernels = kernels_of(original);
  const int threads = resolve_threads(num_threads);
  const Plan plan = make_plan(kernels, original, threads);
  core::BackwardProblem problem = original;
  Staging staging = staging_of(&problem);
  if (Status s = workspace_error(staging.workspace_bytes(plan.workspace_bytes), workspace_bytes, workspace); !s.ok())
    return s;
  staging.gather(workspace, plan.workspace_bytes, threads);
  if (kernels.serial) kernels.serial(problem);
  else run_phases(kernels, problem, plan, lay_out(plan, problem.dims, workspace));
  staging.scatter(threads);
  return {};
}

Status run_in_thread_workspace(const core::BackwardProblem& problem, int num_threads) {
  return in_thread_workspace(workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::pre_backward
