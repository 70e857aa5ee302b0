// MhcSinkhorn's driver: the call's kernels from the registry, the staging of
// tensors that do not fit the kernels' token rows, then items of tokens on the
// thread pool. Per token, so any split gives the same bits.
#include <algorithm>

#include "ops/call_resources.hpp"
#include "ops/isa.hpp"
#include "ops/kernel_views.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"
#include "ops/staging.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::sinkhorn {
namespace {

const kernels::SinkhornKernels& kernels_of(const core::SinkhornProblem& p) {
  return *implementation(p.isa).sinkhorn;
}

kernels::SinkhornShape shape_of(const core::SinkhornProblem& p) {
  return {.T = p.T, .N = p.N, .I = p.I, .eps = p.eps, .pitch = p.pitch};
}

struct Plan {
  int threads = 1;
  int64_t items = 0, item_tokens = 1;
  int64_t scratch_floats = 0;  // per worker, a multiple of 16
  size_t bytes() const { return size_t(threads) * size_t(scratch_floats) * sizeof(float); }
};

Plan make_plan(const core::SinkhornProblem& p, int num_threads) {
  const kernels::SinkhornKernels& k = kernels_of(p);
  Plan plan;
  plan.threads = resolve_threads(num_threads);
  plan.item_tokens = k.item_tokens;
  plan.items = kernels::ceil_div(p.T, plan.item_tokens);
  plan.scratch_floats = p.T > 0 ? kernels::align16(k.scratch_floats(shape_of(p))) : 0;  // an empty call runs nothing
  return plan;
}

Staging forward_staging(core::SinkhornProblem* p) {
  Staging staging;
  if (p->T == 0) return staging;
  staging.add(&p->z, View::token_rows, false);
  staging.add(&p->h_res, View::token_rows, true);
  return staging;
}

Staging backward_staging(core::SinkhornProblem* p) {
  Staging staging;
  if (p->T == 0) return staging;
  staging.add(&p->grad_h_res, View::token_rows, false);
  staging.add(&p->z, View::token_rows, false);
  staging.add(&p->grad_z, View::token_rows, true);
  return staging;
}

template <class Body>
void for_items(const core::SinkhornProblem& p, const Plan& plan, void* workspace, Body&& body) {
  float* scratch = static_cast<float*>(workspace);
  runtime::parallel_for(plan.items, plan.threads, [&](int64_t item, int worker) {
    const int64_t t0 = item * plan.item_tokens;
    body(scratch + worker * plan.scratch_floats, t0, std::min(p.T, t0 + plan.item_tokens));
  });
}

}  // namespace

size_t forward_workspace_bytes(const core::SinkhornProblem& problem, int num_threads) {
  core::SinkhornProblem staged = problem;
  return forward_staging(&staged).workspace_bytes(make_plan(problem, num_threads).bytes());
}

size_t backward_workspace_bytes(const core::SinkhornProblem& problem, int num_threads) {
  core::SinkhornProblem staged = problem;
  return backward_staging(&staged).workspace_bytes(make_plan(problem, num_threads).bytes());
}

Status run_forward(const core::SinkhornProblem& original, void* workspace, size_t workspace_bytes, int num_threads) {
  const Plan plan = make_plan(original, num_threads);
  core::SinkhornProblem p = original;
  Staging staging = forward_staging(&p);
  if (Status s = workspace_error(staging.workspace_bytes(plan.bytes()), workspace_bytes, workspace); !s.ok()) return s;
  if (p.T == 0) return {};
  staging.gather(workspace, plan.bytes(), plan.threads);
  kernels::SinkhornForwardOperands o;
  o.shape = shape_of(p);
  o.z = token_rows<const float>(p.z);
  o.h_res = token_rows<float>(p.h_res);
  o.caches = {p.norm_out, p.sum_out};
  const kernels::SinkhornKernels& k = kernels_of(p);
  for_items(p, plan, workspace, [&](float* scratch, int64_t t0, int64_t t1) { k.forward(o, scratch, t0, t1); });
  staging.scatter(plan.threads);
  return {};
}

Status run_backward(const core::SinkhornProblem& original, void* workspace, size_t workspace_bytes, int num_threads) {
  const Plan plan = make_plan(original, num_threads);
  core::SinkhornProblem p = original;
  Staging staging = backward_staging(&p);
  if (Status s = workspace_error(staging.workspace_bytes(plan.bytes()), workspace_bytes, workspace); !s.ok()) return s;
  if (p.T == 0) return {};
  staging.gather(workspace, plan.bytes(), plan.threads);
  kernels::SinkhornBackwardOperands o;
  o.shape = shape_of(p);
  o.grad_h_res = token_rows<const float>(p.grad_h_res);
  o.caches = {p.norm_out, p.sum_out};
  o.z = token_rows<const float>(p.z);
  o.grad_z = token_rows<float>(p.grad_z);
  const kernels::SinkhornKernels& k = kernels_of(p);
  for_items(p, plan, workspace, [&](float* scratch, int64_t t0, int64_t t1) { k.backward(o, scratch, t0, t1); });
  staging.scatter(plan.threads);
  return {};
}

Status run_forward_in_thread_workspace(const core::SinkhornProblem& problem, int num_threads) {
  return in_thread_workspace(forward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_forward(problem, workspace, bytes, num_threads);
  });
}

Status run_backward_in_thread_workspace(const core::SinkhornProblem& problem, int num_threads) {
  return in_thread_workspace(backward_workspace_bytes(problem, num_threads), [&](void* workspace, size_t bytes) {
    return run_backward(problem, workspace, bytes, num_threads);
  });
}

}  // namespace mhc::ops::sinkhorn
