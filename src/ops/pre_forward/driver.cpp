// MhcPre's driver: the call's kernels from the registry, its plan, then the
// preparation's parts and the token items on the thread pool.
#include <algorithm>

#include "ops/call_resources.hpp"
#include "ops/isa.hpp"
#include "ops/pre_forward/plan.hpp"
#include "ops/pre_forward/pre_forward.hpp"
#include "ops/staging.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::pre_forward {
namespace {

static_assert(kernels::kMaxPrepareParts >= runtime::kMaxThreads, "a prepare part per thread");

const kernels::PreForwardKernels& kernels_of(const core::ForwardProblem& problem) {
  return *implementation(problem.isa).pre_forward;
}

// The operands the kernels read or write row by row: staged when their rows are
// not unit-stride (staging.hpp). None for an empty batch, of which nothing is read.
Staging staging_of(core::ForwardProblem* p) {
  Staging staging;
  if (p->dims.T == 0) return staging;
  staging.add(&p->x, false);
  staging.add(&p->gamma, false);
  staging.add(&p->phi, false);
  staging.add(&p->h_in, true);
  return staging;
}

}  // namespace

size_t workspace_bytes(const core::ForwardProblem& problem, int num_threads) {
  core::ForwardProblem staged = problem;
  const Plan plan = make_plan(kernels_of(problem), problem, resolve_threads(num_threads));
  return staging_of(&staged).workspace_bytes(plan.workspace_bytes);
}

Status run(const core::ForwardProblem& original, void* workspace, size_t workspace_bytes, int num_threads) {
  const kernels::PreForwardKernels& kernels = kernels_of(original);
  const int threads = resolve_threads(num_threads);
  const Plan plan = make_plan(kernels, original, threads);
  core::ForwardProblem problem = original;
  Staging staging = staging_of(&problem);
  if (Status s = workspace_error(staging.workspace_bytes(plan.workspace_bytes), workspace_bytes, workspace); !s.ok())
    return s;
  const int64_t T = problem.dims.T;
  if (T == 0) return {};
  staging.gather(workspace, plan.workspace_bytes, threads);
  const Workspace w = lay_out(plan, workspace);
  if (plan.prepare_parts > 0)
    runtime::parallel_for(plan.prepare_parts, plan.prepare_parts, [&](int64_t part, int) {
      w.prepared.finite[part] = kernels.prepare(problem, w.prepared.data, part, plan.prepare_parts) ? 1 : 0;
    });
  if (kernels.serial) {
    kernels.tokens({&problem, w.scratch_base, &w.prepared}, 0, T);
  } else {
    runtime::parallel_for(plan.items, plan.threads, [&](int64_t item, int worker) {
      const int64_t t0 = item * plan.item_tokens;
      kernels.tokens({&problem, w.scratch(worker), &w.prepared}, t0, std::min(T, t0 + plan.item_tokens));
    });
  }
  staging.scatter(threads);
  return {};
}

Status run_in_thread_workspace(const core::ForwardProblem& problem, int num_threads) {
  return in_thread_workspace(workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::pre_forward
