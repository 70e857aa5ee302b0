// The operator layer's run phase: plan, then drive the kernel family's work
// items on the thread pool in phases separated by barriers.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/kernels.hpp"
#include "ops/operators.hpp"
#include "plan/plan.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops {
namespace {

int resolve_threads(int requested) {
  return requested > 0 ? requested : runtime::default_thread_count();
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

size_t forward_workspace_bytes(const core::ForwardProblem& problem, int num_threads) {
  if (kernels::reference_selected()) return 0;
  return plan::plan_forward(problem, resolve_threads(num_threads)).workspace_bytes;
}

size_t backward_workspace_bytes(const core::BackwardProblem& problem, int num_threads) {
  if (kernels::reference_selected()) return 0;
  return plan::plan_backward(problem, resolve_threads(num_threads)).workspace_bytes;
}

Status run_forward(const core::ForwardProblem& problem, void* workspace, size_t workspace_bytes,
                   int num_threads) {
  if (kernels::reference_selected()) {
    reference::pre_forward(problem);
    return {};
  }
  const plan::ForwardPlan plan = plan::plan_forward(problem, resolve_threads(num_threads));
  if (Status s = workspace_error(plan.workspace_bytes, workspace_bytes, workspace); !s.ok()) return s;
  const kernels::Family* family = kernels::selected_family();
  const kernels::ForwardArgs args{&problem, &plan, static_cast<float*>(workspace)};
  const int64_t T = problem.dims.T;
  runtime::parallel_for(plan.token_items, plan.threads, [&](int64_t item, int worker) {
    const int64_t t0 = item * plan::kTokensPerItem;
    family->forward_tokens(args, t0, std::min(T, t0 + plan::kTokensPerItem), worker);
  });
  return {};
}

Status run_backward(const core::BackwardProblem& problem, void* workspace, size_t workspace_bytes,
                    int num_threads) {
  if (kernels::reference_selected()) {
    reference::pre_backward(problem);
    return {};
  }
  const plan::BackwardPlan plan = plan::plan_backward(problem, resolve_threads(num_threads));
  if (Status s = workspace_error(plan.workspace_bytes, workspace_bytes, workspace); !s.ok()) return s;
  const kernels::Family* family = kernels::selected_family();
  const kernels::BackwardArgs args{&problem, &plan, static_cast<float*>(workspace)};
  const int64_t T = problem.dims.T, K = problem.dims.K;
  runtime::parallel_for(plan.token_items, plan.threads, [&](int64_t item, int worker) {
    const int64_t t0 = item * plan::kTokensPerItem;
    family->backward_token_stats(args, t0, std::min(T, t0 + plan::kTokensPerItem), worker);
  });
  runtime::parallel_for(plan.column_items, plan.threads, [&](int64_t item, int) {
    const int64_t k0 = item * plan::kColumnsPerItem;
    family->backward_columns(args, k0, std::min(K, k0 + plan::kColumnsPerItem));
  });
  family->backward_small_sums(args);
  return {};
}

}  // namespace mhc::ops
